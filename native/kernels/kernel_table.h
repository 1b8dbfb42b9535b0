/* Internal: the table of reduction kernels one SIMD variant provides. dispatch.c fills it once from the scalar
 * baseline, then lets the chosen variant override the entries it accelerates. */
#ifndef PYCOLL_KERNEL_TABLE_H
#define PYCOLL_KERNEL_TABLE_H

#include "pycoll/types.h"

/* out[i] = op(a[i], b[i]); out may be exactly a or b (never a partial overlap). */
typedef void (*pycoll_binary_kernel)(void *out, const void *a, const void *b, int64_t n);

/* (dst_sum, dst_comp) = TwoSum-combine of the pairs, element-wise, in one accumulator type. */
typedef void (*pycoll_combine_kernel)(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                      int64_t n);

/* accuracy="reproducible"'s exact-mode loops (kernels/reproducible.h, reproducible_loops.h) for one float dtype:
 * the summary, and encode / decode with one and with two limbs of `bits` bits, limb k worth 2^(base + bits k). */
typedef void (*pycoll_repro_summary_kernel)(const void *x, int64_t n, int32_t *summary);
typedef void (*pycoll_repro_encode_kernel)(const void *x, int64_t n, int32_t base, int32_t bits, int64_t *limbs);
typedef void (*pycoll_repro_decode_kernel)(const int64_t *limbs, int64_t n, int32_t base, int32_t bits, void *out);
typedef void (*pycoll_repro_sum_kernel)(const void *const *x, int32_t n_x, int64_t n, double *acc, void *out);
/* float64 split into two doubles at 2^grid, and pairs of sums added (reproducible.h's REPRO_NARROW_SPLIT). */
typedef struct pycoll_repro_split_kernels {
    void (*encode)(const double *x, int64_t n, int32_t grid, double *halves);
    void (*sum)(const void *const *halves, int32_t n_x, int64_t n, double *acc, double *out);
} pycoll_repro_split_kernels_t;
typedef struct pycoll_repro_kernels {
    pycoll_repro_summary_kernel summary;
    pycoll_repro_encode_kernel encode[2];
    pycoll_repro_decode_kernel decode[2];
    pycoll_repro_decode_kernel decode_narrow; /* one limb, every sum below 2^53 (reproducible.h's narrow plan) */
    pycoll_repro_sum_kernel sum_narrow;
} pycoll_repro_kernels_t;

typedef struct pycoll_kernel_table {
    const char *name;
    pycoll_binary_kernel binary[PYCOLL_NUM_DTYPES][PYCOLL_NUM_OPS];
    pycoll_combine_kernel combine_f32;
    pycoll_combine_kernel combine_f64;
    pycoll_repro_kernels_t repro[PYCOLL_NUM_DTYPES]; /* the float dtypes' */
    pycoll_repro_split_kernels_t repro_split;         /* float64's REPRO_NARROW_SPLIT plans */
} pycoll_kernel_table_t;

/* The table in use, chosen on first call (CPU features, PYCOLL_SIMD). */
const pycoll_kernel_table_t *pycoll_active_kernels(void);

void pycoll_scalar_kernels(pycoll_kernel_table_t *table);
void pycoll_scalar_repro_kernels(pycoll_kernel_table_t *table);
#ifdef PYCOLL_HAVE_X86
/* Override the entries each instruction set accelerates; the rest stay as they were. */
void pycoll_avx2_kernels(pycoll_kernel_table_t *table);
void pycoll_avx512_kernels(pycoll_kernel_table_t *table);
/* The same C loops compiled for each instruction set (the AVX-512 one also needs AVX-512DQ and CD:
 * int64 <-> double, leading zeros). */
void pycoll_avx2_repro_kernels(pycoll_kernel_table_t *table);
void pycoll_avx512_repro_kernels(pycoll_kernel_table_t *table);
#endif

#endif
