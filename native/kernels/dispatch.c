/* Run-time choice of the kernel variant, once per process, and the public element-wise entry points.
 * As in NumPy: the best variant the CPU supports, unless PYCOLL_SIMD=scalar|avx2|avx512 forces one. */
#include "common/settings.h"
#include "kernels/complex_parts.h"
#include "kernels/kernel_table.h"
#include "pycoll/kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum simd_level { SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512 };

static pycoll_kernel_table_t active_table;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static enum simd_level cpu_simd_level(void)
{
#ifdef PYCOLL_HAVE_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return SIMD_AVX512;
    if (avx2)
        return SIMD_AVX2;
#endif
    return SIMD_SCALAR;
}

/* A forced variant the CPU lacks falls back to the best it has. An unknown name is refused by init
 * (pycoll_settings_check); kernels used with no communicator take it as the best. */
static enum simd_level requested_simd_level(enum simd_level best)
{
    const char *forced = setting_text(SETTING_SIMD);
    if (forced == NULL)
        return best;
    if (strcmp(forced, "scalar") == 0)
        return SIMD_SCALAR;
    if (strcmp(forced, "avx2") == 0 && best >= SIMD_AVX2)
        return SIMD_AVX2;
    return best;
}

static void choose_active_table(void)
{
    enum simd_level level = requested_simd_level(cpu_simd_level());
    pycoll_scalar_kernels(&active_table);
    pycoll_scalar_repro_kernels(&active_table);
#ifdef PYCOLL_HAVE_X86
    /* AVX-512 builds on the AVX2 table: entries it does not widen keep their AVX2 kernels. */
    if (level >= SIMD_AVX2) {
        pycoll_avx2_kernels(&active_table);
        pycoll_avx2_repro_kernels(&active_table);
    }
    if (level >= SIMD_AVX512) {
        pycoll_avx512_kernels(&active_table);
        if (__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
            pycoll_avx512_repro_kernels(&active_table);
    }
#else
    (void)level;
#endif
}

const pycoll_kernel_table_t *pycoll_active_kernels(void)
{
    pthread_once(&active_once, choose_active_table);
    return &active_table;
}

const char *pycoll_simd_name(void)
{
    return pycoll_active_kernels()->name;
}

static pycoll_status_t check_args(const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                                  pycoll_op_t op)
{
    if (count < 0 || (unsigned)dtype >= PYCOLL_NUM_DTYPES || (unsigned)op >= PYCOLL_NUM_OPS)
        return PYCOLL_ERR_INVALID;
    if (count > 0 && (a == NULL || b == NULL))
        return PYCOLL_ERR_INVALID;
    return PYCOLL_OK;
}

pycoll_status_t pycoll_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                   pycoll_op_t op)
{
    return pycoll_reduce(dst, dst, src, count, dtype, op);
}

pycoll_status_t pycoll_reduce(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                              pycoll_op_t op)
{
    pycoll_status_t status = check_args(a, b, count, dtype, op);
    if (status != PYCOLL_OK)
        return status;
    if (count > 0 && out == NULL)
        return PYCOLL_ERR_INVALID;
    if (op == PYCOLL_SUM || op == PYCOLL_AVG) /* part by part: the real type's (vector) kernels */
        complex_as_parts(&count, &dtype);
    pycoll_binary_kernel kernel = pycoll_active_kernels()->binary[dtype][op];
    if (kernel == NULL)
        return PYCOLL_ERR_UNSUPPORTED;
    if (count > 0)
        kernel(out, a, b, count);
    return PYCOLL_OK;
}
