/*
 * fuzz.h — what the fuzz targets share (tests/fuzz/README.md has the list).
 *
 * Each fuzz_NAME.c defines LLVMFuzzerTestOneInput(data, size) for one
 * parser and, when it needs one-time state, LLVMFuzzerInitialize.  Built two
 * ways (tests/fuzz/CMakeLists.txt):
 *
 *   SCDB_FUZZ build (clang)   -fsanitize=fuzzer,address,undefined: libFuzzer's
 *                             main; scripts/fuzz.sh runs it on corpus/NAME
 *   every other build         replay_main.c: runs each file of corpus/NAME
 *                             once (CTest test_fuzz_NAME), so every
 *                             regression input is replayed by the suite,
 *                             under ASan in the sanitizer build
 *
 * A target aborts (the fuzzer's "crash") only on a broken invariant — a
 * handle returned for an input its own checks should refuse, a request left
 * without a reply, an out-of-bounds read the sanitizers see; bad input
 * answered with an error code is the expected outcome.
 */
#ifndef SCDB_FUZZ_H
#define SCDB_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A broken invariant: say which and abort (the fuzzer saves the input). */
#define FUZZ_CHECK(cond)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                               \
        }                                                                          \
    } while (0)

/* The input as a file: an anonymous memory file holding data, named by its
 * /proc/self/fd path (for loaders that take a path).  Returns the fd (close
 * it after use) or aborts if the kernel refuses (not the input's fault). */
int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t cap);

#endif
