/* Internal: the exact-mode loops of accuracy="reproducible" (kernels/reproducible.h). Plain C written for the
 * compiler's vectoriser -- shifts, masks and selects on the elements' bits, no branch on the data, and no
 * conversion but exact ones and one round-to-odd step -- included by one file per instruction set, each compiled
 * with its own flags (reproducible_loops.c for the baseline, x86/reproducible_avx2.c, x86/reproducible_avx512.c),
 * which defines REPRO_LOOPS_TABLE, the name of the function that puts its loops in the kernel table. Integer
 * arithmetic and exact conversions: every variant gives the same bits. */
#ifndef PYCOLL_REPRODUCIBLE_LOOPS_H
#define PYCOLL_REPRODUCIBLE_LOOPS_H

#include <math.h>
#include <string.h>

#include "kernels/half_float.h"
#include "kernels/kernel_table.h"
#include "kernels/reproducible.h"

/* Elements at any alignment (the caller's buffers), in types the vectoriser widens. */
typedef uint64_t elem_u64 __attribute__((aligned(1), may_alias));
typedef uint32_t elem_u32 __attribute__((aligned(1), may_alias));
typedef uint16_t elem_u16 __attribute__((aligned(1), may_alias));
typedef double elem_f64 __attribute__((aligned(1), may_alias));
typedef float elem_f32 __attribute__((aligned(1), may_alias));


/* 2^e as a double, e in [-1022, 1023]; and e in [-1074, 1023] (the subnormal powers too). */
static inline double pow2_normal(int64_t e) { return pycoll_f64_from_bits((uint64_t)(e + 1023) << 52); }
static inline double pow2_any(int64_t e)
{
    return pycoll_f64_from_bits(e >= -1022 ? (uint64_t)(e + 1023) << 52 : UINT64_C(1) << ((e + 1074) & 63));
}

/* s (|s| < 2^62) rounded to 53 bits toward zero, its last bit set where that dropped anything: round to odd.
 * Rounding that once more to nearest, at 24 bits or fewer, is rounding s itself (Boldo and Melquiond), where
 * rounding s to nearest at 53 bits first could land on a tie that was not one. */
static inline double round_to_odd_f64(int64_t s)
{
    const double d = (double)s;
    const int64_t below = s - (int64_t)d; /* exact: d is an integer of at most 62 bits */
    const uint64_t inexact = below != 0, away = inexact & ((below ^ s) < 0);
    return pycoll_f64_from_bits((pycoll_f64_bits(d) - away) | inexact);
}

/* d rounded to float to odd, for the 16-bit formats (11 and 8 bits, at most 22 below float's 24). */
static inline float round_to_odd_f32(double d)
{
    const float f = (float)d;
    const uint32_t inexact = (double)f != d, away = inexact & (fabs((double)f) > fabs(d));
    return pycoll_f32_from_bits((pycoll_f32_bits(f) - away) | inexact);
}

/* The exact sum s1 * 2^bits + s0 of two limb sums, as sign and magnitude window * 2^(*exp) (plus less than one
 * unit of `window` where `window` has its top bit set, marked by its last bit: sticky), in 64-bit lanes only.
 * The carry of s0 moves into s1 first, so that the magnitude is high * 2^bits + low with 0 <= low < 2^bits; a
 * high part takes the window's top, normalised, and as much of `low` as fits; without one the window is `low`,
 * exact. Converting the window rounds as converting the whole sum would. */
static inline uint64_t two_limb_window(int64_t s0, int64_t s1, int32_t bits, uint64_t *neg, int64_t *exp)
{
    const uint64_t mask = (UINT64_C(1) << bits) - 1, low_signed = (uint64_t)s0 & mask;
    const int64_t high_signed = s1 + (s0 >> bits); /* arithmetic shift: floor */
    const uint64_t sign = (uint64_t)(high_signed >> 63);
    /* where negative: -(h * 2^bits + l) = (-h - 1) * 2^bits + (2^bits - l), or -h * 2^bits where l is 0 */
    const uint64_t high = (((uint64_t)high_signed ^ sign) - sign) - (sign & (low_signed != 0));
    const uint64_t low = ((low_signed ^ sign) - sign) & mask;
    const int lz = __builtin_clzll(high | 1);
    const uint64_t below = lz >= bits ? low << ((lz - bits) & 63) : low >> ((bits - lz) & 63);
    const uint64_t dropped = lz >= bits ? 0 : low << ((lz - bits) & 63); /* the bits `below` lost, moved up */
    *neg = sign & 1;
    *exp = high ? bits - lz : 0;
    return high ? (high << lz) | below | (dropped != 0) : low;
}

/* window * 2^exp (window's last bit a sticky bit where two_limb_window normalised it) rounded once to nearest-even
 * in float64, subnormals included: the long way, for a base below the normal range, where converting the window
 * and then scaling would round twice. The rounding bit is at least 11 bits above the sticky bit. */
static inline double round_window_f64(uint64_t window, int64_t exp, uint64_t neg)
{
    if (!window)
        return 0.0;
    const int64_t msb = 63 - __builtin_clzll(window);
    const int64_t keep = msb + exp - 52 > -1074 ? msb + exp - 52 : -1074; /* the result's last bit */
    const int64_t drop = keep - exp;
    uint64_t q;
    if (drop <= 0) {
        q = window << ((-drop) & 63); /* exact: at most 53 bits */
    } else if (drop >= 64) {
        q = drop == 64 && window > (UINT64_C(1) << 63); /* above half of the least subnormal */
    } else {
        const uint64_t rem = window & ((UINT64_C(1) << drop) - 1), half = UINT64_C(1) << (drop - 1);
        q = window >> drop;
        q += rem > half || (rem == half && (q & 1));
    }
    return pycoll_f64_from_bits(pycoll_f64_bits((double)q * pow2_any(keep)) | neg << 63); /* q <= 2^53: exact */
}

/* One float format's summary and encoders, on its bits as the unsigned type UT. */
#define REPRO_ENCODERS(name, elem, UT, FRAC, EXP_BITS)                                                        \
    static void name##_summary(const void *x, int64_t n, int32_t *summary)                                    \
    {                                                                                                         \
        const elem *p = (const elem *)x;                                                                      \
        const UT emask = (UT)((1u << (EXP_BITS)) - 1);                                                        \
        UT top = 0, bottom = emask, widest = 0;                                                               \
        for (int64_t i = 0; i < n; i++) { /* selects by masks and max/min only: the vectoriser's reductions */ \
            const UT b = p[i];                                                                                \
            const UT biased = (UT)((b >> (FRAC)) & emask);                                                    \
            const UT eb = (UT)(biased + (biased == 0)); /* a subnormal's exponent is the least normal one */  \
            const UT counted = (UT)-(UT)(((UT)(b << 1) != 0) & (biased != emask)); /* finite, nonzero */      \
            const UT high = eb & counted, low = (UT)(high | (emask & ~counted));                              \
            top = top > high ? top : high;                                                                    \
            bottom = bottom < low ? bottom : low;                                                             \
            widest = widest > biased ? widest : biased;                                                       \
        }                                                                                                     \
        summary[0] = (int32_t)top;                                                                            \
        summary[1] = -(int32_t)bottom;                                                                        \
        summary[2] = widest == emask; /* an infinity or NaN */                                                \
    }                                                                                                         \
    /* x = sign * m * 2^(eb - bias - frac), so x / 2^base = sign * m << s, s = eb + shift >= 0. */            \
    static inline uint64_t name##_significand(uint64_t b, int64_t shift, int64_t *s)                          \
    {                                                                                                         \
        const uint64_t biased = (b >> (FRAC)) & ((UINT64_C(1) << (EXP_BITS)) - 1);                            \
        *s = (int64_t)(biased | (biased == 0)) + shift;                                                       \
        return (b & ((UINT64_C(1) << (FRAC)) - 1)) | ((uint64_t)(biased != 0) << (FRAC));                    \
    }                                                                                                         \
    static void name##_encode1(const void *x, int64_t n, int32_t base, int32_t bits, int64_t *limbs)          \
    {                                                                                                         \
        (void)bits;                                                                                           \
        const elem *p = (const elem *)x;                                                                      \
        const int64_t shift = -(int64_t)base - ((1 << ((EXP_BITS) - 1)) - 1) - (FRAC);                        \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            int64_t s;                                                                                        \
            const uint64_t b = p[i], m = name##_significand(b, shift, &s);                                    \
            const uint64_t sign = -(b >> ((FRAC) + (EXP_BITS))); /* all ones where negative */                \
            limbs[i] = (int64_t)(((m << (s & 63)) ^ sign) - sign); /* a zero's s may be anything: m is 0 */   \
        }                                                                                                     \
    }                                                                                                         \
    static void name##_encode2(const void *x, int64_t n, int32_t base, int32_t bits, int64_t *limbs)          \
    {                                                                                                         \
        const elem *p = (const elem *)x;                                                                      \
        const int64_t shift = -(int64_t)base - ((1 << ((EXP_BITS) - 1)) - 1) - (FRAC);                        \
        const uint64_t mask = (UINT64_C(1) << bits) - 1;                                                      \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            int64_t s;                                                                                        \
            const uint64_t b = p[i], m = name##_significand(b, shift, &s);                                    \
            const uint64_t sign = -(b >> ((FRAC) + (EXP_BITS)));                                              \
            const uint64_t lo = s < bits ? (m << (s & 63)) & mask : 0;                                        \
            const uint64_t hi = s >= bits ? m << ((s - bits) & 63) : m >> ((bits - s) & 63);                  \
            limbs[2 * i] = (int64_t)((lo ^ sign) - sign);                                                     \
            limbs[2 * i + 1] = (int64_t)((hi ^ sign) - sign);                                                 \
        }                                                                                                     \
    }

REPRO_ENCODERS(f64, elem_u64, uint64_t, 52, 11)
REPRO_ENCODERS(f32, elem_u32, uint32_t, 23, 8)
REPRO_ENCODERS(f16, elem_u16, uint16_t, 10, 5)
REPRO_ENCODERS(bf16, elem_u16, uint16_t, 7, 8)

#ifdef __AVX512DQ__
/* float32 in one limb where the hardware converts double to int64 in vectors: x / 2^base is an integer below
 * 2^62 (the plan's promise), so widening to double, scaling by a power of two (-base stays within float32's
 * reach of the normal doubles) and converting are each exact, the same integers as the bit loop's in a third of
 * its instructions. */
static void f32_encode1_converting(const void *x, int64_t n, int32_t base, int32_t bits, int64_t *limbs)
{
    (void)bits;
    const elem_f32 *p = (const elem_f32 *)x;
    const double scale = pow2_normal(-(int64_t)base);
    for (int64_t i = 0; i < n; i++)
        limbs[i] = (int64_t)((double)p[i] * scale);
}
#define F32_ENCODE1 f32_encode1_converting
#else
#define F32_ENCODE1 f32_encode1
#endif

/* One limb: float64 converts it and scales exactly (a base below the normal range goes the long way). */
static void f64_decode1(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)
{
    (void)bits;
    elem_f64 *o = (elem_f64 *)out;
    if (base < -1022) {
        for (int64_t i = 0; i < n; i++) {
            const uint64_t neg = (uint64_t)limbs[i] >> 63;
            o[i] = round_window_f64(((uint64_t)limbs[i] ^ -neg) + neg, base, neg);
        }
        return;
    }
    const double scale = pow2_normal(base); /* base <= 1023 - 45: the bits of a limb stay below 2^1024 */
    for (int64_t i = 0; i < n; i++)
        o[i] = (double)limbs[i] * scale;
}

/* The narrower formats round to odd at 53 bits, scale exactly (base stays within [-300, 200]), and round once
 * to nearest in their own format (the 16-bit ones through float, rounded to odd again). */
static inline double odd_f64_of_limb(int64_t limb, double scale) { return round_to_odd_f64(limb) * scale; }

/* How a double becomes each format's element, rounded once: float32 by its conversion, the 16-bit formats through
 * float rounded to odd (at most 22 bits below float's 24, so the second rounding is the first's). */
#define ROUND_F64(d) (d)
#define ROUND_F32(d) ((float)(d))
#define ROUND_F16(d) pycoll_f32_to_f16(round_to_odd_f32(d))
#define ROUND_BF16(d) pycoll_f32_to_bf16(round_to_odd_f32(d))

/* Narrow plans: every sum converts to double exactly; float64's one-limb decode already rounds once. */
static inline double exact_f64_of_limb(int64_t limb, double scale) { return (double)limb * scale; }

/* One limb of a narrower format: of_limb gives the limb sum as a double, rounded to odd (a wide sum) or exact (a
 * narrow plan's), and ROUND rounds it once to the format. */
#define DECODE1(name, elem, ROUND, of_limb)                                                                      \
    static void name(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)                    \
    {                                                                                                            \
        (void)bits;                                                                                              \
        elem *o = (elem *)out;                                                                                   \
        const double scale = pow2_normal(base);                                                                  \
        for (int64_t i = 0; i < n; i++)                                                                          \
            o[i] = ROUND(of_limb(limbs[i], scale));                                                              \
    }
DECODE1(f32_decode1, elem_f32, ROUND_F32, odd_f64_of_limb)
DECODE1(f16_decode1, elem_u16, ROUND_F16, odd_f64_of_limb)
DECODE1(bf16_decode1, elem_u16, ROUND_BF16, odd_f64_of_limb)
DECODE1(f32_decode_narrow, elem_f32, ROUND_F32, exact_f64_of_limb)
DECODE1(f16_decode_narrow, elem_u16, ROUND_F16, exact_f64_of_limb)
DECODE1(bf16_decode_narrow, elem_u16, ROUND_BF16, exact_f64_of_limb)
#define f64_decode_narrow f64_decode1

/* A narrow plan's sum straight from the elements: each is a multiple of 2^base and every partial sum stays
 * below 2^53 of those units, so double additions are exact in any order, and out rounds the exact sum once
 * (+0.0 for zero, as decoding gives). acc: n doubles of scratch. */
#define REPRO_SUM_NARROW(name, elem, WIDEN, ROUND)                                                             \
    static void name##_sum_narrow(const void *const *x, int32_t n_x, int64_t n, double *acc, void *out)       \
    {                                                                                                         \
        const elem *p0 = (const elem *)x[0], *p1 = (const elem *)x[n_x > 1];                                  \
        if (n_x == 1)                                                                                         \
            for (int64_t i = 0; i < n; i++)                                                                   \
                acc[i] = WIDEN(p0[i]);                                                                        \
        else                                                                                                  \
            for (int64_t i = 0; i < n; i++)                                                                   \
                acc[i] = WIDEN(p0[i]) + WIDEN(p1[i]);                                                         \
        for (int32_t k = 2; k < n_x; k++) {                                                                   \
            const elem *p = (const elem *)x[k];                                                               \
            for (int64_t i = 0; i < n; i++)                                                                   \
                acc[i] += WIDEN(p[i]);                                                                        \
        }                                                                                                     \
        elem *o = (elem *)out;                                                                                \
        for (int64_t i = 0; i < n; i++)                                                                       \
            o[i] = ROUND(acc[i] + 0.0);                                                                       \
    }
#define WIDEN_F64(v) (v)
#define WIDEN_F32(v) ((double)(v))
#define WIDEN_F16(v) ((double)pycoll_f16_to_f32(v))
#define WIDEN_BF16(v) ((double)pycoll_bf16_to_f32(v))
REPRO_SUM_NARROW(f64, elem_f64, WIDEN_F64, ROUND_F64)
REPRO_SUM_NARROW(f32, elem_f32, WIDEN_F32, ROUND_F32)
REPRO_SUM_NARROW(f16, elem_u16, WIDEN_F16, ROUND_F16)
REPRO_SUM_NARROW(bf16, elem_u16, WIDEN_BF16, ROUND_BF16)

/* x = hi + lo exactly: hi, x truncated to a multiple of 2^grid (the scaled value's integer part, exact while
 * it stays below 2^53), and lo, the rest (exact: a difference of two doubles that fits one). */
static void f64_split_encode(const double *x, int64_t n, int32_t grid, double *halves)
{
    const elem_f64 *p = (const elem_f64 *)x;
    const double down = pow2_normal(-(int64_t)grid), up = pow2_normal(grid);
    for (int64_t i = 0; i < n; i++) {
        const double hi = trunc(p[i] * down) * up;
        halves[2 * i] = hi;
        halves[2 * i + 1] = p[i] - hi;
    }
}

/* The parts of every rank sum exactly; one addition of the two sums rounds the result once. */
static void f64_split_sum(const void *const *halves, int32_t n_x, int64_t n, double *acc, double *out)
{
    f64_sum_narrow(halves, n_x, 2 * n, acc, acc);
    elem_f64 *o = (elem_f64 *)out;
    for (int64_t i = 0; i < n; i++)
        o[i] = acc[2 * i] + acc[2 * i + 1] + 0.0;
}

static void f64_decode2(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)
{
    elem_f64 *o = (elem_f64 *)out;
    if (base < -1022) { /* a result could be subnormal: the window's conversion would round twice */
        for (int64_t i = 0; i < n; i++) {
            uint64_t neg;
            int64_t exp;
            const uint64_t window = two_limb_window(limbs[2 * i], limbs[2 * i + 1], bits, &neg, &exp);
            o[i] = round_window_f64(window, base + exp, neg);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t neg;
        int64_t exp;
        const uint64_t window = two_limb_window(limbs[2 * i], limbs[2 * i + 1], bits, &neg, &exp);
        /* rounded once by the conversion; the scale, within [base, base + 62], is exact or overflows */
        const double mag = (double)window * pow2_normal(base + exp);
        o[i] = pycoll_f64_from_bits(pycoll_f64_bits(mag) | neg << 63);
    }
}

/* Two limbs of a narrower format: the window with two bits off (sticky kept) to stay below 2^62, rounded to odd
 * at 53 bits and scaled exactly (within the normal doubles), signed. */
static inline double odd_f64_of_limbs(int64_t s0, int64_t s1, int32_t bits, int32_t base)
{
    uint64_t neg;
    int64_t exp;
    const uint64_t window = two_limb_window(s0, s1, bits, &neg, &exp);
    const int64_t quarter = (int64_t)((window >> 2) | ((window & 3) != 0));
    return pycoll_f64_from_bits(pycoll_f64_bits(round_to_odd_f64(quarter) * pow2_normal(base + exp + 2)) | neg << 63);
}

static void f32_decode2(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)
{
    elem_f32 *o = (elem_f32 *)out;
    for (int64_t i = 0; i < n; i++)
        o[i] = (float)odd_f64_of_limbs(limbs[2 * i], limbs[2 * i + 1], bits, base);
}

static void f16_decode2(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)
{
    elem_u16 *o = (elem_u16 *)out;
    for (int64_t i = 0; i < n; i++)
        o[i] = pycoll_f32_to_f16(round_to_odd_f32(odd_f64_of_limbs(limbs[2 * i], limbs[2 * i + 1], bits, base)));
}

static void bf16_decode2(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out)
{
    elem_u16 *o = (elem_u16 *)out;
    for (int64_t i = 0; i < n; i++)
        o[i] = pycoll_f32_to_bf16(round_to_odd_f32(odd_f64_of_limbs(limbs[2 * i], limbs[2 * i + 1], bits, base)));
}

#define REPRO_ROW(name)                                                                                       \
    (pycoll_repro_kernels_t)                                                                                  \
    {                                                                                                         \
        name##_summary, {name##_encode1, name##_encode2}, {name##_decode1, name##_decode2},                   \
            name##_decode_narrow, name##_sum_narrow                                                           \
    }

void REPRO_LOOPS_TABLE(pycoll_kernel_table_t *t)
{
    t->repro[PYCOLL_FLOAT64] = REPRO_ROW(f64);
    t->repro[PYCOLL_FLOAT32] = REPRO_ROW(f32);
    t->repro[PYCOLL_FLOAT32].encode[0] = F32_ENCODE1;
    t->repro_split = (pycoll_repro_split_kernels_t){f64_split_encode, f64_split_sum};
    t->repro[PYCOLL_FLOAT16] = REPRO_ROW(f16);
    t->repro[PYCOLL_BFLOAT16] = REPRO_ROW(bf16);
}

#endif
