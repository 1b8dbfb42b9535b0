/* Row normalisation kernels: the epilogue of a fused all-reduce + LayerNorm / RMSNorm. */
#ifndef PYCOLL_ROW_NORM_H
#define PYCOLL_ROW_NORM_H

#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pycoll_norm_kind {
    PYCOLL_NORM_LAYER = 0, /* (v - mean) / sqrt(var + eps) * weight + bias */
    PYCOLL_NORM_RMS = 1,   /* v / sqrt(mean(v * v) + eps) * weight */
    PYCOLL_NUM_NORM_KINDS
} pycoll_norm_kind_t;

/* For each of `rows` rows of `hidden` elements: v = x (+ residual), then out = norm(v) * weight (+ bias).
 * Float dtypes only; float16 / bfloat16 / float32 rows are computed in float32 (statistics included), float64
 * in float64; each output is rounded once to dtype. The variance is the mean of squared deviations from the
 * mean (two passes over the row, no cancellation). out may be x or residual (the same memory, row for row);
 * residual and bias may be NULL; weight may not. Returns PYCOLL_ERR_UNSUPPORTED for another dtype,
 * PYCOLL_ERR_INVALID for negative sizes, a NULL buffer or eps that is negative or not finite. */
PYCOLL_API pycoll_status_t pycoll_norm_rows(void *out, const void *x, const void *residual, const void *weight,
                                            const void *bias, int64_t rows, int64_t hidden, pycoll_dtype_t dtype,
                                            pycoll_norm_kind_t kind, double eps);

#ifdef __cplusplus
}
#endif

#endif
