/* pycoll_norm_rows: residual add, statistics and normalisation of whole rows, one row at a time so that the
 * row stays in L1 between its passes. Plain C the compiler vectorises: the sums keep NORM_LANES independent
 * partial sums (lane k adds elements k, k + NORM_LANES, ...), an order fixed by the code rather than by the
 * vector width, so every build and every rank computes the same bits without -ffast-math's reassociation. */
#include "pycoll/row_norm.h"

#include "kernels/half_float.h"

#include <math.h>
#include <stdlib.h>

#define NORM_LANES 16

/* The row kernels of one accumulation type T (float for the 16-bit types and float32, double for float64):
 * the sum of v, the sum of squares of (v - centre), and out = (v - centre) * scale * w (+ b), where out may be
 * v itself (element for element, so neither is restrict). */
#define DEFINE_ROW_KERNELS(T, SUFFIX)                                                                          \
    static T row_sum_##SUFFIX(const T *v, int64_t n)                                                           \
    {                                                                                                          \
        T lane[NORM_LANES] = {0};                                                                              \
        int64_t i = 0;                                                                                         \
        for (; i + NORM_LANES <= n; i += NORM_LANES)                                                           \
            for (int k = 0; k < NORM_LANES; k++)                                                               \
                lane[k] += v[i + k];                                                                           \
        for (int k = 0; i + k < n; k++)                                                                        \
            lane[k] += v[i + k];                                                                               \
        T total = 0;                                                                                           \
        for (int k = 0; k < NORM_LANES; k++)                                                                   \
            total += lane[k];                                                                                  \
        return total;                                                                                          \
    }                                                                                                          \
    static T row_squares_##SUFFIX(const T *v, int64_t n, T centre)                                             \
    {                                                                                                          \
        T lane[NORM_LANES] = {0};                                                                              \
        int64_t i = 0;                                                                                         \
        for (; i + NORM_LANES <= n; i += NORM_LANES)                                                           \
            for (int k = 0; k < NORM_LANES; k++) {                                                             \
                const T d = v[i + k] - centre;                                                                 \
                lane[k] += d * d;                                                                              \
            }                                                                                                  \
        for (int k = 0; i + k < n; k++) {                                                                      \
            const T d = v[i + k] - centre;                                                                     \
            lane[k] += d * d;                                                                                  \
        }                                                                                                      \
        T total = 0;                                                                                           \
        for (int k = 0; k < NORM_LANES; k++)                                                                   \
            total += lane[k];                                                                                  \
        return total;                                                                                          \
    }                                                                                                          \
    static void row_scale_##SUFFIX(T *out, const T *v, int64_t n, T centre, T scale,                         \
                                   const T *restrict w, const T *restrict b)                                   \
    {                                                                                                          \
        if (b)                                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                                    \
                out[i] = (v[i] - centre) * scale * w[i] + b[i];                                                \
        else                                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                                    \
                out[i] = (v[i] - centre) * scale * w[i];                                                       \
    }                                                                                                          \
    /* centre and 1 / sqrt(spread + eps) of one row: LayerNorm's mean and variance, RMSNorm's 0 and mean   \
     * square. */                                                                                              \
    static void row_stats_##SUFFIX(const T *v, int64_t n, pycoll_norm_kind_t kind, T eps, T *centre, T *scale) \
    {                                                                                                          \
        *centre = kind == PYCOLL_NORM_LAYER ? row_sum_##SUFFIX(v, n) / (T)n : (T)0;                            \
        const T spread = row_squares_##SUFFIX(v, n, *centre) / (T)n;                                           \
        *scale = (T)1 / (T)sqrt((double)(spread + eps));                                                       \
    }

DEFINE_ROW_KERNELS(float, f32)
DEFINE_ROW_KERNELS(double, f64)

/* One float16 or bfloat16 element as float32 (exact for both). dtype is the same for a whole row: the compiler
 * takes the test out of the loops below. */
static inline float half_to_f32(uint16_t h, pycoll_dtype_t dtype)
{
    return dtype == PYCOLL_FLOAT16 ? pycoll_f16_to_f32(h) : pycoll_bf16_to_f32(h);
}

/* A row widened to float32, plus the residual's row where there is one (float32 rows come here only with a
 * residual: without one they are used where they lie). */
static void widen_row(float *restrict dst, const void *src, const void *residual, int64_t n, pycoll_dtype_t dtype)
{
    if (dtype != PYCOLL_FLOAT16 && dtype != PYCOLL_BFLOAT16) {
        const float *x = src, *rf = residual;
        for (int64_t i = 0; i < n; i++)
            dst[i] = x[i] + rf[i];
        return;
    }
    const uint16_t *h = src, *r = residual;
    for (int64_t i = 0; i < n; i++)
        dst[i] = half_to_f32(h[i], dtype);
    if (r)
        for (int64_t i = 0; i < n; i++)
            dst[i] += half_to_f32(r[i], dtype);
}

static void narrow_row(void *dst, const float *src, int64_t n, pycoll_dtype_t dtype)
{
    uint16_t *h = dst;
    if (dtype == PYCOLL_FLOAT16)
        for (int64_t i = 0; i < n; i++)
            h[i] = pycoll_f32_to_f16(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            h[i] = pycoll_f32_to_bf16(src[i]);
}

/* The float32-accumulated types. scratch: 3 * hidden floats (the widened row, and for the 16-bit types the
 * widened weight and bias; the normalised row reuses the widened one). */
static void norm_rows_f32(void *out, const void *x, const void *residual, const void *weight, const void *bias,
                          int64_t rows, int64_t n, pycoll_dtype_t dtype, pycoll_norm_kind_t kind, float eps,
                          float *scratch)
{
    const int narrow = dtype != PYCOLL_FLOAT32;
    const size_t esize = pycoll_dtype_size(dtype);
    float *row = scratch;
    const float *w = weight, *b = bias;
    if (narrow) {
        float *ww = scratch + n, *bw = bias ? scratch + 2 * n : NULL;
        widen_row(ww, weight, NULL, n, dtype);
        if (bw)
            widen_row(bw, bias, NULL, n, dtype);
        w = ww;
        b = bw;
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t at = r * n * (int64_t)esize;
        const void *xr = (const char *)x + at;
        const void *rr = residual ? (const char *)residual + at : NULL;
        const float *v = row;
        if (narrow || rr)
            widen_row(row, xr, rr, n, dtype);
        else
            v = xr;
        float centre, scale;
        row_stats_f32(v, n, kind, eps, &centre, &scale);
        if (narrow) {
            row_scale_f32(row, v, n, centre, scale, w, b);
            narrow_row((char *)out + at, row, n, dtype);
        } else {
            row_scale_f32((float *)((char *)out + at), v, n, centre, scale, w, b);
        }
    }
}

static void norm_rows_f64(double *out, const double *x, const double *residual, const double *w,
                          const double *b, int64_t rows, int64_t n, pycoll_norm_kind_t kind, double eps,
                          double *row)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *v = x + r * n;
        if (residual) {
            for (int64_t i = 0; i < n; i++)
                row[i] = v[i] + residual[r * n + i];
            v = row;
        }
        double centre, scale;
        row_stats_f64(v, n, kind, eps, &centre, &scale);
        row_scale_f64(out + r * n, v, n, centre, scale, w, b);
    }
}

pycoll_status_t pycoll_norm_rows(void *out, const void *x, const void *residual, const void *weight,
                                 const void *bias, int64_t rows, int64_t hidden, pycoll_dtype_t dtype,
                                 pycoll_norm_kind_t kind, double eps)
{
    if (dtype != PYCOLL_FLOAT16 && dtype != PYCOLL_BFLOAT16 && dtype != PYCOLL_FLOAT32 && dtype != PYCOLL_FLOAT64)
        return PYCOLL_ERR_UNSUPPORTED;
    if (rows < 0 || hidden < 0 || (unsigned)kind >= PYCOLL_NUM_NORM_KINDS || !(eps >= 0) || !isfinite(eps) ||
        hidden > INT64_MAX / 8 / 3 || (rows > 0 && hidden > INT64_MAX / 8 / rows))
        return PYCOLL_ERR_INVALID;
    if (rows == 0 || hidden == 0)
        return PYCOLL_OK;
    if (!out || !x || !weight)
        return PYCOLL_ERR_INVALID;
    if (dtype == PYCOLL_FLOAT64) {
        double *row = residual ? malloc((size_t)hidden * sizeof *row) : NULL;
        if (residual && !row)
            return PYCOLL_ERR_NOMEM;
        norm_rows_f64(out, x, residual, weight, bias, rows, hidden, kind, eps, row);
        free(row);
        return PYCOLL_OK;
    }
    float *scratch = malloc((size_t)hidden * 3 * sizeof *scratch);
    if (!scratch)
        return PYCOLL_ERR_NOMEM;
    norm_rows_f32(out, x, residual, weight, bias, rows, hidden, dtype, kind, (float)eps, scratch);
    free(scratch);
    return PYCOLL_OK;
}
