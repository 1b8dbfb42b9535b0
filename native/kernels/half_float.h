/* Internal: portable float16 / bfloat16 <-> float32 conversions, round-to-nearest-even, bit-compatible with
 * numpy (float16) and ml_dtypes (bfloat16) including subnormals, infinities and NaN. No _Float16 needed. */
#ifndef PYCOLL_HALF_FLOAT_H
#define PYCOLL_HALF_FLOAT_H

#include <stdint.h>

/* The bits of a float or double, and back (C11 reads a union member as the bytes another wrote). */
static inline uint32_t pycoll_f32_bits(float f) { return ((union { float f; uint32_t u; }){.f = f}).u; }
static inline float pycoll_f32_from_bits(uint32_t u) { return ((union { float f; uint32_t u; }){.u = u}).f; }
static inline uint64_t pycoll_f64_bits(double d) { return ((union { double d; uint64_t u; }){.d = d}).u; }
static inline double pycoll_f64_from_bits(uint64_t u) { return ((union { double d; uint64_t u; }){.u = u}).d; }

static inline float pycoll_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in float32 */
        float mag = (float)mant * 0x1p-24f;
        return pycoll_f32_from_bits(pycoll_f32_bits(mag) | sign);
    }
    if (exp == 31) /* inf or NaN, payload kept */
        return pycoll_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return pycoll_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round-to-nearest-even of the low `shift` bits away from q. */
static inline uint32_t pycoll_round_shift(uint32_t value, unsigned shift)
{
    uint32_t q = value >> shift;
    uint32_t rem = value & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

static inline uint16_t pycoll_f32_to_f16(float f)
{
    uint32_t x = pycoll_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t mag = x & 0x7fffffffu;
    if (mag > 0x7f800000u) /* NaN: keep it quiet and keep the top of the payload */
        return (uint16_t)(sign | 0x7e00u | (mag & 0x7fffffu) >> 13);
    if (mag >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (mag >= 0x38800000u) /* normal: rebias the exponent, round off 13 mantissa bits (carries are right) */
        return (uint16_t)(sign | pycoll_round_shift(mag - 0x38000000u, 13));
    if (mag <= 0x33000000u) /* <= 2^-25 rounds to zero (the tie goes to even zero) */
        return sign;
    /* subnormal result: units of 2^-24 */
    uint32_t e = mag >> 23;
    uint32_t m = (mag & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | pycoll_round_shift(m, 126u - e));
}

static inline float pycoll_bf16_to_f32(uint16_t h)
{
    return pycoll_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t pycoll_f32_to_bf16(float f)
{
    uint32_t x = pycoll_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: rounding could carry it into infinity */
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#endif
