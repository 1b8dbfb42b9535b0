/* Internal: the kernels of accuracy="reproducible" (native/comm/reproducible.c runs them), in two modes.
 *
 * Exact mode, where the data allows it: one small all_reduce max of each rank's summary (repro_summarize: the
 * largest and smallest binade of its finite nonzero elements, and whether any is not finite) bounds the bits
 * every element spans over every rank. Where that span fits in at most two limbs and no element is an infinity
 * or NaN, every element becomes the exact integer x / 2^base for one base shared by all elements, in
 * L = ceil(span / W) int64 limbs of W = 62 - ceil(log2(world size)) bits (the headroom the sum over the ranks
 * needs, and one bit for decoding), so that typical data travels in one limb (float32, float16) or two
 * (float64). No conversion rounds, so the result is the correctly rounded sum: the same bits as the general mode
 * below gives the same data, whatever the world size (which changes W and so L, never the value). The loops are
 * plain C that the compiler vectorises, one copy per instruction set through the kernel table
 * (reproducible_loops.h).
 *
 * General mode, for the rest (specials, or spans beyond the exact mode's limbs): a float element is
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

/* The summary of one rank's elements, combined over the ranks by an all_reduce max: [0] the largest biased
 * exponent (subnormals counted as 1) of a finite nonzero element, 0 where there is none; [1] minus the smallest;
 * [2] 1 where an element is an infinity or NaN. */
#define REPRO_SUMMARY_LEN 3
void repro_summarize(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary);

/* How the exact mode carries the elements: `limbs` limbs (0: the general mode instead) of `bits` bits, limb k
 * worth 2^(base + bits * k).
 * Narrow plans raise base as far as the span allows, to 2^(base + narrow_bits * limbs) above the largest element
 * with narrow_bits = 53 - ceil(log2(world size)), so that sums of the ranks' limbs stay below 2^53 -- a double
 * holds every partial sum exactly, so double additions are exact in any order:
 *   REPRO_NARROW_ONE (one limb): the elements themselves, widened to double, sum exactly, and the limb sums
 *     decode without the round-to-odd step a wider sum needs;
 *   REPRO_NARROW_SPLIT (float64, two limbs, base in the normal range): each element splits exactly into two
 *     doubles, its part at or above 2^(base + narrow_bits) and the rest; each part sums exactly, and one double
 *     addition of the two sums rounds the result once.
 * The same results as the limbs, in fewer instructions. */
enum { REPRO_WIDE, REPRO_NARROW_ONE, REPRO_NARROW_SPLIT };
typedef struct repro_plan {
    int32_t limbs, bits, base, narrow, narrow_bits;
} repro_plan_t;
/* The plan of the combined summary, the same on every rank. */
repro_plan_t repro_plan(const int32_t *summary, pycoll_dtype_t dtype, int32_t world_size);
/* limbs[i * L + k] = limb k of x[i] / 2^base (exact). */
void repro_encode_exact(const void *x, int64_t n, pycoll_dtype_t dtype, const repro_plan_t *plan, int64_t *limbs);
/* out[i] = the limb sums limbs[i * L ..] rounded once to nearest-even in dtype (+0.0 for zero). */
void repro_decode_exact(const int64_t *limbs, int64_t n, pycoll_dtype_t dtype, const repro_plan_t *plan,
                        void *out);
/* A REPRO_NARROW_ONE plan: out[i] = the exact sum of x[0][i] .. x[n_x - 1][i] (n_x >= 1 arrays of elements)
 * rounded once, as decoding the sum of their limbs gives; acc: n doubles of scratch. */
void repro_sum_narrow(const void *const *x, int32_t n_x, int64_t n, pycoll_dtype_t dtype, double *acc, void *out);
/* A REPRO_NARROW_SPLIT plan (float64): halves[2 i], halves[2 i + 1] = x[i]'s two parts; out[i] = the exact sum
 * of the n_x arrays of halves rounded once; acc: 2 n doubles of scratch. */
void repro_split_encode(const double *x, int64_t n, const repro_plan_t *plan, double *halves);
void repro_split_sum(const void *const *halves, int32_t n_x, int64_t n, double *acc, double *out);
/* Limbs per element of a float dtype (float16 1 -- every float16 sum is exact --, bfloat16 and float32 2,
 * float64 3) in the general mode; 0 for a dtype reproducible mode does not take. */
int repro_limbs(pycoll_dtype_t dtype);

/* code[i] = this rank's code of x[i]. */
void repro_exponents(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *code);
/* limbs[i * L + k] = limb k (least significant first) of x[i], scaled by the global code[i]. */
void repro_encode(const void *x, const int32_t *code, int64_t n, pycoll_dtype_t dtype, int64_t *limbs);
/* out[i] = the sum the limb sums limbs[i * L ..] stand for, rounded once to nearest-even in dtype; 0 gives +0.0,
 * a NaN code or both infinities NaN, an overflow the signed infinity. */
void repro_decode(const int64_t *limbs, const int32_t *code, int64_t n, pycoll_dtype_t dtype, void *out);

#endif
