/* Compensated summation: loading plain values into (sum, comp) pairs, combining pairs (through the active
 * kernel table) and rounding pairs back once. */
#include "kernels/complex_parts.h"
#include "kernels/half_float.h"
#include "kernels/kernel_table.h"
#include "kernels/two_sum.h"
#include "kernels/unaligned.h"
#include "pycoll/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int is_float(pycoll_dtype_t dtype)
{
    return (pycoll_dtype_table(NULL)[dtype].flags & PYCOLL_DTYPE_FLOAT) != 0;
}

pycoll_dtype_t pycoll_accumulator_dtype(pycoll_dtype_t dtype)
{
    return (unsigned)dtype < PYCOLL_NUM_DTYPES ? pycoll_dtype_table(NULL)[dtype].accumulator : dtype;
}

/* Checks the arguments, then rewrites a complex (count, dtype) as its real parts: a complex sum is compensated
 * part by part, so its pairs are the real type's pairs of twice the count. */
static pycoll_status_t check_compensated(int64_t *count, pycoll_dtype_t *dtype, int pointers_ok)
{
    if (*count < 0 || (unsigned)*dtype >= PYCOLL_NUM_DTYPES || (*count > 0 && !pointers_ok))
        return PYCOLL_ERR_INVALID;
    complex_as_parts(count, dtype);
    return is_float(*dtype) ? PYCOLL_OK : PYCOLL_ERR_UNSUPPORTED;
}

pycoll_status_t pycoll_compensated_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                           int64_t count, pycoll_dtype_t dtype)
{
    pycoll_status_t status = check_compensated(&count, &dtype, dst_sum && dst_comp && src_sum && src_comp);
    if (status != PYCOLL_OK || count == 0)
        return status;
    const pycoll_kernel_table_t *kernels = pycoll_active_kernels();
    if (dtype == PYCOLL_FLOAT64)
        kernels->combine_f64(dst_sum, dst_comp, src_sum, src_comp, count);
    else
        kernels->combine_f32(dst_sum, dst_comp, src_sum, src_comp, count);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_compensated_load(void *sum, void *comp, const void *src, int64_t count, pycoll_dtype_t dtype)
{
    pycoll_status_t status = check_compensated(&count, &dtype, sum && comp && src);
    if (status != PYCOLL_OK || count == 0)
        return status;
    size_t acc_size = pycoll_dtype_size(pycoll_accumulator_dtype(dtype));
    const unaligned_u16 *half = src;
    unaligned_f32 *acc = sum;
    switch (dtype) {
    case PYCOLL_FLOAT16:
        for (int64_t i = 0; i < count; i++)
            acc[i] = pycoll_f16_to_f32(half[i]);
        break;
    case PYCOLL_BFLOAT16:
        for (int64_t i = 0; i < count; i++)
            acc[i] = pycoll_bf16_to_f32(half[i]);
        break;
    default:
        memmove(sum, src, (size_t)count * acc_size);
        break;
    }
    memset(comp, 0, (size_t)count * acc_size);
    return PYCOLL_OK;
}

/* Round-to-odd into float32 of the exact value x + tail (|tail| <= half an ulp of x): a float32 whose last
 * bit is set whenever it is inexact. Rounding that once more to a 16-bit format (to nearest even) equals
 * rounding x + tail directly, since 24 >= 16 + 2 bits: this is how the store avoids double rounding. */
static float round_to_odd_f32(double x, double tail)
{
    float f = (float)x;
    if (!isfinite(x)) /* an infinity or NaN sum is the result as it is (its tail is no number) */
        return f;
    double below = (double)f != x ? x - (double)f : tail; /* where the exact value lies from f */
    uint32_t bits = pycoll_f32_bits(f);
    if (below != 0.0 && !(bits & 1u)) {
        if (f == 0.0f) /* the smallest subnormal on the exact value's side */
            bits = (below < 0.0 ? 0x80000000u : 0u) | 1u;
        else /* one ulp toward the exact value: up in magnitude when it lies beyond f */
            bits = (below > 0.0) == (f > 0.0f) ? bits + 1u : bits - 1u;
    }
    return pycoll_f32_from_bits(bits);
}

/* Dekker's exact product (no FMA): p + err == a * b exactly. */
static inline double two_product_f64(double a, double b, double *err)
{
    const double split = 134217729.0; /* 2^27 + 1 */
    double p = a * b;
    double ta = split * a, ah = ta - (ta - a), al = a - ah;
    double tb = split * b, bh = tb - (tb - b), bl = b - bh;
    *err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return p;
}

/* The same for a whole number b below 2^26 (a divisor: a number of ranks), with fewer operations: a's
 * significand loses its low 27 bits by a mask (ah), ah * b (26 + 26 bits) and (a - ah) * b (27 + 26) are
 * exact, and ah * b - p is exact as the two are within a factor of two. */
#define SMALL_DIVISOR 67108864.0 /* 2^26 */
static inline double product_by_small_f64(double a, double b, double *err)
{
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    bits &= ~(uint64_t)0x7ffffff;
    double ah;
    memcpy(&ah, &bits, sizeof ah);
    double p = a * b;
    *err = (ah * b - p) + (a - ah) * b;
    return p;
}

/* (s + c) / d with the remainder folded back in, so comp still counts when dividing (double-double style). An
 * infinite or NaN sum divides as fast mode's does (its remainder would be NaN). For |s| <= HUGE_SUM only:
 * near the largest value q * d or Dekker's split of q could overflow (divide_huge_pair_f64). */
#define HUGE_SUM 1e299 /* ~2^993 */
static inline double divide_pair_f64(double s, double c, double d, double *tail)
{
    double q = s / d;
    double pe;
    double p = d < SMALL_DIVISOR ? product_by_small_f64(q, d, &pe) : two_product_f64(q, d, &pe);
    double r = ((s - p) - pe) + c;
    double q2 = pycoll_signed_zero_f64(r / d);
    double t;
    double out = pycoll_two_sum_f64(q, q2, &t);
    int finite = q - q == 0.0;
    *tail = finite ? t : 0.0;
    return finite ? out : q;
}

/* Any s: the pair scaled down by 2^64 (exactly, but for bits of c far below s's last), divided, scaled back. */
static double divide_huge_pair_f64(double s, double c, double d, double *tail)
{
    const double scale = 18446744073709551616.0; /* 2^64 */
    double out = divide_pair_f64(s / scale, c / scale, d, tail);
    *tail *= scale;
    return out * scale;
}

/* One loop per case, each simple enough to be vectorised; sums past HUGE_SUM (rare) are redone. */
static void store_f64(unaligned_f64 *dst, const unaligned_f64 *sum, const unaligned_f64 *comp, int64_t n, int64_t divisor)
{
    double d = (double)divisor, tail;
    if (divisor == 1) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = sum[i] + pycoll_signed_zero_f64(comp[i]);
        return;
    }
    /* Whether any |sum| is past 2^993 (<= HUGE_SUM), from its bits: the magnitude plus 2^63 - 1 - bits(2^993)
     * carries into the top bit exactly when it is larger. Integer adds and ors keep the loop vectorised. */
    const uint64_t magnitude = 0x7fffffffffffffffull, past = magnitude - 0x7e00000000000000ull;
    uint64_t huge = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits;
        double si = sum[i];
        memcpy(&bits, &si, sizeof bits);
        huge |= (bits & magnitude) + past;
        dst[i] = divide_pair_f64(si, comp[i], d, &tail);
    }
    double huge_tail; /* apart from tail, which must not escape into a call the first loop cannot inline */
    for (int64_t i = 0; (huge >> 63) && i < n; i++)
        if (fabs(sum[i]) > HUGE_SUM)
            dst[i] = divide_huge_pair_f64(sum[i], comp[i], d, &huge_tail);
}

/* float32 pairs: the value (and quotient) is formed in double, then rounded once to the plain type. */
static void store_from_f32(pycoll_dtype_t dtype, void *dst, const unaligned_f32 *sum, const unaligned_f32 *comp, int64_t n,
                           int64_t divisor)
{
    double d = (double)divisor, tail;
    unaligned_f32 *f32 = dst;
    if (dtype == PYCOLL_FLOAT32 && divisor == 1) {
        for (int64_t i = 0; i < n; i++)
            f32[i] = sum[i] + pycoll_signed_zero_f32(comp[i]);
        return;
    }
    if (dtype == PYCOLL_FLOAT32) {
        for (int64_t i = 0; i < n; i++)
            f32[i] = (float)divide_pair_f64(sum[i], comp[i], d, &tail);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = divisor > 1 ? divide_pair_f64(sum[i], comp[i], d, &tail)
                               : pycoll_two_sum_f64(sum[i], pycoll_signed_zero_f64(comp[i]), &tail);
        float odd = round_to_odd_f32(x, tail);
        ((unaligned_u16 *)dst)[i] = dtype == PYCOLL_FLOAT16 ? pycoll_f32_to_f16(odd) : pycoll_f32_to_bf16(odd);
    }
}

pycoll_status_t pycoll_compensated_store(void *dst, const void *sum, const void *comp, int64_t count,
                                         pycoll_dtype_t dtype, int64_t divisor)
{
    pycoll_status_t status = check_compensated(&count, &dtype, dst && sum && comp);
    if (status == PYCOLL_OK && divisor < 1)
        status = PYCOLL_ERR_INVALID;
    if (status != PYCOLL_OK || count == 0)
        return status;
    if (dtype == PYCOLL_FLOAT64)
        store_f64(dst, sum, comp, count, divisor);
    else
        store_from_f32(dtype, dst, sum, comp, count, divisor);
    return PYCOLL_OK;
}
