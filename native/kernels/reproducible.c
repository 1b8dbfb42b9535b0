/* The encode / decode kernels of accuracy="reproducible" (reproducible.h). Integer only, except the last,
 * exact, assembly of the rounded result: no step depends on the floating-point environment. One loop per dtype,
 * each an inlined instance of the generic element functions below with its format as constants. */
#include "kernels/reproducible.h"

#include <math.h>
#include <string.h>

#include "kernels/half_float.h"
#include "kernels/kernel_table.h"

#define LIMB_MASK ((UINT64_C(1) << REPRO_LIMB_BITS) - 1)

/* A binary float format: fraction bits, exponent bits, limbs. */
typedef struct fmt {
    int frac, exp_bits, limbs;
} fmt_t;

/* Every element function is forced inline into its dtype's loop, where the format is a constant: called, it
 * would read the format at run time and keep every shift and limb loop general. */
#define ELEMENT static inline __attribute__((always_inline))

static const fmt_t F64 = {52, 11, 3}, F32 = {23, 8, 2}, F16 = {10, 5, 1}, BF16 = {7, 8, 2};

/* The fields of a float's bits. */
static inline int field_biased(uint64_t bits, fmt_t f) { return (int)((bits >> f.frac) & ((1u << f.exp_bits) - 1)); }
static inline uint64_t field_frac(uint64_t bits, fmt_t f) { return bits & ((UINT64_C(1) << f.frac) - 1); }
static inline int field_neg(uint64_t bits, fmt_t f) { return (int)((bits >> (f.frac + f.exp_bits)) & 1); }
static inline int bias_of(fmt_t f) { return (1 << (f.exp_bits - 1)) - 1; }
static inline int max_biased(fmt_t f) { return (1 << f.exp_bits) - 1; }

static inline int bit_length(uint64_t v) { return 64 - __builtin_clzll(v); }

/* The code of one element, with selects rather than a switch, so that the loop stays cheap. */
ELEMENT int32_t code_of(uint64_t bits, fmt_t f)
{
    const int biased = field_biased(bits, f);
    const uint64_t frac = field_frac(bits, f);
    /* A subnormal's top bit; frac | 1 keeps clz defined, and zero is told apart below. */
    const int sub = 1 - bias_of(f) - f.frac + bit_length(frac | 1) - 1;
    const int32_t finite = biased ? biased - bias_of(f) : frac ? sub : REPRO_CODE_ZERO;
    const int32_t special = frac ? REPRO_CODE_NAN : REPRO_CODE_INF;
    return biased == max_biased(f) ? special : finite;
}

enum { CLASS_ZERO, CLASS_FINITE, CLASS_INF, CLASS_NAN };

/* bits as sign, integer significand m and the exponent of its last bit: |x| = m * 2^e_lsb. */
ELEMENT int unpack(uint64_t bits, fmt_t f, int *neg, uint64_t *m, int *e_lsb)
{
    const uint64_t frac = field_frac(bits, f);
    const int biased = field_biased(bits, f);
    *neg = field_neg(bits, f);
    if (biased == max_biased(f))
        return frac ? CLASS_NAN : CLASS_INF;
    if (biased == 0) {
        *m = frac;
        *e_lsb = 1 - bias_of(f) - f.frac;
        return frac ? CLASS_FINITE : CLASS_ZERO;
    }
    *m = frac | (UINT64_C(1) << f.frac);
    *e_lsb = biased - bias_of(f) - f.frac;
    return CLASS_FINITE;
}

/* v >> s rounded to nearest, ties to even; s in [1, 63]. */
ELEMENT uint64_t round_shift(uint64_t v, int s)
{
    const uint64_t q = v >> s, rem = v & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

ELEMENT void encode_one(uint64_t bits, int32_t code, fmt_t f, int64_t *out)
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
        const uint64_t sign = -(uint64_t)neg; /* negation without a branch: the signs are random */
        out[k] = (int64_t)((v ^ sign) - sign);
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

static inline int msb128(unsigned __int128 v) /* v != 0 */
{
    const uint64_t top = (uint64_t)(v >> 64);
    return top ? 127 - __builtin_clzll(top) : 63 - __builtin_clzll((uint64_t)v);
}

/* M * 2^(base + scale), with `sticky` standing for nonzero bits below M's last one and `neg` for the sign, rounded
 * once to nearest-even at the precision of f (frac + 1 bits, subnormals included), as a double that holds it
 * exactly (or infinity). */
ELEMENT double round_magnitude(unsigned __int128 M, int scale, int sticky, int neg, int base, fmt_t f)
{
    if (!M)
        return 0.0;
    /* The top 63 bits, the rest folded into the sticky bit. */
    const int msb = msb128(M);
    const unsigned __int128 norm = M << (127 - msb);
    const uint64_t top64 = (uint64_t)(norm >> 64);
    sticky |= (uint64_t)norm != 0 || (top64 & 1);
    const uint64_t top = top64 >> 1; /* bit 62 is the msb, worth 2^(msb + scale) in base units */
    const int min_lsb = 1 - bias_of(f) - f.frac; /* the last bit of a subnormal */
    int keep_lsb = msb + scale - f.frac;
    if (keep_lsb < min_lsb - base)
        keep_lsb = min_lsb - base;
    const int r = keep_lsb - (msb + scale - 62); /* bits of top below the kept ones: at least 62 - frac */
    uint64_t q = 0;
    if (r <= 63) {
        q = top >> r;
        /* sticky only matters at an exact half, where it breaks the tie upward; half is never bit 0 here */
        const uint64_t rem = (top & ((UINT64_C(1) << r) - 1)) | (uint64_t)sticky, half = UINT64_C(1) << (r - 1);
        q += (rem + half - 1 + (q & 1)) >> r;
    }
    const int e = keep_lsb + base; /* q <= 2^(frac+1), so q * 2^e is exact, or infinity */
    double mag = e > 1023 ? (q ? INFINITY : 0.0) : (double)q * pow2(e);
    uint64_t bits;
    memcpy(&bits, &mag, sizeof bits);
    bits |= (uint64_t)neg << 63; /* the sign, without a branch */
    memcpy(&mag, &bits, sizeof mag);
    return mag;
}

/* The exact value of the limb sums s[0..L-1] (limb k worth 2^(base + 46 k)), rounded once (round_magnitude). */
ELEMENT double decode_finite(const int64_t *s, int32_t code, fmt_t f)
{
    const int L = f.limbs;
    const int base = code + 1 - REPRO_LIMB_BITS * L;
    /* The magnitude as M * 2^scale (M < 2^128) and a sticky bit for what lies below M's last bit. */
    unsigned __int128 M;
    int neg, scale = 0, sticky = 0;
    if (L < 3) { /* |sum| < 2^110: one 128-bit integer holds it */
        const __int128 v = (L == 2 ? (__int128)s[1] * ((__int128)1 << REPRO_LIMB_BITS) : 0) + s[0];
        const unsigned __int128 sign = (unsigned __int128)(v >> 127); /* all ones where negative */
        neg = v < 0;
        M = ((unsigned __int128)v ^ sign) - sign; /* the magnitude without a branch: the signs are random */
    } else {
        /* hi * 2^46 + lo with 0 <= lo < 2^46 and |hi| < 2^110. */
        __int128 hi = (__int128)s[2] * ((__int128)1 << REPRO_LIMB_BITS) + s[1];
        hi += s[0] >> REPRO_LIMB_BITS; /* arithmetic: floor */
        const uint64_t lo_signed = (uint64_t)s[0] & LIMB_MASK;
        neg = hi < 0;
        /* The magnitude -(hi * 2^46 + lo) where negative, without a branch: (-hi - 1) * 2^46 + (2^46 - lo), or
         * -hi * 2^46 where lo is 0. */
        const unsigned __int128 sign = (unsigned __int128)(hi >> 127);
        const unsigned __int128 h = (((unsigned __int128)hi ^ sign) - sign) - (sign & (lo_signed != 0));
        const uint64_t lo = ((lo_signed ^ (uint64_t)sign) - (uint64_t)sign) & LIMB_MASK;
        if (h >> (128 - REPRO_LIMB_BITS)) { /* h * 2^46 would not fit; h alone has more bits than the window
                                              * below takes, so lo only adds its sticky bit */
            M = h;
            scale = REPRO_LIMB_BITS;
            sticky = lo != 0;
        } else {
            M = h << REPRO_LIMB_BITS | lo;
        }
    }
    return round_magnitude(M, scale, sticky, neg, base, f);
}

ELEMENT double decode_one(const int64_t *s, int32_t code, fmt_t f)
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

/* Loads and stores of one element's bits at any alignment (types the vectoriser can widen, unlike memcpy). */
typedef uint64_t any_u64 __attribute__((may_alias));
typedef uint32_t any_u32 __attribute__((may_alias));
typedef uint16_t any_u16 __attribute__((may_alias));
static inline uint64_t load_f64(const unsigned char *p, int64_t i) { return ((const any_u64 *)p)[i]; }
static inline uint64_t load_f32(const unsigned char *p, int64_t i) { return ((const any_u32 *)p)[i]; }
static inline uint64_t load_u16(const unsigned char *p, int64_t i) { return ((const any_u16 *)p)[i]; }
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

/* One float dtype's format and its general-form loops (repro_exponents, repro_encode, repro_decode). */
typedef struct {
    const fmt_t *fmt;
    void (*exponents)(const void *x, int64_t n, int32_t *code);
    void (*encode)(const void *x, const int32_t *code, int64_t n, int64_t *limbs);
    void (*decode)(const int64_t *limbs, const int32_t *code, int64_t n, void *out);
} general_kernels_t;

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
    }                                                                                                         \
    static const general_kernels_t name##_kernels = {&F, name##_exponents, name##_encode, name##_decode};

DEFINE_KERNELS(f64, F64, load_f64, store_f64)
DEFINE_KERNELS(f32, F32, load_f32, store_f32)
DEFINE_KERNELS(f16, F16, load_u16, store_f16)
DEFINE_KERNELS(bf16, BF16, load_u16, store_bf16)

/* NULL for a dtype that has no reproducible form (integers, complex: part by part). */
static const general_kernels_t *kernels_of(pycoll_dtype_t dtype)
{
    switch (dtype) {
    case PYCOLL_FLOAT64: return &f64_kernels;
    case PYCOLL_FLOAT32: return &f32_kernels;
    case PYCOLL_FLOAT16: return &f16_kernels;
    case PYCOLL_BFLOAT16: return &bf16_kernels;
    default: return NULL;
    }
}

int repro_limbs(pycoll_dtype_t dtype)
{
    const general_kernels_t *k = kernels_of(dtype);
    return k ? k->fmt->limbs : 0;
}

void repro_exponents(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *code)
{
    const general_kernels_t *k = kernels_of(dtype);
    if (k)
        k->exponents(x, n, code);
}

void repro_encode(const void *x, const int32_t *code, int64_t n, pycoll_dtype_t dtype, int64_t *limbs)
{
    const general_kernels_t *k = kernels_of(dtype);
    if (k)
        k->encode(x, code, n, limbs);
}

void repro_decode(const int64_t *limbs, const int32_t *code, int64_t n, pycoll_dtype_t dtype, void *out)
{
    const general_kernels_t *k = kernels_of(dtype);
    if (k)
        k->decode(limbs, code, n, out);
}

/* ceil(log2(n)) for n >= 1. */
static int ceil_log2(int32_t n)
{
    int bits = 0;
    while (bits < 31 && (INT32_C(1) << bits) < n)
        bits++;
    return bits;
}

repro_plan_t repro_plan(const int32_t *summary, pycoll_dtype_t dtype, int32_t world_size)
{
    repro_plan_t plan = {0, REPRO_LIMB_BITS, 0, REPRO_WIDE, 0};
    const general_kernels_t *k = kernels_of(dtype);
    if (!k || summary[REPRO_SUMMARY_LEN - 1])
        return plan; /* an infinity or NaN somewhere: the general mode's codes carry them */
    const fmt_t f = *k->fmt;
    /* The headroom of the sum over the ranks: W bits a limb, under 2^W from each rank, under 2^62 in all -- a bit
     * below int64's range, so that decoding's carry between limbs and its int64 <-> double round trip never
     * overflow. */
    const int headroom = ceil_log2(world_size > 1 ? world_size : 1), bits = 62 - headroom;
    const int32_t top = summary[0], bottom = -summary[1];
    if (top == 0) /* every element zero everywhere */
        return (repro_plan_t){1, bits, 0, REPRO_NARROW_ONE, 53 - headroom};
    /* Every element's bits lie in [bottom - bias - frac, top - bias]: this many bits. */
    const int32_t span = top - bottom + f.frac + 1;
    /* Beyond the general mode's exact range the general mode rounds, and its bits are the result's; beyond two
     * limbs the exact mode's decoding would need more than 128-bit integers. */
    if (span > REPRO_LIMB_BITS * f.limbs || span > 2 * bits || bits < REPRO_LIMB_BITS)
        return plan;
    plan.limbs = (span + bits - 1) / bits;
    plan.bits = bits;
    /* Each rank's limb is below 2^(top - bias + 1 - base - bits * (limbs - 1)), so raising base to keep that at
     * 2^(53 - headroom) leaves the sum of a limb below 2^53; every element's last bit stays at or above base
     * while the span fits those bits, limbs times. */
    const int32_t top_bit = top - bias_of(f) + 1; /* every element is below 2^top_bit */
    plan.narrow_bits = 53 - headroom;
    /* Sums of doubles must stay finite where the exact sum's limbs would: below 2^1023, whatever the order. */
    const int sums_finite = dtype != PYCOLL_FLOAT64 || top_bit + headroom <= 1023;
    if (span <= plan.narrow_bits && sums_finite) /* one limb, then */
        plan.narrow = REPRO_NARROW_ONE;
    else if (plan.limbs == 2 && dtype == PYCOLL_FLOAT64 && span <= 2 * plan.narrow_bits && sums_finite &&
             top_bit - 2 * plan.narrow_bits >= -1022) /* both parts and their scales normal doubles */
        plan.narrow = REPRO_NARROW_SPLIT;
    plan.base = top_bit - (plan.narrow ? plan.narrow_bits : bits) * plan.limbs;
    return plan;
}

void repro_summarize(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary)
{
    pycoll_active_kernels()->repro[dtype].summary(x, n, summary);
}

void repro_encode_exact(const void *x, int64_t n, pycoll_dtype_t dtype, const repro_plan_t *plan, int64_t *limbs)
{
    pycoll_active_kernels()->repro[dtype].encode[plan->limbs - 1](x, n, plan->base, plan->bits, limbs);
}

void repro_decode_exact(const int64_t *limbs, int64_t n, pycoll_dtype_t dtype, const repro_plan_t *plan,
                        void *out)
{
    const pycoll_repro_kernels_t *k = &pycoll_active_kernels()->repro[dtype];
    (plan->narrow == REPRO_NARROW_ONE ? k->decode_narrow : k->decode[plan->limbs - 1])(limbs, n, plan->base, plan->bits,
                                                                                      out);
}

void repro_sum_narrow(const void *const *x, int32_t n_x, int64_t n, pycoll_dtype_t dtype, double *acc, void *out)
{
    pycoll_active_kernels()->repro[dtype].sum_narrow(x, n_x, n, acc, out);
}

void repro_split_encode(const double *x, int64_t n, const repro_plan_t *plan, double *halves)
{
    pycoll_active_kernels()->repro_split.encode(x, n, plan->base + plan->narrow_bits, halves);
}

void repro_split_sum(const void *const *halves, int32_t n_x, int64_t n, double *acc, double *out)
{
    pycoll_active_kernels()->repro_split.sum(halves, n_x, n, acc, out);
}
