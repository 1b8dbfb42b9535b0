/* Internal: the kernels of accuracy="reproducible" (native/comm/reproducible.c runs them). A float element is
 * carried as L int64 limbs: an exact fixed-point number whose scale is set by that element's global exponent
 * (the binade of max |x| over every rank, agreed beforehand by an all_reduce max of the codes below). Each limb
 * holds REPRO_LIMB_BITS bits, leaving 16 bits of headroom, so the integer sum of up to 65536 ranks' limbs never
 * overflows, and integer addition is associative: every algorithm, rank order and world size adds up the same
 * integers. The receiver carries the limbs into one exact integer and rounds it once to the dtype.
 *
 * Error: a conversion is exact unless the element has bits below 2^(E + 1 - 46 L) (E: the element's global
 * exponent); then it is rounded to nearest-even at that bit, an error of at most 2^(E - 46 L) <= 2^-46L max|x|
 * per rank, whatever the world size. The result is the correctly rounded sum where no conversion rounded. */
#ifndef PYCOLL_KERNELS_REPRODUCIBLE_H
#define PYCOLL_KERNELS_REPRODUCIBLE_H

#include "pycoll/types.h"

#define REPRO_LIMB_BITS 46
/* Codes of the exponent pass, ordered so that max gives the element's answer: every contribution zero (or the
 * element empty), a finite binade, an infinity somewhere, a NaN somewhere. */
#define REPRO_CODE_ZERO (-100000)
#define REPRO_CODE_INF 100000
#define REPRO_CODE_NAN 100001
/* An infinity is counted in limb 0 (+inf in the low field, -inf above it), so that both signs meeting give NaN
 * whatever the order they meet in. Each count is at most the rank limit, 65536 < 2^24. */
#define REPRO_NEG_INF_SHIFT 24

/* Limbs per element of a float dtype (float16 1 -- every float16 sum is exact --, bfloat16 and float32 2,
 * float64 3); 0 for a dtype reproducible mode does not take. */
int repro_limbs(pycoll_dtype_t dtype);

/* code[i] = this rank's code of x[i]. */
void repro_exponents(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *code);
/* limbs[i * L + k] = limb k (least significant first) of x[i], scaled by the global code[i]. */
void repro_encode(const void *x, const int32_t *code, int64_t n, pycoll_dtype_t dtype, int64_t *limbs);
/* out[i] = the sum the limb sums limbs[i * L ..] stand for, rounded once to nearest-even in dtype; 0 gives +0.0,
 * a NaN code or both infinities NaN, an overflow the signed infinity. */
void repro_decode(const int64_t *limbs, const int32_t *code, int64_t n, pycoll_dtype_t dtype, void *out);

#endif
