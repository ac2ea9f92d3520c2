/*
 * alloc_fault.h — SQLite-style allocation fault injection for one test
 * executable: fail the Nth allocation, for every N until the sequence under
 * test runs clean.
 *
 * Include it in exactly one file of a test linked with
 *     -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc
 * Allocations made by code linked statically (scdb's libraries, the test)
 * go through the wrappers; those of shared libraries (hiredis, LMDB, libc's
 * own strdup) do not.  Not thread-safe: arm it only while no other thread
 * allocates through the wrappers.
 *
 *     for (long n = 0;; n++) {
 *         alloc_fault_arm(n);            // the allocation after n more fails
 *         run_the_sequence();            // every call: OK or SCDB_ENOMEM
 *         bool clean = !alloc_fault_fired();
 *         alloc_fault_disarm();
 *         if (clean) break;
 *     }
 */
#ifndef SCDB_TEST_ALLOC_FAULT_H
#define SCDB_TEST_ALLOC_FAULT_H

#include <stdbool.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);

static long alloc_fault_countdown = -1;
static bool alloc_fault_hit;

static inline bool alloc_fault_now(void)
{
    if (alloc_fault_countdown < 0) return false;
    if (alloc_fault_countdown-- == 0) {
        alloc_fault_hit = true;
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { return alloc_fault_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return alloc_fault_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return alloc_fault_now() ? NULL : __real_realloc(p, n); }

static inline void alloc_fault_arm(long n)
{
    alloc_fault_hit = false;
    alloc_fault_countdown = n;
}

static inline bool alloc_fault_fired(void) { return alloc_fault_hit; }

static inline void alloc_fault_disarm(void) { alloc_fault_countdown = -1; }

#endif /* SCDB_TEST_ALLOC_FAULT_H */
