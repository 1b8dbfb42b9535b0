/* AVX-512 (F, BW, VL) kernels, 512-bit vectors (compiled with -mavx512f -mavx512bw -mavx512vl -mf16c -mno-fma,
 * see CMakeLists.txt; called only after dispatch.c saw those features): this file is the AVX-512 vector
 * layer, the kernels are simd_kernels.h's. Applied over the AVX2 table, so what is not widened here keeps
 * its AVX2 kernel. */
#include <immintrin.h>

#define SIMD_TABLE pycoll_avx512_kernels
#define SIMD_NAME "avx512"
#define VECTOR_BYTES 64
#define SIMD(op) _mm512_##op
#define SIMD_SI(op) _mm512_##op##512
#define HALF_SI(op) _mm256_##op##256
#define SIMD_TYPE(suffix) __m512##suffix
#define HALF_TYPE __m256i

/* Masked moves put a back where it is NaN. */
static inline __m512 min_ps(__m512 a, __m512 b)
{
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512 max_ps(__m512 a, __m512 b)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512d min_pd(__m512d a, __m512d b)
{
    return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}
static inline __m512d max_pd(__m512d a, __m512d b)
{
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}
#define min_epi64 _mm512_min_epi64
#define max_epi64 _mm512_max_epi64

static inline __m512 f16_widen(__m256i h) { return _mm512_cvtph_ps(h); }
static inline __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
static inline __m256i f16_narrow(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline __m512 finite_or_zero_ps(__m512 s, __m512 e)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_sub_ps(s, s), _mm512_setzero_ps(), _CMP_EQ_OQ), e);
}
static inline __m512d finite_or_zero_pd(__m512d s, __m512d e)
{
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(_mm512_sub_pd(s, s), _mm512_setzero_pd(), _CMP_EQ_OQ), e);
}

static inline __m512i where_nan_epi32(__m512 v, __m512i nan, __m512i other)
{
    return _mm512_mask_mov_epi32(other, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
}
static inline __m256i narrow_epi32(__m512i r) { return _mm512_cvtepi32_epi16(r); }

#define HALF_SELECT(hx, hy, a, b, PREDICATE)                                                                  \
    _mm256_mask_blend_epi16(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, b, PREDICATE), hy, hx)

#include "kernels/x86/simd_kernels.h"
