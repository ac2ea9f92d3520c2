/*
 * alloc_fault.h — allocation fault injection for a cmocka test (SQLite's
 * malloc fault simulator): fail the Nth malloc/calloc/realloc, for every N
 * until the sequence under test runs clean.
 *
 * The test executable is linked with -Wl,--wrap=malloc,--wrap=calloc,
 * --wrap=realloc (tests/CMakeLists.txt: scdb_wrap_allocator), so every
 * allocation of the code statically linked into it (scdb's libraries, the
 * test) goes through the wrappers below; those of shared libraries
 * (hiredis, LMDB, libc's own strdup) do not, except cJSON, which
 * alloc_fault_cjson() routes through them with cJSON_InitHooks.  Include
 * this header in exactly one file of the executable.  Not thread-safe: arm
 * it only while no other thread allocates through the wrappers.
 *
 *   for (long n = 0;; n++) {
 *       alloc_fault_arm(n);                  // allocation n (from 0) fails
 *       rc = call();                         // OK or SCDB_ENOMEM, no leak
 *       alloc_fault_disarm();
 *       if (!alloc_fault_hit()) break;       // ran without reaching fault n
 *       ... assert rc is SCDB_ENOMEM (or what cJSON makes of it) ...
 *   }
 */
#ifndef SCDB_TEST_ALLOC_FAULT_H
#define SCDB_TEST_ALLOC_FAULT_H

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static long alloc_fault_at = -1;   /* index of the allocation to fail; -1: none */
static long alloc_fault_seen;
static bool alloc_fault_failed;

static bool alloc_fault_now(void)
{
    if (alloc_fault_at < 0) return false;
    if (alloc_fault_seen++ == alloc_fault_at) {
        alloc_fault_failed = true;
        errno = ENOMEM;
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n) { return alloc_fault_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return alloc_fault_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return alloc_fault_now() ? NULL : __real_realloc(p, n); }

static inline void alloc_fault_arm(long n)
{
    alloc_fault_seen = 0;
    alloc_fault_failed = false;
    alloc_fault_at = n;
}

static inline void alloc_fault_disarm(void) { alloc_fault_at = -1; }

/* Did the armed fault fire (the sequence reached allocation n)? */
static inline bool alloc_fault_hit(void) { return alloc_fault_failed; }
static inline bool alloc_fault_fired(void) { return alloc_fault_failed; }

/* Route cJSON's allocations through the wrappers (on = 0: back to libc). */
static inline void alloc_fault_cjson(int on)
{
    cJSON_Hooks hooks = {.malloc_fn = __wrap_malloc, .free_fn = free};
    cJSON_InitHooks(on ? &hooks : NULL);
}

#endif /* SCDB_TEST_ALLOC_FAULT_H */
