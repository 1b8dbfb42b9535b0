/* The last step of PYCOLL_AVG: one division per element after the whole sum is formed. */
#include "kernels/complex_parts.h"
#include "kernels/half_float.h"
#include "kernels/unaligned.h"
#include "pycoll/kernels.h"

#define DEFINE_SCALE(tname, T, W)                                                                             \
    static void tname##_scale(void *buf, int64_t n, int64_t divisor)                                          \
    {                                                                                                         \
        T *p = buf;                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                                       \
            p[i] = (T)((W)p[i] / (W)divisor);                                                                 \
    }

/* Integers truncate toward zero, as C division does (and NCCL's avg). */
DEFINE_SCALE(i8, int8_t, int64_t)
DEFINE_SCALE(u8, uint8_t, int64_t)
DEFINE_SCALE(i32, unaligned_i32, int64_t)
DEFINE_SCALE(i64, unaligned_i64, int64_t)
DEFINE_SCALE(f32, unaligned_f32, float)
DEFINE_SCALE(f64, unaligned_f64, double)

/* A float32 quotient of two float16 (or bfloat16) values rounds again to 16 bits with no double-rounding
 * error (float32 has more than 2p+2 bits), so this matches dividing in the 16-bit type directly. */
#define DEFINE_HALF_SCALE(tname, to_f32, from_f32)                                                            \
    static void tname##_scale(void *buf, int64_t n, int64_t divisor)                                          \
    {                                                                                                         \
        unaligned_u16 *p = buf;                                                                                    \
        float d = (float)divisor;                                                                             \
        for (int64_t i = 0; i < n; i++)                                                                       \
            p[i] = from_f32(to_f32(p[i]) / d);                                                                \
    }

DEFINE_HALF_SCALE(f16, pycoll_f16_to_f32, pycoll_f32_to_f16)
DEFINE_HALF_SCALE(bf16, pycoll_bf16_to_f32, pycoll_f32_to_bf16)

pycoll_status_t pycoll_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor)
{
    static void (*const scale[PYCOLL_NUM_DTYPES])(void *, int64_t, int64_t) = {
        i8_scale, u8_scale, i32_scale, i64_scale, f16_scale, bf16_scale, f32_scale, f64_scale};
    if (count < 0 || divisor < 1 || (unsigned)dtype >= PYCOLL_NUM_DTYPES || (count > 0 && buf == NULL))
        return PYCOLL_ERR_INVALID;
    complex_as_parts(&count, &dtype); /* both parts divided */
    if (divisor > 1)
        scale[dtype](buf, count, divisor);
    return PYCOLL_OK;
}
