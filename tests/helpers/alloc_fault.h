/*
 * alloc_fault.h — SQLite-style allocation fault injection for a test
 * linked with scdb_wrap_allocator (tests/CMakeLists.txt: GNU ld --wrap of
 * malloc, calloc and realloc) and helpers/alloc_fault.c: once armed with
 * n, the n-th allocation from then on (0 = the next one), in any thread,
 * fails with ENOMEM.  Only code linked statically into the test goes
 * through the wrappers (the scdb libraries, the test itself); shared
 * libraries (ZeroMQ, protobuf-c, LMDB, hiredis, libc) allocate as usual,
 * except cJSON, which alloc_fault_cjson() routes through them.
 *
 * The pattern: for n = 0, 1, 2, ...: set up, arm(n), make the call,
 * disarm; the call must return a clean error (or succeed) and leak nothing
 * (the ASan build's leak check); stop at the first n whose call ran
 * without the fault firing: every allocation it makes has then failed once.
 */
#ifndef SCDB_TEST_ALLOC_FAULT_H
#define SCDB_TEST_ALLOC_FAULT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdlib.h>

void alloc_fault_arm(long n);
void alloc_fault_disarm(void);
/* 1 if an allocation failed since the last arm. */
int alloc_fault_fired(void);
static inline int alloc_fault_hit(void) { return alloc_fault_fired(); }

void *__wrap_malloc(size_t n);

/* Route cJSON's allocations through the wrappers (on = 0: back to libc). */
static inline void alloc_fault_cjson(int on)
{
    cJSON_Hooks hooks = {.malloc_fn = __wrap_malloc, .free_fn = free};
    cJSON_InitHooks(on ? &hooks : NULL);
}

#endif
