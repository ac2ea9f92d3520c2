/*
 * wire.h — what the broker and libscdb must agree on besides the protobuf
 * messages of schema/scdb.proto: the protocol version, the default
 * endpoint, the shared-memory arena header and the raw-KV payload layout.
 * Header-only (no code to link), so the client library includes it without
 * depending on the broker library.  Layouts are described in
 * schema/FORMATS.md, "Wire protocol and shared-memory arenas".
 *
 *   arena (one POSIX shm object, mapped by broker and client)
 *   0                         4096                              size
 *   +-------------------------+---------------------------------+
 *   | scdb_arena_header       | kind 0: scdb_kv_cache buffer    |
 *   | magic, geometry, n, gen | pos | K [L][cap][D] | V [...]   |
 *   |                         | kind 1: producer states (f32)   |
 *   |                         | H_in [L][n][d_model], n <= cap  |
 *   +-------------------------+---------------------------------+
 *   kind 2 (CUDA IPC): the header alone in shm; the cache (pos | K | V,
 *   as kind 0) is one device allocation opened with cudaIpcOpenMemHandle
 *
 *   raw payload of one block of T tokens (codebook kind "raw"):
 *     K [L][T][D] then V [L][T][D], element type F16 or F32, little endian,
 *     K after RoPE at the block's absolute positions (what the cache holds).
 */
#ifndef SCDB_WIRE_H
#define SCDB_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Request.version / Reply.version.  Bump on any change an old peer would
 * misread. */
#define SCDB_PROTO_VERSION 1u

/* Arena header; the KV cache starts at cache_offset (64-byte aligned). */
#define SCDB_ARENA_MAGIC "SCDBAREN"
#define SCDB_ARENA_VERSION 1u
#define SCDB_ARENA_HEADER_BYTES 4096u

typedef struct scdb_arena_header {
    char magic[8];             /* "SCDBAREN"                                */
    uint32_t version;          /* SCDB_ARENA_VERSION                        */
    uint32_t header_bytes;     /* SCDB_ARENA_HEADER_BYTES                   */
    uint64_t arena_id;
    uint32_t n_layers, n_kv_heads, head_dim, capacity;
    uint32_t dtype;            /* scdb_dtype of K/V: SCDB_F32               */
    uint32_t kind;             /* SCDB_ARENA_KIND_KV, SCDB_ARENA_KIND_STATES
                                  (then n_kv_heads = 1, head_dim = d_model)  */
    uint64_t cache_offset;     /* = header_bytes                            */
    uint64_t cache_bytes;      /* scdb_kv_cache_bytes(...)                  */
    uint32_t n;                /* live slots; the client writes it before a
                                  get, the broker after                      */
    uint32_t gen;              /* bumped by the broker after every get      */
} scdb_arena_header;

#define SCDB_ARENA_KIND_KV 0u
#define SCDB_ARENA_KIND_STATES 1u
/* A KV arena whose cache lives in the broker's CUDA device memory (CUDA IPC):
 * the shm object is the header alone; cache_offset (0) and cache_bytes are
 * within the device allocation the ArenaCreateReply's handle opens, laid
 * out as kind 0's cache (pos, K, V). */
#define SCDB_ARENA_KIND_KV_CUDA 2u

/* Payload format version of raw-KV namespaces (part of their store
 * namespace id, with the dtype). */
#define SCDB_RAW_FORMAT_VERSION 1u

/* Raw payload bytes of one token of a model: K and V of every layer. */
static inline uint64_t scdb_raw_token_bytes(int n_layers, int n_kv_heads, int head_dim,
                                            size_t elem_size)
{
    return 2ull * (uint64_t)n_layers * (uint64_t)n_kv_heads * (uint64_t)head_dim * elem_size;
}

/* The default endpoint: $SCDB_ENDPOINT, else ipc://$XDG_RUNTIME_DIR/scdb/broker.sock,
 * else ipc:///tmp/scdb-<uid>/broker.sock.  Returns buf. */
static inline const char *scdb_default_endpoint(char *buf, size_t len)
{
    const char *e = getenv("SCDB_ENDPOINT");
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (e && *e)
        snprintf(buf, len, "%s", e);
    else if (x && *x)
        snprintf(buf, len, "ipc://%s/scdb/broker.sock", x);
    else
        snprintf(buf, len, "ipc:///tmp/scdb-%u/broker.sock", (unsigned)getuid());
    return buf;
}

#endif /* SCDB_WIRE_H */
