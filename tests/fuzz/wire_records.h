/*
 * wire_records.h — the input format of fuzz_wire (and of the seeds
 * make_seeds.c writes for it): a sequence of records, each one request
 * from one of four clients the target keeps registered, or one write into
 * shared memory a client could make.
 *
 *   record  := ctl:u8  n_payload:u8  len:u16le  bytes[len]
 *              ( plen:u16le  payload[plen] ) x n_payload
 *
 *   ctl bits 0-1  the client: 0 raw producer, 1 raw consumer (model tiny,
 *                 codebook raw/tiny), 2 scd producer (tiny, tiny-scd),
 *                 3 scd consumer (cons, tiny-scd)
 *   ctl bit 2     STAMP: bytes must parse as a scdb.Request; the target sets
 *                 its version, its client token (the client's, or 0 with
 *                 bit 4) and maps arena / session numbers k = 1, 2, ... to
 *                 the k-th arena / session this input created (others are
 *                 left as they are), then packs it again.  Without STAMP
 *                 the bytes go to the broker as they are.
 *   ctl bit 3     WRITE: not a request: bytes = arena k (u8), offset
 *                 (u32le), then data copied into that arena's shared memory
 *                 at offset (mod its size) -- what a client may do to the
 *                 headers, accumulators and states it shares with the
 *                 broker at any time.
 *   ctl bit 4     with STAMP: anonymous (client token 0)
 *
 * At most WR_MAX_RECORDS records are run; a record cut short by the end of
 * the input is run with what is there.
 */
#ifndef SCDB_FUZZ_WIRE_RECORDS_H
#define SCDB_FUZZ_WIRE_RECORDS_H

#define WR_CLIENT_MASK 3u
#define WR_STAMP 4u
#define WR_WRITE 8u
#define WR_ANON 16u
#define WR_MAX_RECORDS 32
#define WR_MAX_PAYLOAD 8

/* The broker the target runs (models tiny and cons: 2 layers x 2 KV heads
 * x 4, 4 query heads; 4-token blocks), also used by make_seeds.  The three
 * %s are the seeds folder (codebook, pair, policy). */
#define WR_BLOCK_TOKENS 4
#define WR_CONFIG_FMT                                                               \
    "block_tokens = 4\n"                                                            \
    "workers = 1\n"                                                                 \
    "no_sync = 1\n"                                                                 \
    "max_tokens = 2048\n"                                                           \
    "max_request_bytes = 256KiB\n"                                                  \
    "disk_capacity = 4MiB\n"                                                        \
    "hot_capacity = 256KiB\n"                                                       \
    "max_arenas_per_client = 8\n"                                                   \
    "max_arena_bytes = 1MiB\n"                                                      \
    "arena_total_bytes = 8MiB\n"                                                    \
    "max_inflight = 64\n"                                                           \
    "\n[model tiny]\nn_layers = 2\nn_kv_heads = 2\nhead_dim = 4\nmax_seq_len = 64\n" \
    "n_heads = 4\n"                                                                 \
    "\n[model cons]\nn_layers = 2\nn_kv_heads = 2\nhead_dim = 4\nmax_seq_len = 64\n" \
    "n_heads = 4\n"                                                                 \
    "\n[codebook tiny-scd]\nkind = scd\nmodel = tiny\nfile = %s/codebook.safetensors\n" \
    "\n[pair tiny-scd cons]\ndecoder = scd\nfile = %s/pair.safetensors\n"          \
    "\n[policy learned]\nfile = %s/policy.safetensors\n"

#endif
