/* alloc_fault.c — alloc_fault.h: the --wrap'ed allocators. */
#include "alloc_fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static atomic_long countdown = -1;   /* allocations left before the one that fails */
static atomic_int fired;

static int fail_now(void)
{
    long c = atomic_load_explicit(&countdown, memory_order_relaxed);
    if (c < 0) return 0;
    /* the thread that takes it from 0 to -1 fails; the others go on */
    while (c >= 0) {
        if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
            if (c == 0) {
                atomic_store(&fired, 1);
                errno = ENOMEM;
                return 1;
            }
            return 0;
        }
    }
    return 0;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }

void alloc_fault_arm(long n)
{
    atomic_store(&fired, 0);
    atomic_store(&countdown, n);
}

void alloc_fault_disarm(void) { atomic_store(&countdown, -1); }

int alloc_fault_fired(void) { return atomic_load(&fired); }
