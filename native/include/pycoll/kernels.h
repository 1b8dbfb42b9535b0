/* Element-wise reduction kernels: dst = op(dst, src). SIMD variants are chosen at run time. */
#ifndef PYCOLL_KERNELS_H
#define PYCOLL_KERNELS_H

#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = op(dst[i], src[i]) for i < count. PYCOLL_AVG combines like PYCOLL_SUM; the caller scales once at
 * the end with pycoll_scale_avg. Integers wrap like numpy; min/max propagate NaN like np.minimum/np.maximum;
 * float16/bfloat16 are combined in float32 and rounded once to nearest-even.
 * Returns PYCOLL_ERR_UNSUPPORTED for a dtype/op pair with no kernel. */
PYCOLL_API pycoll_status_t pycoll_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                              pycoll_op_t op);

/* out[i] = op(a[i], b[i]): the out-of-place form (out may alias a or b). */
PYCOLL_API pycoll_status_t pycoll_reduce(void *out, const void *a, const void *b, int64_t count,
                                         pycoll_dtype_t dtype, pycoll_op_t op);

/* buf[i] /= divisor, the last step of PYCOLL_AVG. Integers truncate toward zero (as NCCL's avg does). */
PYCOLL_API pycoll_status_t pycoll_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor);

/* Compensated summation. A compensated value is a pair (sum, comp) of arrays in the "accumulator type":
 * float64 for float64, float32 for float32, float16 and bfloat16. The exact value it stands for is sum + comp.
 * Pairs from two ranks are combined with TwoSum (Knuth), which needs no ordering of the operands (unlike
 * Fast2Sum), so partial sums meeting from different ranks stay correctly compensated. */
PYCOLL_API pycoll_dtype_t pycoll_accumulator_dtype(pycoll_dtype_t dtype);

/* (dst_sum, dst_comp) += (src_sum, src_comp), element-wise, all arrays in the accumulator type of dtype. */
PYCOLL_API pycoll_status_t pycoll_compensated_combine(void *dst_sum, void *dst_comp, const void *src_sum,
                                                      const void *src_comp, int64_t count, pycoll_dtype_t dtype);

/* Start a pair from plain values: sum = (accumulator type) src, comp = 0. */
PYCOLL_API pycoll_status_t pycoll_compensated_load(void *sum, void *comp, const void *src, int64_t count,
                                                   pycoll_dtype_t dtype);

/* Round a pair to plain values once: dst = (dtype)(sum + comp), scaled by 1/divisor when divisor > 1 (avg). */
PYCOLL_API pycoll_status_t pycoll_compensated_store(void *dst, const void *sum, const void *comp, int64_t count,
                                                    pycoll_dtype_t dtype, int64_t divisor);

/* Name of the kernel variant in use: "avx512", "avx2" or "scalar". PYCOLL_SIMD=scalar|avx2|avx512 in the
 * environment (read once, at first use) forces a variant; one the CPU lacks falls back to the best it has. */
PYCOLL_API const char *pycoll_simd_name(void);

#ifdef __cplusplus
}
#endif
#endif
