/* The CUDA memory table (kernels/memory_kernels.h): the elementwise kernels as CUDA C compiled at run time with
 * NVRTC to a CUBIN for the buffer's device, launched through the CUDA driver API on the collective's stream in
 * that device's primary context; copies with cuMemcpyAsync, scratch stream-ordered (cuMemAllocAsync /
 * cuMemFreeAsync on the collective's stream; cuMemAlloc / cuMemFree where the driver is older). libnvrtc and
 * libcuda are dlopen'ed like NCCL (the candidates come from Python: pycoll/plugins/nccl.py), so pycoll builds and
 * imports without CUDA.
 *
 * NOT RUN ON A GPU: this environment has none. The compile path runs in the tests against the real NVRTC for
 * every architecture pycoll targets; the context handling against a fake driver; see backends/README.md.
 *
 * The kernels mirror native/kernels (reduce_scalar.c, scale_avg.c, compensated.c, half_float.h, two_sum.h)
 * operation for operation, so that a device's result has the host's bits: a second implementation, in the
 * device's language, of the same arithmetic. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/memory_kernels.h"
#include "common/error_format.h"
#include "../common/vendor_common.h"
#include "cuda_api.h"

/* ---- the source ---- */

/* Everything but the types: T is the plain type (uint16 bits for float16/bfloat16), A the accumulator,
 * KIND 0 integer, 1 float/double, 2 float16, 3 bfloat16; U the unsigned type integers wrap in; W the type
 * scale_avg divides in. Compiled with --fmad=false: a fused multiply-add in TwoSum's (a - (s - bb)) chain or in
 * Dekker's product would compute the error term with one rounding fewer and lose it (the host build passes
 * -ffp-contract=off for the same reason). */
static const char kernel_template[] =
    "typedef unsigned short u16; typedef unsigned int u32; typedef long long i64;\n"
    "__device__ static inline float f16_to_f32(u16 h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));"
    " return f; }\n"
    /* the host's f32_to_f16 (half_float.h): NaN kept quiet with the top of its payload, else round to nearest
     * even (cvt.rn.f16.f32 rounds the same, but its NaN is canonical) */
    "__device__ static inline u32 round_shift(u32 v, unsigned s) { u32 q = v >> s, r = v & ((1u << s) - 1u),"
    " h = 1u << (s - 1); return q + (r > h || (r == h && (q & 1u))); }\n"
    "__device__ static inline u16 f32_to_f16(float f) { u32 x = __float_as_uint(f); u16 sign = (u16)((x >> 16) &"
    " 0x8000u); u32 mag = x & 0x7fffffffu;\n"
    "  if (mag > 0x7f800000u) return (u16)(sign | 0x7e00u | (mag & 0x7fffffu) >> 13);\n"
    "  if (mag >= 0x477ff000u) return (u16)(sign | 0x7c00u);\n"
    "  if (mag >= 0x38800000u) return (u16)(sign | round_shift(mag - 0x38000000u, 13));\n"
    "  if (mag <= 0x33000000u) return sign;\n"
    "  u16 h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n" /* subnormal: exact RNE */
    "__device__ static inline float bf16_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }\n"
    "__device__ static inline u16 f32_to_bf16(float f) { u32 x = __float_as_uint(f);\n"
    "  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);\n"
    "  return (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }\n"
    "#if KIND == 2\n"
    "#define LOAD(x) f16_to_f32(x)\n#define STORE(x) f32_to_f16(x)\n#define MIN_TAKES_A(a, b) ((a) <= (b))\n"
    "#define MAX_TAKES_A(a, b) ((a) >= (b))\n"
    "#elif KIND == 3\n"
    "#define LOAD(x) bf16_to_f32(x)\n#define STORE(x) f32_to_bf16(x)\n#define MIN_TAKES_A(a, b) ((a) < (b))\n"
    "#define MAX_TAKES_A(a, b) ((a) > (b))\n"
    "#else\n"
    "#define LOAD(x) (x)\n#define STORE(x) (x)\n#define MIN_TAKES_A(a, b) ((a) < (b))\n"
    "#define MAX_TAKES_A(a, b) ((a) > (b))\n"
    "#endif\n"
    "#define FOR_EACH(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); "
    "i += (i64)gridDim.x * blockDim.x)\n"
    /* op: pycoll_op_t (0 sum, 1 prod, 2 min, 3 max, 4 avg: summed, divided once at the end) */
    "extern \"C\" __global__ void pycoll_reduce(T *out, const T *a, const T *b, i64 n, int op) {\n"
    "  FOR_EACH(i, n) {\n"
    "#if KIND == 0\n"
    "    T x = a[i], y = b[i];\n"
    "    out[i] = op == 1 ? (T)(U)((U)x * (U)y) : op == 2 ? (x < y ? x : y) : op == 3 ? (x > y ? x : y)"
    " : (T)(U)((U)x + (U)y);\n"
    "#else\n"
    "    T xa = a[i], yb = b[i];\n"
    "    auto x = LOAD(xa); auto y = LOAD(yb);\n"
    "    out[i] = op == 1 ? (T)STORE(x * y) : op == 2 ? ((x != x || MIN_TAKES_A(x, y)) ? xa : yb)"
    " : op == 3 ? ((x != x || MAX_TAKES_A(x, y)) ? xa : yb) : (T)STORE(x + y);\n"
    "#endif\n"
    "  }\n}\n"
    "extern \"C\" __global__ void pycoll_scale_avg(T *buf, i64 n, i64 divisor) {\n"
    "  FOR_EACH(i, n) {\n"
    "#if KIND == 0 || KIND == 1\n"
    "    buf[i] = (T)((W)buf[i] / (W)divisor);\n"
    "#else\n"
    "    buf[i] = STORE(LOAD(buf[i]) / (float)divisor);\n"
    "#endif\n"
    "  }\n}\n"
    "#if KIND != 0\n"
    /* Knuth's TwoSum and the pair arithmetic of compensated.c */
    "__device__ static inline A two_sum(A a, A b, A *err) { A s = a + b; A bb = s - a;"
    " *err = (a - (s - bb)) + (b - bb); return s; }\n"
    "__device__ static inline double two_sum_d(double a, double b, double *err) { double s = a + b;"
    " double bb = s - a; *err = (a - (s - bb)) + (b - bb); return s; }\n"
    "__device__ static inline double two_product(double a, double b, double *err) {"
    " const double split = 134217729.0; double p = a * b;\n"
    "  double ta = split * a, ah = ta - (ta - a), al = a - ah; double tb = split * b, bh = tb - (tb - b),"
    " bl = b - bh;\n"
    "  *err = ((ah * bh - p) + ah * bl + al * bh) + al * bl; return p; }\n"
    /* two_sum.h's special values: the error of a sum that is not finite is 0; a zero compensation is -0 */
    "__device__ static inline A finite_or_zero(A s, A e) { return s - s == (A)0 ? e : (A)0; }\n"
    "__device__ static inline A signed_zero(A c) { return (A)-0.0 - ((A)0 - c); }\n"
    "__device__ static inline double signed_zero_d(double c) { return -0.0 - (0.0 - c); }\n"
    /* past 1e299 the pair is divided scaled down by 2^64, as the host's divide_huge_pair_f64 */
    "__device__ static inline double divide_pair(double s, double c, double d, double *tail) {"
    " double q = s / d; *tail = 0.0;\n"
    "  if (q - q != 0.0) return q;\n"
    "  double scale = fabs(s) > 1e299 ? 18446744073709551616.0 : 1.0; s /= scale; c /= scale; q = s / d;\n"
    "  double pe; double p = two_product(q, d, &pe);\n"
    "  double r = ((s - p) - pe) + c; double q2 = signed_zero_d(r / d); double out = two_sum_d(q, q2, tail);"
    " *tail *= scale; return out * scale; }\n"
    "__device__ static inline float round_to_odd(double x, double tail) { float f = (float)x;"
    " if (x - x != 0.0) return f;\n"
    "  double below = (double)f != x ? x - (double)f : tail; u32 bits = __float_as_uint(f);\n"
    "  if (below != 0.0 && !(bits & 1u)) { if (f == 0.0f) bits = (below < 0.0 ? 0x80000000u : 0u) | 1u;"
    " else bits = (below > 0.0) == (f > 0.0f) ? bits + 1u : bits - 1u; }\n"
    "  return __uint_as_float(bits); }\n"
    "extern \"C\" __global__ void pycoll_compensated_load(A *sum, A *comp, const T *src, i64 n) {\n"
    "  FOR_EACH(i, n) { sum[i] = (A)LOAD(src[i]); comp[i] = 0; }\n}\n"
    "extern \"C\" __global__ void pycoll_compensated_combine(A *ds, A *dc, const A *ss, const A *sc, i64 n) {\n"
    "  FOR_EACH(i, n) { A e, e2; A s = two_sum(ds[i], ss[i], &e);"
    " A c = signed_zero((dc[i] + sc[i]) + finite_or_zero(s, e));\n"
    "    A s2 = two_sum(s, c, &e2); ds[i] = s2; dc[i] = finite_or_zero(s2, e2); }\n}\n"
    "extern \"C\" __global__ void pycoll_compensated_store(T *dst, const A *sum, const A *comp, i64 n,"
    " i64 divisor) {\n"
    "  double d = (double)divisor;\n"
    "  FOR_EACH(i, n) { double tail;\n"
    "#if IS_F64\n"
    "    dst[i] = divisor > 1 ? divide_pair(sum[i], comp[i], d, &tail) : sum[i] + signed_zero(comp[i]);\n"
    "#else\n"
    "    double x = divisor > 1 ? divide_pair(sum[i], comp[i], d, &tail)"
    " : two_sum_d(sum[i], signed_zero_d(comp[i]), &tail);\n"
    "#if KIND == 1\n"
    "    dst[i] = divisor > 1 ? (float)x : sum[i] + signed_zero(comp[i]);\n"
    "#else\n"
    "    dst[i] = STORE(round_to_odd(x, tail));\n"
    "#endif\n"
    "#endif\n"
    "  }\n}\n"
    "#endif\n";

/* accuracy="reproducible"'s exact mode (native/kernels/reproducible.h): the summary, encode and decode of
 * native/kernels/reproducible_loops.h, operation for operation on the elements' bits (integer shifts and masks,
 * int64 <-> double conversions, round to odd), so that a device's limbs and results have the host's bits; the
 * limbs combine with the int64 program's pycoll_reduce (op sum). The table's reproducible entries launch them
 * (k_repro_*, for native/comm/reproducible_device.c). The general mode (an infinity or NaN, or a span beyond two
 * limbs) has no device kernels. summary starts as {0, -(2^exponent bits - 1), 0}. */
static const char repro_template[] =
    "#if KIND != 0\n"
    "typedef unsigned long long u64;\n"
    "#if IS_F64\n#define R_FRAC 52\n#define R_EXP 11\ntypedef u64 RB;\n"
    "#elif KIND == 1\n#define R_FRAC 23\n#define R_EXP 8\ntypedef u32 RB;\n"
    "#elif KIND == 2\n#define R_FRAC 10\n#define R_EXP 5\ntypedef u16 RB;\n"
    "#else\n#define R_FRAC 7\n#define R_EXP 8\ntypedef u16 RB;\n#endif\n"
    "#define R_EMASK ((1u << R_EXP) - 1u)\n#define R_BIAS ((1 << (R_EXP - 1)) - 1)\n"
    "__device__ static inline double r_f64(u64 b) { return __longlong_as_double((i64)b); }\n"
    "__device__ static inline u64 r_bits(double d) { return (u64)__double_as_longlong(d); }\n"
    "__device__ static inline double r_pow2(i64 e) { return r_f64((u64)(e + 1023) << 52); }\n"
    "__device__ static inline double r_pow2_any(i64 e) { return r_f64(e >= -1022 ? (u64)(e + 1023) << 52"
    " : 1ull << ((e + 1074) & 63)); }\n"
    /* round to odd at 53 bits, then at 24 (see round_to_odd_f64 / round_to_odd_f32) */
    "__device__ static inline double r_odd_f64(i64 s) { double d = (double)s; i64 below = s - (i64)d;\n"
    "  u64 inexact = below != 0, away = inexact & (u64)((below ^ s) < 0);"
    " return r_f64((r_bits(d) - away) | inexact); }\n"
    "__device__ static inline float r_odd_f32(double d) { float f = (float)d; u32 inexact = (double)f != d;\n"
    "  u32 away = inexact & (u32)(fabs((double)f) > fabs(d));"
    " return __uint_as_float((__float_as_uint(f) - away) | inexact); }\n"
    /* two_limb_window */
    "__device__ static inline u64 r_window(i64 s0, i64 s1, int bits, u64 *neg, i64 *exp) {\n"
    "  u64 mask = (1ull << bits) - 1, low_signed = (u64)s0 & mask; i64 high_signed = s1 + (s0 >> bits);\n"
    "  u64 sign = (u64)(high_signed >> 63);\n"
    "  u64 high = (((u64)high_signed ^ sign) - sign) - (sign & (u64)(low_signed != 0));\n"
    "  u64 low = ((low_signed ^ sign) - sign) & mask; i64 lz = __clzll((i64)(high | 1));\n"
    "  u64 below = lz >= bits ? low << ((lz - bits) & 63) : low >> ((bits - lz) & 63);\n"
    "  u64 dropped = lz >= bits ? 0 : low << ((lz - bits) & 63);\n"
    "  *neg = sign & 1; *exp = high ? bits - lz : 0;\n"
    "  return high ? (high << lz) | below | (u64)(dropped != 0) : low; }\n"
    /* round_window_f64 */
    "__device__ static inline double r_round_window(u64 window, i64 exp, u64 neg) {\n"
    "  if (!window) return 0.0;\n"
    "  i64 msb = 63 - __clzll((i64)window), keep = msb + exp - 52 > -1074 ? msb + exp - 52 : -1074;\n"
    "  i64 drop = keep - exp; u64 q;\n"
    "  if (drop <= 0) q = window << ((-drop) & 63);\n"
    "  else if (drop >= 64) q = drop == 64 && window > (1ull << 63);\n"
    "  else { u64 rem = window & ((1ull << drop) - 1), half = 1ull << (drop - 1); q = window >> drop;"
    " q += rem > half || (rem == half && (q & 1)); }\n"
    "  return r_f64(r_bits((double)q * r_pow2_any(keep)) | neg << 63); }\n"
    /* the maxima of a whole warp's three values, in lane 0 */
    "__device__ static inline void r_warp_max3(int *a, int *b, int *c) {\n"
    "  for (int o = 16; o > 0; o >>= 1) { int t = __shfl_down_sync(0xffffffffu, *a, o); *a = t > *a ? t : *a;\n"
    "    t = __shfl_down_sync(0xffffffffu, *b, o); *b = t > *b ? t : *b;\n"
    "    t = __shfl_down_sync(0xffffffffu, *c, o); *c = t > *c ? t : *c; } }\n"
    "extern \"C\" __global__ void pycoll_repro_summary(const RB *x, i64 n, int *summary) {\n"
    "  u32 top = 0, bottom = R_EMASK, widest = 0;\n"
    "  FOR_EACH(i, n) { RB b = x[i]; u32 biased = (u32)((b >> R_FRAC) & R_EMASK);\n"
    "    u32 eb = biased + (biased == 0);\n"
    "    bool counted = (RB)(b << 1) != 0 && biased != R_EMASK;\n"
    "    if (counted && eb > top) top = eb;\n"
    "    if (counted && eb < bottom) bottom = eb;\n"
    "    if (biased > widest) widest = biased; }\n"
    /* One atomic of each per block, not per thread: the warp's maxima by shuffles, then the block's through
     * shared memory (launched with whole warps: 256 threads, below). */
    "  int v0 = (int)top, v1 = -(int)bottom, v2 = (int)(widest == R_EMASK);\n"
    "  r_warp_max3(&v0, &v1, &v2);\n"
    "  __shared__ int warp_max[3][32]; int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
    "  if (lane == 0) { warp_max[0][warp] = v0; warp_max[1][warp] = v1; warp_max[2][warp] = v2; }\n"
    "  __syncthreads();\n"
    "  if (warp != 0) return;\n"
    "  bool held = lane < (int)((blockDim.x + 31) >> 5);\n"
    "  v0 = held ? warp_max[0][lane] : 0; v1 = held ? warp_max[1][lane] : -(int)R_EMASK;"
    " v2 = held ? warp_max[2][lane] : 0;\n"
    "  r_warp_max3(&v0, &v1, &v2);\n"
    "  if (lane == 0) { atomicMax(summary, v0); atomicMax(summary + 1, v1); atomicMax(summary + 2, v2); }\n"
    "}\n"
    "extern \"C\" __global__ void pycoll_repro_encode(const RB *x, i64 n, int base, int bits, int limbs, i64 *out) {\n"
    "  i64 shift = -(i64)base - R_BIAS - R_FRAC; u64 mask = (1ull << bits) - 1;\n"
    "  FOR_EACH(i, n) { u64 b = x[i], biased = (b >> R_FRAC) & R_EMASK;\n"
    "    i64 s = (i64)(biased | (u64)(biased == 0)) + shift;\n"
    "    u64 m = (b & ((1ull << R_FRAC) - 1)) | ((u64)(biased != 0) << R_FRAC);\n"
    "    u64 sign = 0ull - (b >> (R_FRAC + R_EXP));\n"
    "    if (limbs == 1) { out[i] = (i64)(((m << (s & 63)) ^ sign) - sign); continue; }\n"
    "    u64 lo = s < bits ? (m << (s & 63)) & mask : 0;\n"
    "    u64 hi = s >= bits ? m << ((s - bits) & 63) : m >> ((bits - s) & 63);\n"
    "    out[2 * i] = (i64)((lo ^ sign) - sign); out[2 * i + 1] = (i64)((hi ^ sign) - sign); }\n"
    "}\n"
    "extern \"C\" __global__ void pycoll_repro_decode(const i64 *limbs, i64 n, int base, int bits, int nlimbs,\n"
    "                                                 T *out) {\n"
    "  FOR_EACH(i, n) { double x;\n"
    "#if IS_F64\n"
    "    u64 neg, window; i64 exp = 0;\n"
    "    if (nlimbs == 1) { neg = (u64)limbs[i] >> 63; window = ((u64)limbs[i] ^ (0ull - neg)) + neg; }\n"
    "    else window = r_window(limbs[2 * i], limbs[2 * i + 1], bits, &neg, &exp);\n"
    "    if (base < -1022) x = r_round_window(window, base + exp, neg);\n"
    "    else if (nlimbs == 1) x = (double)limbs[i] * r_pow2(base);\n"
    "    else x = r_f64(r_bits((double)window * r_pow2(base + exp)) | neg << 63);\n"
    "    out[i] = x;\n"
    "#else\n"
    "    if (nlimbs == 1) x = r_odd_f64(limbs[i]) * r_pow2(base);\n"
    "    else { u64 neg; i64 exp; u64 w = r_window(limbs[2 * i], limbs[2 * i + 1], bits, &neg, &exp);\n"
    "      double odd = r_odd_f64((i64)((w >> 2) | (u64)((w & 3) != 0)));\n"
    "      x = r_f64(r_bits(odd * r_pow2(base + exp + 2)) | neg << 63); }\n"
    "#if KIND == 1\n"
    "    out[i] = (float)x;\n"
    "#else\n"
    "    out[i] = STORE(r_odd_f32(x));\n"
    "#endif\n"
    "#endif\n"
    "  }\n}\n"
    "#endif\n";

typedef struct dtype_types {
    const char *t, *a, *u, *w;
    int kind;
} dtype_types_t;

/* Per pycoll dtype: its plain type, accumulator, wrap type, scale type and kind (see kernel_template). */
static int types_of(pycoll_dtype_t dtype, dtype_types_t *out)
{
    switch (dtype) {
    case PYCOLL_INT8: *out = (dtype_types_t){"signed char", "signed char", "unsigned", "i64", 0}; return 0;
    case PYCOLL_UINT8: *out = (dtype_types_t){"unsigned char", "unsigned char", "unsigned", "i64", 0}; return 0;
    case PYCOLL_INT32: *out = (dtype_types_t){"int", "int", "unsigned", "i64", 0}; return 0;
    case PYCOLL_INT64: *out = (dtype_types_t){"long long", "long long", "unsigned long long", "i64", 0}; return 0;
    case PYCOLL_FLOAT16: *out = (dtype_types_t){"u16", "float", "unsigned", "float", 2}; return 0;
    case PYCOLL_BFLOAT16: *out = (dtype_types_t){"u16", "float", "unsigned", "float", 3}; return 0;
    case PYCOLL_FLOAT32: *out = (dtype_types_t){"float", "float", "unsigned", "float", 1}; return 0;
    case PYCOLL_FLOAT64: *out = (dtype_types_t){"double", "double", "unsigned", "double", 1}; return 0;
    default: return -1;
    }
}

int64_t pycoll_cuda_kernel_source(pycoll_dtype_t dtype, char *out, size_t len)
{
    dtype_types_t ty;
    if (types_of(dtype, &ty) != 0)
        return -1;
    /* The types go in as macros: the template's typedefs come first, so they may name u16 and i64. */
    int n = snprintf(out, len,
                     "/* pycoll's kernels for %s (backends/cuda/cuda_kernels.c) */\n"
                     "#define KIND %d\n#define IS_F64 %d\n"
                     "%.*s#define T %s\n#define A %s\n#define U %s\n#define W %s\n%s%s",
                     pycoll_dtype_name(dtype), ty.kind, dtype == PYCOLL_FLOAT64,
                     (int)(strstr(kernel_template, "__device__") - kernel_template), kernel_template, ty.t, ty.a,
                     ty.u, ty.w, strstr(kernel_template, "__device__"), repro_template);
    return n < 0 ? -1 : (int64_t)n;
}

/* ---- the libraries ---- */

#define DECLARE_FUNCTION(field, symbol, ret, params) ret(*field) params;
static struct {
    PYCOLL_NVRTC_FUNCTIONS(DECLARE_FUNCTION)
} nvrtc;
static struct {
    PYCOLL_CUDA_DRIVER_FUNCTIONS(DECLARE_FUNCTION)
    PYCOLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(DECLARE_FUNCTION) /* NULL where the driver lacks them */
} cu;
#undef DECLARE_FUNCTION

#define NVRTC_SYMBOL(field, symbol, ret, params) {PYCOLL_VENDOR_CALL_NONE, #symbol, VENDOR_SLOT(nvrtc.field)},
#define DRIVER_SYMBOL(field, symbol, ret, params) {PYCOLL_VENDOR_CALL_NONE, #symbol, VENDOR_SLOT(cu.field)},
static const pycoll_vendor_symbol_t nvrtc_symbols[] = {PYCOLL_NVRTC_FUNCTIONS(NVRTC_SYMBOL)};
static const pycoll_vendor_symbol_t driver_symbols[] = {PYCOLL_CUDA_DRIVER_FUNCTIONS(DRIVER_SYMBOL)};
#undef NVRTC_SYMBOL
#undef DRIVER_SYMBOL

static pycoll_vendor_library_t libraries[2] = {
    VENDOR_LIBRARY("NVRTC (libnvrtc)", "CUDA 11.2 or newer is needed", nvrtc_symbols),
    VENDOR_LIBRARY("the CUDA driver (libcuda)", "CUDA 11.2 or newer is needed", driver_symbols),
};

/* NVRTC dlopens its builtins (libnvrtc-builtins.so.X.Y) by name at the first compile, found through its own
 * RUNPATH ($ORIGIN). That lookup fails where dlopen is interposed (a sanitizer's runtime makes the call, and its
 * RUNPATH is searched instead), so the builtins beside the NVRTC loaded from a directory are loaded first: a later
 * dlopen by that name finds them loaded. Nothing where they are not there: NVRTC's own lookup stands. */
static void preload_nvrtc_builtins(const char *nvrtc_path)
{
    const char *slash = strrchr(nvrtc_path, '/');
    int major = 0, minor = 0;
    if (!slash || nvrtc.version(&major, &minor) != 0)
        return;
    char builtins[4096];
    int n = snprintf(builtins, sizeof builtins, "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - nvrtc_path),
                     nvrtc_path, major, minor);
    if (n > 0 && (size_t)n < sizeof builtins)
        (void)dlopen(builtins, RTLD_NOW | RTLD_GLOBAL); /* kept for the process's life, as NVRTC keeps it */
}

pycoll_status_t pycoll_cuda_kernels_load(int32_t library, const char *path, char *error, size_t error_len)
{
    if (library < 0 || library > 1)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "cuda kernels: library %d is not 0 or 1",
                                   (int)library);
    pycoll_status_t st = vendor_library_open(&libraries[library], path, error, error_len);
    if (st == PYCOLL_OK && library == 0)
        preload_nvrtc_builtins(path);
    if (st == PYCOLL_OK && library == 1 && !cu.mem_alloc_async) { /* the first driver loaded stays */
#define OPTIONAL_SYMBOL(field, symbol, ret, params)                                                                 \
    *VENDOR_SLOT(cu.field) = vendor_optional_symbol(&libraries[1], #symbol);
        PYCOLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(OPTIONAL_SYMBOL)
#undef OPTIONAL_SYMBOL
        if (!cu.mem_alloc_async || !cu.mem_free_async) /* both or neither: a block is freed the way it came */
            cu.mem_alloc_async = NULL, cu.mem_free_async = NULL;
    }
    return st;
}

/* ---- compiling ---- */

/* What to compile for a device of compute capability sm (10 * major + minor), given the architectures this NVRTC
 * compiles for (archs, ascending): a CUBIN for sm itself, else for the newest of its major below it (a CUBIN
 * runs on the later minors of its major). Only a device newer than every architecture NVRTC knows gets PTX, for
 * the newest of them, which its driver (as new as the device) JIT-compiles: PTX from an NVRTC newer than the
 * driver is refused (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), and that is the common case, so PTX is the last
 * resort. -1: the device is older than every architecture NVRTC has. */
static int select_target(int sm, const int *archs, int n, int *cubin)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (archs[i] <= sm && (best < 0 || archs[i] > best))
            best = archs[i];
    if (best < 0)
        return -1;
    *cubin = best / 10 == sm / 10;
    return best;
}

pycoll_status_t pycoll_cuda_kernels_compile(pycoll_dtype_t dtype, int32_t sm, int32_t flags, void **image,
                                            int64_t *size, char *target, size_t target_len, char *error,
                                            size_t error_len)
{
    *image = NULL;
    *size = 0;
    if (!libraries[0].handle)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "NVRTC is not loaded");
    if (flags & ~PYCOLL_CUDA_COMPILE_PTX)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "flags: unknown bits %#x",
                                   (unsigned)flags);
    char source[16384];
    int64_t length = pycoll_cuda_kernel_source(dtype, source, sizeof source);
    if (length < 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "dtype: no CUDA kernels for dtype id %d",
                                   (int)dtype);
    if (length >= (int64_t)sizeof source)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "the kernels' source (%lld bytes) outgrew "
                                   "its buffer", (long long)length);
    int major = 0, minor = 0, n = 0, archs[128];
    int r = nvrtc.version(&major, &minor);
    if (r == 0)
        r = nvrtc.num_archs(&n);
    if (r == 0 && (n < 1 || n > (int)(sizeof archs / sizeof archs[0])))
        r = -1;
    if (r == 0)
        r = nvrtc.archs(archs);
    if (r != 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM,
                                   "NVRTC could not list the architectures it compiles for (nvrtcResult %d)", r);
    int cubin = 0;
    int arch = select_target(sm, archs, n, &cubin);
    if (arch < 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED,
                                   "NVRTC %d.%d compiles for sm_%d and newer, not for this device's sm_%d", major,
                                   minor, archs[0], (int)sm);
    if (flags & PYCOLL_CUDA_COMPILE_PTX)
        cubin = 0;
    char arch_option[64];
    snprintf(target, target_len, "%s_%d", cubin ? "sm" : "compute", arch);
    snprintf(arch_option, sizeof arch_option, "--gpu-architecture=%s_%d", cubin ? "sm" : "compute", arch);
    /* --fmad=false: see kernel_template (TwoSum's error term). */
    const char *opts[] = {arch_option, "--fmad=false", "--std=c++14"};
    void *prog = NULL;
    r = nvrtc.create(&prog, source, "pycoll_kernels.cu", 0, NULL, NULL);
    if (r == 0)
        r = nvrtc.compile(prog, 3, opts);
    if (r != 0) {
        char log[PYCOLL_ERROR_LEN / 2] = "";
        size_t log_size = 0;
        if (prog && nvrtc.log_size(prog, &log_size) == 0 && log_size > 0 && log_size <= sizeof log)
            nvrtc.log(prog, log);
        else if (log_size > sizeof log) /* the start of a long log says what failed first */
            snprintf(log, sizeof log, "(a log of %zu bytes; rerun a single dtype to read it)", log_size);
        if (prog)
            nvrtc.destroy(&prog);
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM,
                                   "NVRTC %d.%d could not compile pycoll's kernels for %s (nvrtcResult %d: %s): %.*s",
                                   major, minor, target, r, nvrtc.error_string(r), PYCOLL_ERROR_LEN / 3, log);
    }
    size_t bytes = 0;
    char *out = NULL;
    r = cubin ? nvrtc.cubin_size(prog, &bytes) : nvrtc.ptx_size(prog, &bytes);
    if (r == 0 && !(out = malloc(bytes ? bytes : 1)))
        r = -1;
    if (r == 0)
        r = cubin ? nvrtc.cubin(prog, out) : nvrtc.ptx(prog, out);
    nvrtc.destroy(&prog);
    if (r != 0) {
        free(out);
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM,
                                   "NVRTC compiled pycoll's kernels for %s but could not hand over the %s "
                                   "(nvrtcResult %d)", target, cubin ? "CUBIN" : "PTX", r);
    }
    *image = out;
    *size = (int64_t)bytes;
    return PYCOLL_OK;
}

void pycoll_cuda_kernels_free(void *image)
{
    free(image);
}

/* ---- devices and contexts ---- */

/* Each device's primary context (the one the frameworks use), retained on first use and kept until exit, as the
 * frameworks keep theirs; the kernels of each (device, dtype), compiled on first use there. Every driver call
 * runs with the buffer's device's context pushed on the calling thread and popped after, so the thread needs no
 * current context of its own (NCCL's and pycoll's threads have none) and is left as it was. */
enum { MAX_DEVICES = 64 };

/* Every program has the first two; the float dtypes' also the rest (KIND != 0 in the source). */
enum { K_REDUCE, K_SCALE_AVG, K_LOAD, K_COMBINE, K_STORE, K_REPRO_SUMMARY, K_REPRO_ENCODE, K_REPRO_DECODE,
       NUM_KERNELS };
static const char *const kernel_names[NUM_KERNELS] = {
    "pycoll_reduce", "pycoll_scale_avg", "pycoll_compensated_load", "pycoll_compensated_combine",
    "pycoll_compensated_store", "pycoll_repro_summary", "pycoll_repro_encode", "pycoll_repro_decode"};

typedef struct dtype_module {
    void *module;
    void *fn[NUM_KERNELS];
} dtype_module_t;

static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
static void *primary_contexts[MAX_DEVICES];
static dtype_module_t modules[MAX_DEVICES][PYCOLL_NUM_DTYPES];
static int driver_init_result = -1;

/* The collective's stream, transport (for its deadline) and device: the table's entries have no context argument
 * (the host's are kernels.h's), so the vendor transport sets them for its thread before the schedules run
 * (cuda_kernels_bind). */
static _Thread_local void *bound_stream;
static _Thread_local const pycoll_p2p_t *bound_p2p;
static _Thread_local int bound_device = -1;

/* This thread's last failure, for the table's last_error: what failed and the library's word on it. */
static _Thread_local char cuda_error[PYCOLL_ERROR_LEN];

static int failed(int r, const char *fmt, const char *detail)
{
    snprintf(cuda_error, sizeof cuda_error, fmt, r, detail ? detail : "");
    return r ? r : -1;
}

static const char *k_last_error(void)
{
    return cuda_error;
}

static void init_driver(void)
{
    driver_init_result = cu.init(0);
}

/* The device of a pointer the driver knows (device or managed memory); -1 and why otherwise. */
static int pointer_ordinal(const void *ptr, char *why, size_t why_len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_driver);
    if (driver_init_result != 0) {
        snprintf(why, why_len, "the CUDA driver did not start (cuInit: CUresult %d; %d is "
                 "CUDA_ERROR_NO_DEVICE: no CUDA device)", driver_init_result, 100);
        return -1;
    }
    int ordinal = -1;
    int r = cu.pointer_attribute(&ordinal, PYCOLL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (uint64_t)(uintptr_t)ptr);
    if (r != 0 || ordinal < 0 || ordinal >= MAX_DEVICES) {
        snprintf(why, why_len, "the CUDA driver cannot say which device the buffer is on "
                 "(cuPointerGetAttribute(DEVICE_ORDINAL): CUresult %d, ordinal %d)", r, ordinal);
        return -1;
    }
    return ordinal;
}

pycoll_status_t pycoll_cuda_pointer_device(const void *ptr, int32_t *device, char *error, size_t error_len)
{
    if (!libraries[1].handle)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "the CUDA driver is not loaded");
    int ordinal = pointer_ordinal(ptr, error, error_len);
    if (ordinal < 0)
        return PYCOLL_ERR_INVALID;
    *device = ordinal;
    return PYCOLL_OK;
}

/* The device of a pointer the driver knows, its primary context retained; -1 and why otherwise. */
static int device_of(const void *ptr, char *why, size_t why_len)
{
    int ordinal = pointer_ordinal(ptr, why, why_len);
    if (ordinal < 0)
        return -1;
    int r = 0;
    pthread_mutex_lock(&module_lock);
    if (!primary_contexts[ordinal]) {
        int device = 0;
        r = cu.device_get(&device, ordinal);
        if (r == 0)
            r = cu.primary_retain(&primary_contexts[ordinal], device);
        if (r != 0)
            primary_contexts[ordinal] = NULL;
    }
    pthread_mutex_unlock(&module_lock);
    if (r != 0) {
        snprintf(why, why_len, "the primary context of CUDA device %d could not be retained "
                 "(cuDevicePrimaryCtxRetain: CUresult %d)", ordinal, r);
        return -1;
    }
    return ordinal;
}

/* Push the bound device's context on this thread (0), or fail (cuda_error says why); leave() pops it. */
static int enter(void)
{
    if (bound_device < 0)
        return failed(0, "no CUDA device is bound to this thread (result %d)%s", NULL);
    int r = cu.ctx_push(primary_contexts[bound_device]);
    return r == 0 ? 0 : failed(r, "cuCtxPushCurrent failed (CUresult %d)%s", NULL);
}

static void leave(void)
{
    void *popped = NULL;
    cu.ctx_pop(&popped);
}

/* Compile dtype's kernels for `device` and load them into its context (current); 0, else a CUDA/NVRTC result
 * (cuda_error says what failed). */
static int load_module(int device, pycoll_dtype_t dtype, dtype_module_t *out)
{
    int handle = 0, major = 0, minor = 0;
    int r = cu.device_get(&handle, device);
    if (r == 0)
        r = cu.device_attribute(&major, PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MAJOR, handle);
    if (r == 0)
        r = cu.device_attribute(&minor, PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MINOR, handle);
    if (r != 0)
        return failed(r, "the CUDA driver could not say the device's architecture (CUresult %d)%s", NULL);
    void *image = NULL;
    int64_t size = 0;
    char target[32], error[PYCOLL_ERROR_LEN - 64];
    if (pycoll_cuda_kernels_compile(dtype, 10 * major + minor, 0, &image, &size, target, sizeof target, error,
                                    sizeof error) != PYCOLL_OK) {
        snprintf(cuda_error, sizeof cuda_error, "%s", error);
        return -1;
    }
    dtype_module_t m = {0};
    r = cu.module_load_data(&m.module, image);
    pycoll_cuda_kernels_free(image);
    for (int k = 0; r == 0 && k < NUM_KERNELS; k++)
        if (k <= K_SCALE_AVG || dtype >= PYCOLL_FLOAT16) /* integers have no compensated or reproducible kernels */
            r = cu.module_get_function(&m.fn[k], m.module, kernel_names[k]);
    if (r != 0)
        return failed(r, "loading the compiled kernels failed (CUresult %d)%s", NULL);
    *out = m;
    return 0;
}

/* The function `kernel` of dtype's module on the bound device (its context pushed), compiled on first use. */
static void *kernel_for(pycoll_dtype_t dtype, int kernel)
{
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return NULL;
    void *fn = NULL;
    pthread_mutex_lock(&module_lock);
    dtype_module_t *m = &modules[bound_device][dtype];
    if (!m->module) {
        dtype_module_t fresh;
        if (load_module(bound_device, dtype, &fresh) == 0)
            *m = fresh;
    }
    if (m->module) {
        fn = m->fn[kernel];
        if (!fn)
            failed((int)dtype, "dtype id %d has no %s kernel (float dtypes only)", kernel_names[kernel]);
    }
    pthread_mutex_unlock(&module_lock);
    return fn;
}

/* ---- the table ---- */

/* Launch on the bound stream: 256 threads a block, a grid-stride loop over at most 65535 blocks. */
static pycoll_status_t launch(pycoll_dtype_t dtype, int kernel, int64_t n, void **params)
{
    if (n <= 0)
        return PYCOLL_OK;
    if (enter() != 0)
        return PYCOLL_ERR_SYSTEM;
    void *fn = kernel_for(dtype, kernel);
    int64_t blocks = (n + 255) / 256;
    int r = fn ? cu.launch(fn, (unsigned)(blocks < 65535 ? blocks : 65535), 1, 1, 256, 1, 1, 0, bound_stream,
                           params, NULL)
               : -1;
    leave();
    if (!fn)
        return PYCOLL_ERR_SYSTEM;
    return r == 0 ? PYCOLL_OK : (failed(r, "cuLaunchKernel failed (CUresult %d)%s", NULL), PYCOLL_ERR_SYSTEM);
}

static pycoll_status_t k_reduce(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                                pycoll_op_t op)
{
    int o = (int)op;
    void *params[] = {&out, (void *)&a, (void *)&b, &count, &o};
    return launch(dtype, K_REDUCE, count, params);
}

static pycoll_status_t k_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                     pycoll_op_t op)
{
    return k_reduce(dst, dst, src, count, dtype, op);
}

static pycoll_status_t k_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor)
{
    void *params[] = {&buf, &count, &divisor};
    return divisor > 1 ? launch(dtype, K_SCALE_AVG, count, params) : PYCOLL_OK;
}

static pycoll_status_t k_load(void *sum, void *comp, const void *src, int64_t count, pycoll_dtype_t dtype)
{
    void *params[] = {&sum, &comp, (void *)&src, &count};
    return launch(dtype, K_LOAD, count, params);
}

static pycoll_status_t k_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                 int64_t count, pycoll_dtype_t dtype)
{
    void *params[] = {&dst_sum, &dst_comp, (void *)&src_sum, (void *)&src_comp, &count};
    return launch(dtype, K_COMBINE, count, params);
}

static pycoll_status_t k_store(void *dst, const void *sum, const void *comp, int64_t count, pycoll_dtype_t dtype,
                               int64_t divisor)
{
    void *params[] = {&dst, (void *)&sum, (void *)&comp, &count, &divisor};
    return launch(dtype, K_STORE, count, params);
}

/* On the bound stream, so it is ordered with the kernels and the vendor's sends and receives. Overlapping
 * ranges (all_gather's own block, when the caller passes overlapping buffers) are undefined for cuMemcpyAsync. */
static pycoll_status_t k_copy(void *dst, const void *src, int64_t nbytes)
{
    if (enter() != 0)
        return PYCOLL_ERR_SYSTEM;
    int r = cu.memcpy_async((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, (size_t)nbytes, bound_stream);
    leave();
    return r == 0 ? PYCOLL_OK : (failed(r, "cuMemcpyAsync failed (CUresult %d)%s", NULL), PYCOLL_ERR_SYSTEM);
}

/* Waits (the bound device's context current) for the work queued on the bound stream, polling until the
 * collective's deadline: 0 once it is done, CUDA_ERROR_NOT_READY past the deadline, or the driver's error. */
static int wait_stream(void)
{
    const int64_t deadline = bound_p2p ? bound_p2p->deadline_ns : pycoll_now_ns();
    int r;
    while ((r = cu.stream_query(bound_stream)) == PYCOLL_CU_ERROR_NOT_READY && pycoll_now_ns() < deadline)
        nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
    return r;
}

/* Stream-ordered where the driver can (from the pool of the stream's device, usable by the work queued after it
 * on the bound stream), else cuMemAlloc. The table's scratch lives one collective (scratch_per_call): it is
 * freed on the stream it was allocated on, and never held between calls beside the framework's allocator. */
static void *k_alloc(int64_t nbytes)
{
    if (enter() != 0)
        return NULL;
    uint64_t p = 0;
    const size_t n = (size_t)(nbytes > 0 ? nbytes : 1);
    int r = cu.mem_alloc_async ? cu.mem_alloc_async(&p, n, bound_stream) : cu.mem_alloc(&p, n);
    leave();
    if (r != 0)
        failed(r, cu.mem_alloc_async ? "cuMemAllocAsync failed (CUresult %d)%s" : "cuMemAlloc failed (CUresult %d)%s",
               NULL);
    return r == 0 ? (void *)(uintptr_t)p : NULL;
}

/* Stream-ordered: the block goes back to the pool once the work queued before it on the stream is done, with no
 * host wait. Else work queued on the stream may still use the block: wait for the stream first (cuMemFree does
 * not order with it), polling until the collective's deadline; past it the block is leaked rather than freed
 * under a kernel (the collective has failed by then, and the communicator is broken). */
static void k_free(void *p)
{
    if (!p || enter() != 0)
        return;
    if (cu.mem_free_async) {
        cu.mem_free_async((uint64_t)(uintptr_t)p, bound_stream);
        leave();
        return;
    }
    if (wait_stream() != PYCOLL_CU_ERROR_NOT_READY)
        cu.mem_free((uint64_t)(uintptr_t)p);
    leave();
}

/* accuracy="reproducible"'s exact mode: the kernels of repro_template. The summary's atomics start from its
 * empty value, {0, -(the exponent mask), 0}, per dtype (static: the copy's source outlives the call). */
static const int32_t empty_summary[PYCOLL_NUM_DTYPES][3] = {
    [PYCOLL_FLOAT16] = {0, -31, 0}, [PYCOLL_BFLOAT16] = {0, -255, 0}, [PYCOLL_FLOAT32] = {0, -255, 0},
    [PYCOLL_FLOAT64] = {0, -2047, 0}};

static pycoll_status_t k_repro_summary(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary)
{
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES || !empty_summary[dtype][1])
        return failed((int)dtype, "dtype id %d has no reproducible kernels (float dtypes only)%s", NULL),
               PYCOLL_ERR_UNSUPPORTED;
    pycoll_status_t st = k_copy(summary, empty_summary[dtype], sizeof empty_summary[dtype]);
    void *params[] = {(void *)&x, &n, &summary};
    return st == PYCOLL_OK ? launch(dtype, K_REPRO_SUMMARY, n, params) : st;
}

static pycoll_status_t k_repro_encode(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t limbs, int32_t bits,
                                      int32_t base, int64_t *out)
{
    void *params[] = {(void *)&x, &n, &base, &bits, &limbs, &out};
    return launch(dtype, K_REPRO_ENCODE, n, params);
}

static pycoll_status_t k_repro_decode(const int64_t *sums, int64_t n, pycoll_dtype_t dtype, int32_t limbs,
                                      int32_t bits, int32_t base, void *out)
{
    void *params[] = {(void *)&sums, &n, &base, &bits, &limbs, &out};
    return launch(dtype, K_REPRO_DECODE, n, params);
}

/* The copy on the bound stream, then a wait for the stream: a copy to pinned host memory may return before its
 * bytes land, and the host reads them next. Bounded by the collective's deadline, as k_free's wait. */
static pycoll_status_t k_copy_to_host(void *dst, const void *src, int64_t nbytes)
{
    if (enter() != 0)
        return PYCOLL_ERR_SYSTEM;
    int r = cu.memcpy_async((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, (size_t)nbytes, bound_stream);
    if (r == 0)
        r = wait_stream();
    leave();
    if (r == 0)
        return PYCOLL_OK;
    failed(r, r == PYCOLL_CU_ERROR_NOT_READY ? "the stream had not finished the copy to the host by the "
              "collective's deadline (cuStreamQuery: CUresult %d)%s" : "cuMemcpyAsync to the host failed (CUresult "
              "%d)%s", NULL);
    return r == PYCOLL_CU_ERROR_NOT_READY ? PYCOLL_ERR_TIMEOUT : PYCOLL_ERR_SYSTEM;
}

static const pycoll_memory_kernels_t cuda_kernels = {
    .memory = "cuda", .reduce_into = k_reduce_into, .reduce = k_reduce, .scale_avg = k_scale_avg,
    .compensated_load = k_load, .compensated_combine = k_combine, .compensated_store = k_store, .copy = k_copy,
    .alloc = k_alloc, .free = k_free, .last_error = k_last_error, .scratch_per_call = 1,
    .version = PYCOLL_MEMORY_KERNELS_VERSION, .repro_summary = k_repro_summary, .repro_encode = k_repro_encode,
    .repro_decode = k_repro_decode, .copy_to_host = k_copy_to_host, .stream_ordered = 1};

const pycoll_memory_kernels_t *cuda_kernels_bind(const pycoll_p2p_t *p2p, void *stream, const void *buf, char *why,
                                                 size_t why_len)
{
    for (int i = 0; i < 2; i++) {
        if (!libraries[i].handle) {
            snprintf(why, why_len, "%s is not loaded", libraries[i].what);
            return NULL;
        }
    }
    int device = device_of(buf, why, why_len);
    if (device < 0)
        return NULL;
    bound_stream = stream;
    bound_p2p = p2p;
    bound_device = device;
    return &cuda_kernels;
}

pycoll_status_t pycoll_cuda_kernels_scale(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor,
                                          void *stream, char *error, size_t error_len)
{
    char why[PYCOLL_ERROR_LEN / 2] = "";
    if (!cuda_kernels_bind(NULL, stream, buf, why, sizeof why))
        return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s", why);
    pycoll_status_t st = k_scale_avg(buf, count, dtype, divisor);
    if (st != PYCOLL_OK)
        pycoll_format_error(error, error_len, st, "%s", cuda_error);
    return st;
}
