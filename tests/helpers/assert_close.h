/* assert_close.h — comparing f32 results that two code paths compute with
 * different operation orders (cmocka tests only).
 *
 * Bit-identical results are a property only of identical operation
 * sequences: the same BLAS call with the same shapes, strides and values, or
 * the same C loop.  Two GEMM calls of different shapes over the same rows
 * (a range decode vs a full decode, a batch of 20 vs 30 rows) may run
 * different micro-kernels and accumulate in a different order: OpenBLAS's
 * Haswell, Zen and SkylakeX kernels differ in the last bits, Sandybridge
 * happens not to.  Such comparisons use a tolerance suited to f32
 * accumulation:
 *
 *     |got - want| <= rel * (|want| + rms(want))
 *
 * rms(want) bounds the error of an element that came out near zero by
 * cancellation, which is absolute, not relative, in the terms summed. */
#ifndef SCDB_TEST_ASSERT_CLOSE_H
#define SCDB_TEST_ASSERT_CLOSE_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* the default: f32 eps (1.2e-7) times a few hundred terms summed */
#define SCDB_TEST_F32_REL 2e-5

/* index of the first element outside the tolerance, or -1 */
static inline long scdb_test_first_far(const float *got, const float *want, size_t n, double rel)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)want[i] * want[i];
    double rms = n ? sqrt(ss / (double)n) : 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= rel * (fabs(want[i]) + rms))) return (long)i;   /* NaN fails too */
    }
    return -1;
}

/* one scalar within an absolute tolerance, as doubles (NaN fails) */
#define assert_near(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (double)(tol))

#define assert_f32_close(got, want, n, rel)                                                  \
    do {                                                                                   \
        long far_ = scdb_test_first_far((got), (want), (size_t)(n), (rel));                \
        if (far_ >= 0)                                                                     \
            print_error("element %ld: %.9g vs %.9g (rel tolerance %g)\n", far_,            \
                        (double)(got)[far_], (double)(want)[far_], (double)(rel));         \
        assert_true(far_ < 0);                                                             \
    } while (0)

#endif
