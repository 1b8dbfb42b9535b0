/* AVX2 + F16C kernels, 256-bit vectors (compiled with -mavx2 -mf16c -mno-fma, see CMakeLists.txt; called
 * only after dispatch.c saw those features). Same results, bit for bit, as the scalar baseline. */
#include "kernels/kernel_table.h"
#include "kernels/x86/vector_loop.h"

#include <immintrin.h>

static inline __m256i load_si(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void store_si(void *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }

/* np.minimum/np.maximum: vminps/vmaxps return b on ties and on any NaN; a NaN in a must win instead. */
static inline __m256 min_ps(__m256 a, __m256 b)
{
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline __m256 max_ps(__m256 a, __m256 b)
{
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline __m256d min_pd(__m256d a, __m256d b)
{
    return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}
static inline __m256d max_pd(__m256d a, __m256d b)
{
    return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}
static inline __m256i min_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
static inline __m256i max_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }

#define STEP(name, T, LOAD, STORE, OP)                                                                        \
    static inline void name(T *o, const T *x, const T *y) { STORE(o, OP(LOAD(x), LOAD(y))); }

#define KERNEL(name, T, LANES, LOAD, STORE, OP)                                                               \
    STEP(name##_step, T, LOAD, STORE, OP)                                                                     \
    PYCOLL_BINARY_VECTOR_KERNEL(name, T, LANES, name##_step)

KERNEL(f32_sum, float, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps)
KERNEL(f32_prod, float, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_mul_ps)
KERNEL(f32_min, float, 8, _mm256_loadu_ps, _mm256_storeu_ps, min_ps)
KERNEL(f32_max, float, 8, _mm256_loadu_ps, _mm256_storeu_ps, max_ps)
KERNEL(f64_sum, double, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd)
KERNEL(f64_prod, double, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_mul_pd)
KERNEL(f64_min, double, 4, _mm256_loadu_pd, _mm256_storeu_pd, min_pd)
KERNEL(f64_max, double, 4, _mm256_loadu_pd, _mm256_storeu_pd, max_pd)
KERNEL(i8_sum, int8_t, 32, load_si, store_si, _mm256_add_epi8)
KERNEL(i8_min, int8_t, 32, load_si, store_si, _mm256_min_epi8)
KERNEL(i8_max, int8_t, 32, load_si, store_si, _mm256_max_epi8)
KERNEL(u8_sum, uint8_t, 32, load_si, store_si, _mm256_add_epi8)
KERNEL(u8_min, uint8_t, 32, load_si, store_si, _mm256_min_epu8)
KERNEL(u8_max, uint8_t, 32, load_si, store_si, _mm256_max_epu8)
KERNEL(i32_sum, int32_t, 8, load_si, store_si, _mm256_add_epi32)
KERNEL(i32_prod, int32_t, 8, load_si, store_si, _mm256_mullo_epi32)
KERNEL(i32_min, int32_t, 8, load_si, store_si, _mm256_min_epi32)
KERNEL(i32_max, int32_t, 8, load_si, store_si, _mm256_max_epi32)
KERNEL(i64_sum, int64_t, 4, load_si, store_si, _mm256_add_epi64)
KERNEL(i64_min, int64_t, 4, load_si, store_si, min_epi64)
KERNEL(i64_max, int64_t, 4, load_si, store_si, max_epi64)

/* 16-bit floats, 8 per step: widened to float32 exactly, combined, rounded once to nearest-even. */
static inline __m128i load_h(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void store_h(void *p, __m128i v) { _mm_storeu_si128((__m128i *)p, v); }
static inline __m256 f16_widen(__m128i h) { return _mm256_cvtph_ps(h); }
static inline __m256 bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
static inline __m128i f16_narrow(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* bfloat16 rounding by integer arithmetic (as pycoll_f32_to_bf16): add 0x7fff plus the kept lsb; NaNs are
 * narrowed by truncation with the quiet bit set, since rounding could carry them into infinity. */
static inline __m128i bf16_narrow(__m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i high = _mm256_srli_epi32(x, 16);
    __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    __m256i r = _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

#define HALF_ARITH_KERNEL(name, widen, narrow, OP)                                                            \
    static inline void name##_step(uint16_t *o, const uint16_t *x, const uint16_t *y)                         \
    {                                                                                                         \
        store_h(o, narrow(OP(widen(load_h(x)), widen(load_h(y)))));                                           \
    }                                                                                                         \
    PYCOLL_BINARY_VECTOR_KERNEL(name, uint16_t, 8, name##_step)

/* min/max pick the original 16 bits of a (a NaN, or a wins the comparison) or of b: bit-exact, NaNs kept. */
#define HALF_SELECT_KERNEL(name, widen, PREDICATE)                                                            \
    static inline void name##_step(uint16_t *o, const uint16_t *x, const uint16_t *y)                         \
    {                                                                                                         \
        __m128i hx = load_h(x), hy = load_h(y);                                                               \
        __m256 a = widen(hx), b = widen(hy);                                                                  \
        __m256i take_a = _mm256_castps_si256(                                                                 \
            _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, PREDICATE)));                 \
        __m128i mask = _mm_packs_epi32(_mm256_castsi256_si128(take_a), _mm256_extracti128_si256(take_a, 1));  \
        store_h(o, _mm_blendv_epi8(hy, hx, mask));                                                            \
    }                                                                                                         \
    PYCOLL_BINARY_VECTOR_KERNEL(name, uint16_t, 8, name##_step)

HALF_ARITH_KERNEL(f16_sum, f16_widen, f16_narrow, _mm256_add_ps)
HALF_ARITH_KERNEL(f16_prod, f16_widen, f16_narrow, _mm256_mul_ps)
HALF_SELECT_KERNEL(f16_min, f16_widen, _CMP_LE_OQ) /* numpy's float16 keeps a on ties */
HALF_SELECT_KERNEL(f16_max, f16_widen, _CMP_GE_OQ)
HALF_ARITH_KERNEL(bf16_sum, bf16_widen, bf16_narrow, _mm256_add_ps)
HALF_ARITH_KERNEL(bf16_prod, bf16_widen, bf16_narrow, _mm256_mul_ps)
HALF_SELECT_KERNEL(bf16_min, bf16_widen, _CMP_LT_OQ) /* ml_dtypes' bfloat16 keeps b on ties */
HALF_SELECT_KERNEL(bf16_max, bf16_widen, _CMP_GT_OQ)

/* Compensated combine, the same operations in the same order as the scalar one (reduce_scalar.c). */
#define COMBINE_KERNEL(name, T, LANES, V, LOAD, STORE, ADD, SUB)                                              \
    static inline void name##_step(T *ds, T *dc, const T *ss, const T *sc)                                    \
    {                                                                                                         \
        V a = LOAD(ds), b = LOAD(ss);                                                                         \
        V s = ADD(a, b), bb = SUB(s, a);                                                                      \
        V e = ADD(SUB(a, SUB(s, bb)), SUB(b, bb));                                                            \
        V c = ADD(ADD(LOAD(dc), LOAD(sc)), e);                                                                \
        V s2 = ADD(s, c), bb2 = SUB(s2, s);                                                                   \
        STORE(ds, s2);                                                                                        \
        STORE(dc, ADD(SUB(s, SUB(s2, bb2)), SUB(c, bb2)));                                                    \
    }                                                                                                         \
    PYCOLL_COMBINE_VECTOR_KERNEL(name, T, LANES, name##_step)

COMBINE_KERNEL(f32_combine, float, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps)
COMBINE_KERNEL(f64_combine, double, 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd, _mm256_sub_pd)

#define SET(table, dtype, op, kernel) (table)->binary[dtype][op] = kernel
#define SET_SUM(table, dtype, kernel) (SET(table, dtype, PYCOLL_SUM, kernel), SET(table, dtype, PYCOLL_AVG, kernel))

void pycoll_avx2_kernels(pycoll_kernel_table_t *t)
{
    t->name = "avx2";
    SET_SUM(t, PYCOLL_FLOAT32, f32_sum), SET(t, PYCOLL_FLOAT32, PYCOLL_PROD, f32_prod);
    SET(t, PYCOLL_FLOAT32, PYCOLL_MIN, f32_min), SET(t, PYCOLL_FLOAT32, PYCOLL_MAX, f32_max);
    SET_SUM(t, PYCOLL_FLOAT64, f64_sum), SET(t, PYCOLL_FLOAT64, PYCOLL_PROD, f64_prod);
    SET(t, PYCOLL_FLOAT64, PYCOLL_MIN, f64_min), SET(t, PYCOLL_FLOAT64, PYCOLL_MAX, f64_max);
    SET_SUM(t, PYCOLL_FLOAT16, f16_sum), SET(t, PYCOLL_FLOAT16, PYCOLL_PROD, f16_prod);
    SET(t, PYCOLL_FLOAT16, PYCOLL_MIN, f16_min), SET(t, PYCOLL_FLOAT16, PYCOLL_MAX, f16_max);
    SET_SUM(t, PYCOLL_BFLOAT16, bf16_sum), SET(t, PYCOLL_BFLOAT16, PYCOLL_PROD, bf16_prod);
    SET(t, PYCOLL_BFLOAT16, PYCOLL_MIN, bf16_min), SET(t, PYCOLL_BFLOAT16, PYCOLL_MAX, bf16_max);
    /* No 8-bit or 64-bit multiply in AVX2: those products stay scalar. */
    SET_SUM(t, PYCOLL_INT8, i8_sum), SET(t, PYCOLL_INT8, PYCOLL_MIN, i8_min), SET(t, PYCOLL_INT8, PYCOLL_MAX, i8_max);
    SET_SUM(t, PYCOLL_UINT8, u8_sum), SET(t, PYCOLL_UINT8, PYCOLL_MIN, u8_min), SET(t, PYCOLL_UINT8, PYCOLL_MAX, u8_max);
    SET_SUM(t, PYCOLL_INT32, i32_sum), SET(t, PYCOLL_INT32, PYCOLL_PROD, i32_prod);
    SET(t, PYCOLL_INT32, PYCOLL_MIN, i32_min), SET(t, PYCOLL_INT32, PYCOLL_MAX, i32_max);
    SET_SUM(t, PYCOLL_INT64, i64_sum), SET(t, PYCOLL_INT64, PYCOLL_MIN, i64_min), SET(t, PYCOLL_INT64, PYCOLL_MAX, i64_max);
    t->combine_f32 = f32_combine;
    t->combine_f64 = f64_combine;
}
