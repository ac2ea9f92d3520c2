/* fuzz_lookup_index.c — schema/lookup_index.c's reader (what libscdb runs
 * on the sealed memfd the broker hands it).  Input: one mode byte, then
 * the object's bytes.  Mode bit 0: the object is exactly
 * those bytes; else it is sized as its header's capacity says (when that
 * is a power of two up to 64 Ki slots), zero-padded, so the fuzzer need
 * not write 36 KiB of slots.  Bit 1: the fixed header fields (magic,
 * version, sizes) are made valid first, so mutations reach the slots.
 * Bit 2: the object is left unsealed (the reader must refuse it).  An
 * index it opens is probed with keys from its own slots and from the
 * input: every probe stays inside the mapping, whatever the slots hold. */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include "fuzz.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lookup_index.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    scdb_log_set_level(SCDB_LOG_OFF);
    return 0;
}

/* A memfd holding img, sealed as the broker seals its index unless
 * unsealed. */
static int put_object(const uint8_t *img, size_t size, int unsealed)
{
    int fd = memfd_create("scdb-fuzz-lix", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    size_t off = 0;

    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(ftruncate(fd, (off_t)size) == 0);
    while (off < size) {
        ssize_t w = write(fd, img + off, size - off);
        FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    /* F_SEAL_FUTURE_WRITE, as the broker seals its index: F_SEAL_WRITE
     * waits for the pages' transient references (a page just written can
     * sit in another CPU's LRU batch) and fails EBUSY after ~150 ms, which
     * a loaded 2-core machine hit after 63k runs */
    if (!unsealed)
        FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
                                             F_SEAL_SEAL) == 0);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t mode = size ? data[0] : 0;
    const uint8_t *body = size ? data + 1 : data;
    size_t blen = size ? size - 1 : 0, osize = blen;
    scdb_lix_header h;
    scdb_key keys[16];
    size_t nk = 0, present;
    uint8_t *img;
    scdb_lix *ix = NULL;
    scdb_err e;
    int fd;

    memset(&h, 0, sizeof h);
    memcpy(&h, body, blen < sizeof h ? blen : sizeof h);
    if (!(mode & 1) && h.capacity >= SCDB_LIX_MIN_CAPACITY && h.capacity <= (1u << 16) &&
        !(h.capacity & (h.capacity - 1)))
        osize = SCDB_LIX_HEADER_BYTES + (size_t)h.capacity * SCDB_LIX_SLOT_BYTES;
    img = calloc(1, osize ? osize : 1);
    FUZZ_CHECK(img);
    memcpy(img, body, blen < osize ? blen : osize);
    if ((mode & 2) && osize >= sizeof h) {
        scdb_lix_header *w = (scdb_lix_header *)img;
        w->magic = SCDB_LIX_MAGIC;
        w->version = SCDB_LIX_VERSION;
        w->header_bytes = SCDB_LIX_HEADER_BYTES;
        w->slot_bytes = SCDB_LIX_SLOT_BYTES;
    }
    fd = put_object(img, osize, mode & 4);
    e = scdb_lix_open_fd(fd, 0, 0, &ix);
    close(fd);
    FUZZ_CHECK((ix != NULL) == (e == SCDB_OK || e == SCDB_ECLOSED));
    FUZZ_CHECK(!(mode & 4) || e == SCDB_EMISMATCH);
    if (ix) {
        char next[SCDB_LIX_NAME_MAX] = "";
        /* keys of the first used slots (they may match), then input bytes */
        for (size_t off = SCDB_LIX_HEADER_BYTES; off + SCDB_LIX_SLOT_BYTES <= osize && nk < 8;
             off += SCDB_LIX_SLOT_BYTES) {
            uint64_t tag;
            memcpy(&tag, img + off + 16, 8);
            if (tag == SCDB_LIX_USED) memcpy(keys[nk++].b, img + off, 16);
        }
        for (size_t off = 0; off + 16 <= blen && nk < 16; off += 61)
            memcpy(keys[nk++].b, body + off, 16);
        e = scdb_lix_match(ix, keys, nk, &present);
        FUZZ_CHECK(e != SCDB_OK || present <= nk);
        if (scdb_lix_retired(ix, next)) FUZZ_CHECK(memchr(next, 0, sizeof next) != NULL);
        {   /* closed: retired, or its liveness lock's owner is dead */
            const scdb_lix_header *hh = (const scdb_lix_header *)img;
            uint32_t w = atomic_load(&hh->alive_mutex.futex);
            int dead = atomic_load(&hh->alive_lock) == 1 &&
                       (!(w & SCDB_LIX_FUTEX_TID_MASK) || (w & SCDB_LIX_FUTEX_OWNER_DIED));
            FUZZ_CHECK((e == SCDB_ECLOSED) == (scdb_lix_retired(ix, NULL) == 1 || dead) ||
                       e == SCDB_EBUSY || e == SCDB_ETIMEDOUT);
        }
        scdb_lix_close(&ix);
    }
    free(img);
    return 0;
}
