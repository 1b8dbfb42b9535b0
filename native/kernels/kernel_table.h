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

typedef struct pycoll_kernel_table {
    const char *name;
    pycoll_binary_kernel binary[PYCOLL_NUM_DTYPES][PYCOLL_NUM_OPS];
    pycoll_combine_kernel combine_f32;
    pycoll_combine_kernel combine_f64;
} pycoll_kernel_table_t;

/* The table in use, chosen on first call (CPU features, PYCOLL_SIMD). */
const pycoll_kernel_table_t *pycoll_active_kernels(void);

void pycoll_scalar_kernels(pycoll_kernel_table_t *table);
#ifdef PYCOLL_HAVE_X86
/* Override the entries each instruction set accelerates; the rest stay as they were. */
void pycoll_avx2_kernels(pycoll_kernel_table_t *table);
void pycoll_avx512_kernels(pycoll_kernel_table_t *table);
#endif

#endif
