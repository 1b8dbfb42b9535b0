/* The encode / decode kernels of accuracy="reproducible" (reproducible.h). Integer only, except the last,
 * exact, assembly of the rounded result: no step depends on the floating-point environment. One loop per dtype,
 * each an inlined instance of the generic element functions below with its format as constants. */
#include "kernels/reproducible.h"

#include <math.h>
#include <string.h>

#include "kernels/half_float.h"

#define LIMB_MASK ((UINT64_C(1) << REPRO_LIMB_BITS) - 1)

/* A binary float format: fraction bits, exponent bits, limbs. */
typedef struct fmt {
    int frac, exp_bits, limbs;
} fmt_t;

static const fmt_t F64 = {52, 11, 3}, F32 = {23, 8, 2}, F16 = {10, 5, 1}, BF16 = {7, 8, 2};

enum { CLASS_ZERO, CLASS_FINITE, CLASS_INF, CLASS_NAN };

/* bits as sign, integer significand m and the exponent of its last bit: |x| = m * 2^e_lsb. */
static inline int unpack(uint64_t bits, fmt_t f, int *neg, uint64_t *m, int *e_lsb)
{
    const int bias = (1 << (f.exp_bits - 1)) - 1;
    const uint64_t frac = bits & ((UINT64_C(1) << f.frac) - 1);
    const int biased = (int)((bits >> f.frac) & ((UINT64_C(1) << f.exp_bits) - 1));
    *neg = (int)((bits >> (f.frac + f.exp_bits)) & 1);
    if (biased == (1 << f.exp_bits) - 1)
        return frac ? CLASS_NAN : CLASS_INF;
    if (biased == 0) {
        *m = frac;
        *e_lsb = 1 - bias - f.frac;
        return frac ? CLASS_FINITE : CLASS_ZERO;
    }
    *m = frac | (UINT64_C(1) << f.frac);
    *e_lsb = biased - bias - f.frac;
    return CLASS_FINITE;
}

static inline int bit_length(uint64_t v) { return 64 - __builtin_clzll(v); }

static inline int32_t code_of(uint64_t bits, fmt_t f)
{
    int neg, e_lsb = 0;
    uint64_t m = 0;
    switch (unpack(bits, f, &neg, &m, &e_lsb)) {
    case CLASS_NAN: return REPRO_CODE_NAN;
    case CLASS_INF: return REPRO_CODE_INF;
    case CLASS_ZERO: return REPRO_CODE_ZERO;
    default: return e_lsb + bit_length(m) - 1;
    }
}

/* v >> s rounded to nearest, ties to even; s in [1, 63]. */
static inline uint64_t round_shift(uint64_t v, int s)
{
    const uint64_t q = v >> s, rem = v & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

static inline void encode_one(uint64_t bits, int32_t code, fmt_t f, int64_t *out)
{
    int neg = 0, e_lsb = 0;
    uint64_t m = 0;
    const int cls = unpack(bits, f, &neg, &m, &e_lsb);
    for (int k = 0; k < f.limbs; k++)
        out[k] = 0;
    if (code >= REPRO_CODE_INF) { /* the element's result is not finite: only infinities are counted */
        if (code == REPRO_CODE_INF && cls == CLASS_INF)
            out[0] = neg ? INT64_C(1) << REPRO_NEG_INF_SHIFT : 1;
        return;
    }
    if (cls != CLASS_FINITE)
        return;
    /* The element's fixed point: limb 0's last bit is worth 2^base, and |x| < 2^(code + 1) on every rank. */
    const int base = code + 1 - REPRO_LIMB_BITS * f.limbs;
    int b = e_lsb - base;
    if (b < 0) {
        m = -b >= 64 ? 0 : round_shift(m, -b);
        b = 0;
    }
    for (int k = 0; k < f.limbs; k++) {
        const int sh = b - REPRO_LIMB_BITS * k;
        uint64_t v = sh >= 64 || sh <= -64 ? 0 : sh >= 0 ? m << sh : m >> -sh;
        if (k < f.limbs - 1) /* the top limb keeps a carry of the rounding above */
            v &= LIMB_MASK;
        out[k] = neg ? -(int64_t)v : (int64_t)v;
    }
}

/* 2^e as a double, for e in [-1074, 1023] (subnormal powers included). */
static inline double pow2(int e)
{
    const uint64_t bits = e >= -1022 ? (uint64_t)(e + 1023) << 52 : UINT64_C(1) << (e + 1074);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* The exact value of the limb sums s[0..L-1] (limb k worth 2^(base + 46 k)), rounded once to nearest-even at
 * the precision of f (frac + 1 bits, subnormals included), as a double that holds it exactly (or infinity). */
static inline double decode_finite(const int64_t *s, int32_t code, fmt_t f)
{
    const int L = f.limbs;
    const int base = code + 1 - REPRO_LIMB_BITS * L;
    /* The sum as hi * 2^46 + lo with 0 <= lo < 2^46: |hi| < 2^109, so 128 bits hold it whatever L. */
    __int128 hi = L == 3 ? (__int128)s[2] * ((__int128)1 << REPRO_LIMB_BITS) + s[1] : L == 2 ? s[1] : 0;
    hi += s[0] >> REPRO_LIMB_BITS; /* arithmetic: floor */
    uint64_t lo = (uint64_t)s[0] & LIMB_MASK;
    const int neg = hi < 0;
    if (neg) { /* the magnitude: -(hi * 2^46 + lo) */
        hi = -hi;
        if (lo) {
            hi -= 1;
            lo = (UINT64_C(1) << REPRO_LIMB_BITS) - lo;
        }
    }
    const unsigned __int128 h = (unsigned __int128)hi;
    /* A window w of the top bits, its last bit worth 2^(window_lsb + base); below it only a sticky bit. */
    unsigned __int128 w;
    int window_lsb, msb, sticky = 0;
    if (h) {
        const uint64_t top = (uint64_t)(h >> 64);
        const int h_msb = top ? 64 + bit_length(top) - 1 : bit_length((uint64_t)h) - 1;
        msb = REPRO_LIMB_BITS + h_msb;
        w = h << 20 | lo >> 26; /* h < 2^108 */
        sticky = (lo & ((UINT64_C(1) << 26) - 1)) != 0;
        window_lsb = 26;
    } else {
        if (!lo)
            return 0.0;
        msb = bit_length(lo) - 1;
        w = lo;
        window_lsb = 0;
    }
    const int min_lsb = 1 - ((1 << (f.exp_bits - 1)) - 1) - f.frac; /* the last bit of a subnormal */
    int keep_lsb = msb - f.frac;
    if (keep_lsb < min_lsb - base)
        keep_lsb = min_lsb - base;
    uint64_t q;
    const int sh = keep_lsb - window_lsb;
    if (sh <= 0) { /* every bit kept: exact */
        q = (uint64_t)w << -sh;
    } else if (sh > 128) {
        q = 0; /* below half of the last kept bit */
    } else {
        q = sh == 128 ? 0 : (uint64_t)(w >> sh);
        const int half = (int)((w >> (sh - 1)) & 1);
        const int below = sticky || (sh > 1 && (w & (((unsigned __int128)1 << (sh - 1)) - 1)) != 0);
        q += half && (below || (q & 1));
    }
    const int e = keep_lsb + base; /* q <= 2^(frac+1), so q * 2^e is exact, or infinity */
    const double mag = e > 1023 ? (q ? INFINITY : 0.0) : (double)q * pow2(e);
    return neg ? -mag : mag;
}

static inline double decode_one(const int64_t *s, int32_t code, fmt_t f)
{
    if (code == REPRO_CODE_NAN)
        return NAN;
    if (code == REPRO_CODE_INF) {
        const int64_t pos = s[0] & ((INT64_C(1) << REPRO_NEG_INF_SHIFT) - 1), neg = s[0] >> REPRO_NEG_INF_SHIFT;
        return pos && neg ? NAN : pos ? INFINITY : -INFINITY;
    }
    if (code == REPRO_CODE_ZERO)
        return 0.0;
    return decode_finite(s, code, f);
}

/* Loads and stores of one element's bits at any alignment. */
static inline uint64_t load_f64(const unsigned char *p, int64_t i) { uint64_t u; memcpy(&u, p + 8 * i, 8); return u; }
static inline uint64_t load_f32(const unsigned char *p, int64_t i) { uint32_t u; memcpy(&u, p + 4 * i, 4); return u; }
static inline uint64_t load_u16(const unsigned char *p, int64_t i) { uint16_t u; memcpy(&u, p + 2 * i, 2); return u; }
static inline void store_f64(unsigned char *p, int64_t i, double v) { memcpy(p + 8 * i, &v, 8); }
static inline void store_f32(unsigned char *p, int64_t i, double v) { float f = (float)v; memcpy(p + 4 * i, &f, 4); }
static inline void store_f16(unsigned char *p, int64_t i, double v)
{
    uint16_t h = pycoll_f32_to_f16((float)v); /* v is exact in float16 or beyond its range: no second rounding */
    memcpy(p + 2 * i, &h, 2);
}
static inline void store_bf16(unsigned char *p, int64_t i, double v)
{
    uint16_t h = pycoll_f32_to_bf16((float)v);
    memcpy(p + 2 * i, &h, 2);
}

#define DEFINE_KERNELS(name, F, load, store)                                                                  \
    static void name##_exponents(const void *x, int64_t n, int32_t *code)                                     \
    {                                                                                                         \
        for (int64_t i = 0; i < n; i++)                                                                       \
            code[i] = code_of(load((const unsigned char *)x, i), F);                                          \
    }                                                                                                         \
    static void name##_encode(const void *x, const int32_t *code, int64_t n, int64_t *limbs)                  \
    {                                                                                                         \
        for (int64_t i = 0; i < n; i++)                                                                       \
            encode_one(load((const unsigned char *)x, i), code[i], F, limbs + i * F.limbs);                   \
    }                                                                                                         \
    static void name##_decode(const int64_t *limbs, const int32_t *code, int64_t n, void *out)                \
    {                                                                                                         \
        for (int64_t i = 0; i < n; i++)                                                                       \
            store((unsigned char *)out, i, decode_one(limbs + i * F.limbs, code[i], F));                      \
    }

DEFINE_KERNELS(f64, F64, load_f64, store_f64)
DEFINE_KERNELS(f32, F32, load_f32, store_f32)
DEFINE_KERNELS(f16, F16, load_u16, store_f16)
DEFINE_KERNELS(bf16, BF16, load_u16, store_bf16)

int repro_limbs(pycoll_dtype_t dtype)
{
    switch (dtype) {
    case PYCOLL_FLOAT64: return F64.limbs;
    case PYCOLL_FLOAT32: return F32.limbs;
    case PYCOLL_FLOAT16: return F16.limbs;
    case PYCOLL_BFLOAT16: return BF16.limbs;
    default: return 0;
    }
}

void repro_exponents(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *code)
{
    switch (dtype) {
    case PYCOLL_FLOAT64: f64_exponents(x, n, code); break;
    case PYCOLL_FLOAT32: f32_exponents(x, n, code); break;
    case PYCOLL_FLOAT16: f16_exponents(x, n, code); break;
    case PYCOLL_BFLOAT16: bf16_exponents(x, n, code); break;
    default: break;
    }
}

void repro_encode(const void *x, const int32_t *code, int64_t n, pycoll_dtype_t dtype, int64_t *limbs)
{
    switch (dtype) {
    case PYCOLL_FLOAT64: f64_encode(x, code, n, limbs); break;
    case PYCOLL_FLOAT32: f32_encode(x, code, n, limbs); break;
    case PYCOLL_FLOAT16: f16_encode(x, code, n, limbs); break;
    case PYCOLL_BFLOAT16: bf16_encode(x, code, n, limbs); break;
    default: break;
    }
}

void repro_decode(const int64_t *limbs, const int32_t *code, int64_t n, pycoll_dtype_t dtype, void *out)
{
    switch (dtype) {
    case PYCOLL_FLOAT64: f64_decode(limbs, code, n, out); break;
    case PYCOLL_FLOAT32: f32_decode(limbs, code, n, out); break;
    case PYCOLL_FLOAT16: f16_decode(limbs, code, n, out); break;
    case PYCOLL_BFLOAT16: bf16_decode(limbs, code, n, out); break;
    default: break;
    }
}
