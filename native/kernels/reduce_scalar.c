/* The portable scalar baseline: every dtype x op, always built, always correct. The SIMD variants
 * (x86/reduce_*.c) override entries of this table and use these kernels for their tails. */
#include "kernels/half_float.h"
#include "kernels/kernel_table.h"
#include "kernels/two_sum.h"
#include "kernels/unaligned.h"

#include <math.h>

/* One element-wise loop for every dtype x op below: o[i] = EXPR, where EXPR reads x[i] and y[i]. */
#define ELEMENTWISE_KERNEL(name, T, EXPR)                                                                     \
    static void name(void *out, const void *a, const void *b, int64_t n)                                      \
    {                                                                                                         \
        const T *x = a, *y = b;                                                                               \
        T *o = out;                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                                       \
            o[i] = EXPR;                                                                                      \
    }

/* Integers: computed in the unsigned type so overflow wraps (as numpy does) instead of being C UB. */
#define DEFINE_INT_KERNELS(tname, T, U)                                                                       \
    ELEMENTWISE_KERNEL(tname##_sum, T, (T)(U)((U)x[i] + (U)y[i]))                                             \
    ELEMENTWISE_KERNEL(tname##_prod, T, (T)(U)((U)x[i] * (U)y[i]))                                            \
    ELEMENTWISE_KERNEL(tname##_min, T, x[i] < y[i] ? x[i] : y[i])                                             \
    ELEMENTWISE_KERNEL(tname##_max, T, x[i] > y[i] ? x[i] : y[i])

/* uint8 * uint8 promotes to int, so the multiply must go through unsigned int to stay defined. */
DEFINE_INT_KERNELS(i8, int8_t, unsigned)
DEFINE_INT_KERNELS(u8, uint8_t, unsigned)
DEFINE_INT_KERNELS(i32, unaligned_i32, uint32_t)
DEFINE_INT_KERNELS(i64, unaligned_i64, uint64_t)

/* float32/float64/bfloat16 min/max follow np.minimum/np.maximum: a NaN in a wins, then a NaN in b (the
 * comparison fails), and equal operands (+0/-0) give b. */
#define DEFINE_FLOAT_KERNELS(tname, T)                                                                        \
    ELEMENTWISE_KERNEL(tname##_sum, T, x[i] + y[i])                                                           \
    ELEMENTWISE_KERNEL(tname##_prod, T, x[i] * y[i])                                                          \
    ELEMENTWISE_KERNEL(tname##_min, T, (isnan(x[i]) || x[i] < y[i]) ? x[i] : y[i])                            \
    ELEMENTWISE_KERNEL(tname##_max, T, (isnan(x[i]) || x[i] > y[i]) ? x[i] : y[i])

DEFINE_FLOAT_KERNELS(f32, unaligned_f32)
DEFINE_FLOAT_KERNELS(f64, unaligned_f64)

/* float16/bfloat16: combined in float32 and rounded once. float32 has more than 2p+2 bits for both, so
 * rounding a float32 sum or product again to 16 bits equals rounding the exact result (no double-rounding
 * error), which is also what numpy and ml_dtypes compute. min/max select an input unchanged: TAKES_A(a, b)
 * on the widened values says whether a is kept, and a NaN in a always is (both inputs are read first, so
 * the compiler may vectorize the loop: it would not add a load of b that the C code might skip). */
#define HALF_SELECT(name, to_f32, TAKES_A)                                                                    \
    static inline uint16_t name(uint16_t a, uint16_t b)                                                       \
    {                                                                                                         \
        float fa = to_f32(a), fb = to_f32(b);                                                                 \
        return (isnan(fa) || TAKES_A(fa, fb)) ? a : b;                                                        \
    }
#define DEFINE_HALF_KERNELS(tname, to_f32, from_f32, MIN_TAKES_A, MAX_TAKES_A)                                \
    HALF_SELECT(tname##_min_of, to_f32, MIN_TAKES_A)                                                          \
    HALF_SELECT(tname##_max_of, to_f32, MAX_TAKES_A)                                                          \
    ELEMENTWISE_KERNEL(tname##_sum, unaligned_u16, from_f32(to_f32(x[i]) + to_f32(y[i])))                     \
    ELEMENTWISE_KERNEL(tname##_prod, unaligned_u16, from_f32(to_f32(x[i]) * to_f32(y[i])))                    \
    ELEMENTWISE_KERNEL(tname##_min, unaligned_u16, tname##_min_of(x[i], y[i]))                                \
    ELEMENTWISE_KERNEL(tname##_max, unaligned_u16, tname##_max_of(x[i], y[i]))

/* numpy's float16 min/max keep a on ties (a <= b); ml_dtypes' bfloat16 ones keep b, like float32. */
#define LESS_EQUAL(a, b) ((a) <= (b))
#define GREATER_EQUAL(a, b) ((a) >= (b))
#define LESS(a, b) ((a) < (b))
#define GREATER(a, b) ((a) > (b))
DEFINE_HALF_KERNELS(f16, pycoll_f16_to_f32, pycoll_f32_to_f16, LESS_EQUAL, GREATER_EQUAL)
DEFINE_HALF_KERNELS(bf16, pycoll_bf16_to_f32, pycoll_f32_to_bf16, LESS, GREATER)

/* Combine two compensated pairs: TwoSum of the leading parts, the compensations and that error added, then a
 * second TwoSum to renormalise. Fast2Sum would not do for the second step: when the leading parts cancel
 * (s == 0) the compensation is the larger term, and Fast2Sum needs |s| >= |comp|. A sum that is not finite
 * keeps a zero compensation, and a zero compensation leaves the sum's sign alone (two_sum.h). */
#define DEFINE_COMBINE(tname, T, two_sum, suffix)                                                             \
    static void tname##_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,     \
                                int64_t n)                                                                    \
    {                                                                                                         \
        T *ds = dst_sum, *dc = dst_comp;                                                                      \
        const T *ss = src_sum, *sc = src_comp;                                                                \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            T e, e2;                                                                                          \
            T s = two_sum(ds[i], ss[i], &e);                                                                  \
            T c = pycoll_signed_zero_##suffix((dc[i] + sc[i]) + pycoll_finite_or_zero_##suffix(s, e));         \
            T s2 = two_sum(s, c, &e2);                                                                        \
            ds[i] = s2;                                                                                       \
            dc[i] = pycoll_finite_or_zero_##suffix(s2, e2);                                                   \
        }                                                                                                     \
    }

DEFINE_COMBINE(f32, unaligned_f32, pycoll_two_sum_f32, f32)
DEFINE_COMBINE(f64, unaligned_f64, pycoll_two_sum_f64, f64)

/* Complex products by the schoolbook formulas, each product rounded: no fused multiply-add (built with
 * -ffp-contract=off), so every CPU and variant gives the same bits, which NumPy's own loops, where they fuse
 * one, may miss by an ulp on inexact products; and no C Annex G recovery of infinities from NaN parts, which
 * NumPy does not do either. Sum and avg run part by part on the real kernels (dispatch.c); min and max stay
 * NULL: complex numbers have no order. */
#define DEFINE_COMPLEX_PROD(tname, T)                                                                         \
    static void tname##_prod(void *out, const void *a, const void *b, int64_t n)                              \
    {                                                                                                         \
        const T *x = a, *y = b;                                                                               \
        T *o = out;                                                                                           \
        for (int64_t i = 0; i < 2 * n; i += 2) {                                                              \
            const T re = x[i] * y[i] - x[i + 1] * y[i + 1], im = x[i] * y[i + 1] + x[i + 1] * y[i];          \
            o[i] = re;                                                                                        \
            o[i + 1] = im;                                                                                    \
        }                                                                                                     \
    }

DEFINE_COMPLEX_PROD(c64, unaligned_f32)
DEFINE_COMPLEX_PROD(c128, unaligned_f64)

#define SET_ROW(table, dtype, tname)                                                                          \
    do {                                                                                                      \
        (table)->binary[dtype][PYCOLL_SUM] = tname##_sum;                                                     \
        (table)->binary[dtype][PYCOLL_AVG] = tname##_sum;                                                     \
        (table)->binary[dtype][PYCOLL_PROD] = tname##_prod;                                                   \
        (table)->binary[dtype][PYCOLL_MIN] = tname##_min;                                                     \
        (table)->binary[dtype][PYCOLL_MAX] = tname##_max;                                                     \
    } while (0)

void pycoll_scalar_kernels(pycoll_kernel_table_t *table)
{
    table->name = "scalar";
    SET_ROW(table, PYCOLL_INT8, i8);
    SET_ROW(table, PYCOLL_UINT8, u8);
    SET_ROW(table, PYCOLL_INT32, i32);
    SET_ROW(table, PYCOLL_INT64, i64);
    SET_ROW(table, PYCOLL_FLOAT16, f16);
    SET_ROW(table, PYCOLL_BFLOAT16, bf16);
    SET_ROW(table, PYCOLL_FLOAT32, f32);
    SET_ROW(table, PYCOLL_FLOAT64, f64);
    table->binary[PYCOLL_COMPLEX64][PYCOLL_PROD] = c64_prod;
    table->binary[PYCOLL_COMPLEX128][PYCOLL_PROD] = c128_prod;
    table->combine_f32 = f32_combine;
    table->combine_f64 = f64_combine;
}
