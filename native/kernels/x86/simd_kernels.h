/* Internal: the SIMD kernels, written once and compiled once per target, as NumPy's dispatch does. A target
 * file (reduce_avx2.c, reduce_avx512.c) is compiled with its own -m flags and, before including this file,
 * defines its vector layer:
 *   SIMD_TABLE            the name of its table function (kernel_table.h)
 *   SIMD_NAME             the table's name, "avx2"
 *   VECTOR_BYTES          the width of one vector
 *   SIMD(op), SIMD_SI(op) its intrinsic for a generic op: SIMD(add_ps) is _mm256_add_ps on AVX2, and
 *                         SIMD_SI(and_si) is _mm256_and_si256 (the whole-register ones end in the width)
 *   HALF_SI(op)           the same for the half-width register that holds the 16-bit floats of one vec_ps
 *   SIMD_TYPE(suffix), HALF_TYPE
 *                         the register types: SIMD_TYPE(d) is __m256d on AVX2, HALF_TYPE __m128i
 *   min_ps, max_ps, min_pd, max_pd
 *                         np.minimum/np.maximum: a NaN in a wins (vminps/vmaxps alone return b)
 *   min_epi64, max_epi64
 *   f16_widen, bf16_widen, f16_narrow
 *                         16-bit floats to float32 exactly, and float32 to float16 rounded to nearest-even
 *   where_nan_epi32(v, nan, other), narrow_epi32
 *                         per lane nan where v is NaN, else other; 32-bit lanes (< 2^16) to a vec_half
 *   finite_or_zero_ps(s, e), finite_or_zero_pd(s, e)
 *                         per lane e where s is finite (s - s == 0), else +0: two_sum.h's rule for special values
 *   HALF_SELECT(hx, hy, a, b, PREDICATE)
 *                         per lane hx where a is NaN or PREDICATE(a, b) holds, else hy (a macro: the predicate
 *                         must stay an immediate)
 * Every kernel gives the same results, bit for bit, as the scalar baseline (reduce_scalar.c). */
#ifndef PYCOLL_SIMD_KERNELS_H
#define PYCOLL_SIMD_KERNELS_H

#include "kernels/kernel_table.h"
#include "kernels/x86/vector_loop.h"

typedef SIMD_TYPE() vec_ps;
typedef SIMD_TYPE(d) vec_pd;
typedef SIMD_TYPE(i) vec_si;
typedef HALF_TYPE vec_half;

static inline vec_si load_si(const void *p) { return SIMD_SI(loadu_si)((const vec_si *)p); }
static inline void store_si(void *p, vec_si v) { SIMD_SI(storeu_si)((vec_si *)p, v); }
static inline vec_half load_h(const void *p) { return HALF_SI(loadu_si)((const vec_half *)p); }
static inline void store_h(void *p, vec_half v) { HALF_SI(storeu_si)((vec_half *)p, v); }

/* bfloat16 rounding by integer arithmetic (as pycoll_f32_to_bf16): add 0x7fff plus the kept lsb; NaNs are
 * narrowed by truncation with the quiet bit set, since rounding could carry them into infinity. */
static inline vec_half bf16_narrow(vec_ps v)
{
    vec_si x = SIMD_SI(castps_si)(v);
    vec_si high = SIMD(srli_epi32)(x, 16);
    vec_si lsb = SIMD_SI(and_si)(high, SIMD(set1_epi32)(1));
    vec_si rounded = SIMD(srli_epi32)(SIMD(add_epi32)(SIMD(add_epi32)(x, SIMD(set1_epi32)(0x7fff)), lsb), 16);
    vec_si quiet_nan = SIMD_SI(or_si)(high, SIMD(set1_epi32)(0x40));
    return narrow_epi32(where_nan_epi32(v, quiet_nan, rounded));
}

#define LANES(T) ((int64_t)(VECTOR_BYTES / sizeof(T)))
#define HALF_LANES ((int64_t)(VECTOR_BYTES / sizeof(float))) /* one 16-bit float per float32 lane */

#define KERNEL(name, T, LOAD, STORE, OP)                                                                      \
    static inline void name##_step(T *o, const T *x, const T *y) { STORE(o, OP(LOAD(x), LOAD(y))); }          \
    PYCOLL_BINARY_VECTOR_KERNEL(name, T, LANES(T), name##_step)

KERNEL(f32_sum, float, SIMD(loadu_ps), SIMD(storeu_ps), SIMD(add_ps))
KERNEL(f32_prod, float, SIMD(loadu_ps), SIMD(storeu_ps), SIMD(mul_ps))
KERNEL(f32_min, float, SIMD(loadu_ps), SIMD(storeu_ps), min_ps)
KERNEL(f32_max, float, SIMD(loadu_ps), SIMD(storeu_ps), max_ps)
KERNEL(f64_sum, double, SIMD(loadu_pd), SIMD(storeu_pd), SIMD(add_pd))
KERNEL(f64_prod, double, SIMD(loadu_pd), SIMD(storeu_pd), SIMD(mul_pd))
KERNEL(f64_min, double, SIMD(loadu_pd), SIMD(storeu_pd), min_pd)
KERNEL(f64_max, double, SIMD(loadu_pd), SIMD(storeu_pd), max_pd)
KERNEL(i8_sum, int8_t, load_si, store_si, SIMD(add_epi8))
KERNEL(i8_min, int8_t, load_si, store_si, SIMD(min_epi8))
KERNEL(i8_max, int8_t, load_si, store_si, SIMD(max_epi8))
KERNEL(u8_sum, uint8_t, load_si, store_si, SIMD(add_epi8))
KERNEL(u8_min, uint8_t, load_si, store_si, SIMD(min_epu8))
KERNEL(u8_max, uint8_t, load_si, store_si, SIMD(max_epu8))
KERNEL(i32_sum, int32_t, load_si, store_si, SIMD(add_epi32))
KERNEL(i32_prod, int32_t, load_si, store_si, SIMD(mullo_epi32))
KERNEL(i32_min, int32_t, load_si, store_si, SIMD(min_epi32))
KERNEL(i32_max, int32_t, load_si, store_si, SIMD(max_epi32))
KERNEL(i64_sum, int64_t, load_si, store_si, SIMD(add_epi64))
KERNEL(i64_min, int64_t, load_si, store_si, min_epi64)
KERNEL(i64_max, int64_t, load_si, store_si, max_epi64)

/* 16-bit floats: widened to float32 exactly, combined, rounded once to nearest-even. */
#define HALF_ARITH_KERNEL(name, widen, narrow, OP)                                                            \
    static inline void name##_step(uint16_t *o, const uint16_t *x, const uint16_t *y)                         \
    {                                                                                                         \
        store_h(o, narrow(OP(widen(load_h(x)), widen(load_h(y)))));                                           \
    }                                                                                                         \
    PYCOLL_BINARY_VECTOR_KERNEL(name, uint16_t, HALF_LANES, name##_step)

/* min/max pick the original 16 bits of a (a NaN, or a wins the comparison) or of b: bit-exact, NaNs kept. */
#define HALF_SELECT_KERNEL(name, widen, PREDICATE)                                                            \
    static inline void name##_step(uint16_t *o, const uint16_t *x, const uint16_t *y)                         \
    {                                                                                                         \
        vec_half hx = load_h(x), hy = load_h(y);                                                              \
        vec_ps a = widen(hx), b = widen(hy);                                                                  \
        store_h(o, HALF_SELECT(hx, hy, a, b, PREDICATE));                                                     \
    }                                                                                                         \
    PYCOLL_BINARY_VECTOR_KERNEL(name, uint16_t, HALF_LANES, name##_step)

HALF_ARITH_KERNEL(f16_sum, f16_widen, f16_narrow, SIMD(add_ps))
HALF_ARITH_KERNEL(f16_prod, f16_widen, f16_narrow, SIMD(mul_ps))
HALF_SELECT_KERNEL(f16_min, f16_widen, _CMP_LE_OQ) /* numpy's float16 keeps a on ties */
HALF_SELECT_KERNEL(f16_max, f16_widen, _CMP_GE_OQ)
HALF_ARITH_KERNEL(bf16_sum, bf16_widen, bf16_narrow, SIMD(add_ps))
HALF_ARITH_KERNEL(bf16_prod, bf16_widen, bf16_narrow, SIMD(mul_ps))
HALF_SELECT_KERNEL(bf16_min, bf16_widen, _CMP_LT_OQ) /* ml_dtypes' bfloat16 keeps b on ties */
HALF_SELECT_KERNEL(bf16_max, bf16_widen, _CMP_GT_OQ)

/* Compensated combine, the same operations in the same order as the scalar one (reduce_scalar.c), special
 * values included (two_sum.h): the error of a sum that is not finite is 0, a zero compensation is -0. */
#define COMBINE_KERNEL(name, T, V, LOAD, STORE, ADD, SUB, SET1, FINITE_OR_ZERO)                               \
    static inline void name##_step(T *ds, T *dc, const T *ss, const T *sc)                                    \
    {                                                                                                         \
        V a = LOAD(ds), b = LOAD(ss);                                                                         \
        V s = ADD(a, b), bb = SUB(s, a);                                                                      \
        V e = FINITE_OR_ZERO(s, ADD(SUB(a, SUB(s, bb)), SUB(b, bb)));                                         \
        V c = SUB(SET1(-0.0), SUB(SET1(0.0), ADD(ADD(LOAD(dc), LOAD(sc)), e)));                               \
        V s2 = ADD(s, c), bb2 = SUB(s2, s);                                                                   \
        STORE(ds, s2);                                                                                        \
        STORE(dc, FINITE_OR_ZERO(s2, ADD(SUB(s, SUB(s2, bb2)), SUB(c, bb2))));                                \
    }                                                                                                         \
    PYCOLL_COMBINE_VECTOR_KERNEL(name, T, LANES(T), name##_step)

COMBINE_KERNEL(f32_combine, float, vec_ps, SIMD(loadu_ps), SIMD(storeu_ps), SIMD(add_ps), SIMD(sub_ps),
               SIMD(set1_ps), finite_or_zero_ps)
COMBINE_KERNEL(f64_combine, double, vec_pd, SIMD(loadu_pd), SIMD(storeu_pd), SIMD(add_pd), SIMD(sub_pd),
               SIMD(set1_pd), finite_or_zero_pd)

#define SET(table, dtype, op, kernel) (table)->binary[dtype][op] = kernel
#define SET_SUM(table, dtype, kernel) (SET(table, dtype, PYCOLL_SUM, kernel), SET(table, dtype, PYCOLL_AVG, kernel))

/* The 8-bit and 64-bit products stay scalar: neither target has those multiplies (64-bit needs AVX-512DQ). */
void SIMD_TABLE(pycoll_kernel_table_t *t)
{
    t->name = SIMD_NAME;
    SET_SUM(t, PYCOLL_FLOAT32, f32_sum), SET(t, PYCOLL_FLOAT32, PYCOLL_PROD, f32_prod);
    SET(t, PYCOLL_FLOAT32, PYCOLL_MIN, f32_min), SET(t, PYCOLL_FLOAT32, PYCOLL_MAX, f32_max);
    SET_SUM(t, PYCOLL_FLOAT64, f64_sum), SET(t, PYCOLL_FLOAT64, PYCOLL_PROD, f64_prod);
    SET(t, PYCOLL_FLOAT64, PYCOLL_MIN, f64_min), SET(t, PYCOLL_FLOAT64, PYCOLL_MAX, f64_max);
    SET_SUM(t, PYCOLL_FLOAT16, f16_sum), SET(t, PYCOLL_FLOAT16, PYCOLL_PROD, f16_prod);
    SET(t, PYCOLL_FLOAT16, PYCOLL_MIN, f16_min), SET(t, PYCOLL_FLOAT16, PYCOLL_MAX, f16_max);
    SET_SUM(t, PYCOLL_BFLOAT16, bf16_sum), SET(t, PYCOLL_BFLOAT16, PYCOLL_PROD, bf16_prod);
    SET(t, PYCOLL_BFLOAT16, PYCOLL_MIN, bf16_min), SET(t, PYCOLL_BFLOAT16, PYCOLL_MAX, bf16_max);
    SET_SUM(t, PYCOLL_INT8, i8_sum), SET(t, PYCOLL_INT8, PYCOLL_MIN, i8_min), SET(t, PYCOLL_INT8, PYCOLL_MAX, i8_max);
    SET_SUM(t, PYCOLL_UINT8, u8_sum), SET(t, PYCOLL_UINT8, PYCOLL_MIN, u8_min), SET(t, PYCOLL_UINT8, PYCOLL_MAX, u8_max);
    SET_SUM(t, PYCOLL_INT32, i32_sum), SET(t, PYCOLL_INT32, PYCOLL_PROD, i32_prod);
    SET(t, PYCOLL_INT32, PYCOLL_MIN, i32_min), SET(t, PYCOLL_INT32, PYCOLL_MAX, i32_max);
    SET_SUM(t, PYCOLL_INT64, i64_sum), SET(t, PYCOLL_INT64, PYCOLL_MIN, i64_min), SET(t, PYCOLL_INT64, PYCOLL_MAX, i64_max);
    t->combine_f32 = f32_combine;
    t->combine_f64 = f64_combine;
}

#endif
