/* AVX2 + F16C kernels, 256-bit vectors (compiled with -mavx2 -mf16c -mno-fma, see CMakeLists.txt; called
 * only after dispatch.c saw those features): this file is the AVX2 vector layer, the kernels are
 * simd_kernels.h's. */
#include <immintrin.h>

#define SIMD_TABLE pycoll_avx2_kernels
#define SIMD_NAME "avx2"
#define VECTOR_BYTES 32
#define SIMD(op) _mm256_##op
#define SIMD_SI(op) _mm256_##op##256
#define HALF_SI(op) _mm_##op##128
#define SIMD_TYPE(suffix) __m256##suffix
#define HALF_TYPE __m128i

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
/* AVX2 has no 64-bit min/max: select by a signed comparison. */
static inline __m256i min_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
static inline __m256i max_epi64(__m256i a, __m256i b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }

static inline __m256 f16_widen(__m128i h) { return _mm256_cvtph_ps(h); }
static inline __m256 bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
static inline __m128i f16_narrow(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline __m256 finite_or_zero_ps(__m256 s, __m256 e)
{
    return _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(s, s), _mm256_setzero_ps(), _CMP_EQ_OQ), e);
}
static inline __m256d finite_or_zero_pd(__m256d s, __m256d e)
{
    return _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s, s), _mm256_setzero_pd(), _CMP_EQ_OQ), e);
}

static inline __m256i where_nan_epi32(__m256 v, __m256i nan, __m256i other)
{
    return _mm256_blendv_epi8(other, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
static inline __m128i narrow_epi32(__m256i r)
{
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* The 32-bit lane mask is packed to 16-bit lanes for a byte blend. */
static inline __m128i half_blend(__m256 take_a, __m128i hy, __m128i hx)
{
    __m256i m = _mm256_castps_si256(take_a);
    return _mm_blendv_epi8(hy, hx, _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1)));
}
#define HALF_SELECT(hx, hy, a, b, PREDICATE)                                                                  \
    half_blend(_mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, PREDICATE)), hy, hx)

#include "kernels/x86/simd_kernels.h"
