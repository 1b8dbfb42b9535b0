/* The CUDA memory table (algorithms/reduction.h): the elementwise kernels as CUDA C compiled at run time with
 * NVRTC, launched through the CUDA driver API on the collective's stream; copies with cuMemcpyAsync, scratch with
 * cuMemAlloc / cuMemFree. libnvrtc and libcuda are dlopen'ed like NCCL (the candidates come from Python:
 * pycoll/plugins/nccl.py), so pycoll builds and imports without CUDA.
 *
 * NOT RUN ON A GPU: this environment has none. What the tests check is the load-failure path and the kernel
 * source (generated for every dtype); see backends/README.md.
 *
 * The kernels mirror native/kernels (reduce_scalar.c, scale_avg.c, compensated.c, half_float.h, two_sum.h)
 * operation for operation, so that a device's result has the host's bits: a second implementation, in the
 * device's language, of the same arithmetic. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algorithms/reduction.h"
#include "common/error_format.h"
#include "../common/vendor_common.h"

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
    "__device__ static inline double divide_pair(double s, double c, double d, double *tail) {"
    " double q = s / d; double pe; double p = two_product(q, d, &pe);\n"
    "  double r = ((s - p) - pe) + c; double q2 = r / d; double e; double out = two_sum_d(q, q2, &e);"
    " *tail = e; return out; }\n"
    "__device__ static inline float round_to_odd(double x, double tail) { float f = (float)x;"
    " if (x != x) return f;\n"
    "  double below = (double)f != x ? x - (double)f : tail; u32 bits = __float_as_uint(f);\n"
    "  if (below != 0.0 && !(bits & 1u)) { if (f == 0.0f) bits = (below < 0.0 ? 0x80000000u : 0u) | 1u;"
    " else bits = (below > 0.0) == (f > 0.0f) ? bits + 1u : bits - 1u; }\n"
    "  return __uint_as_float(bits); }\n"
    "extern \"C\" __global__ void pycoll_compensated_load(A *sum, A *comp, const T *src, i64 n) {\n"
    "  FOR_EACH(i, n) { sum[i] = (A)LOAD(src[i]); comp[i] = 0; }\n}\n"
    "extern \"C\" __global__ void pycoll_compensated_combine(A *ds, A *dc, const A *ss, const A *sc, i64 n) {\n"
    "  FOR_EACH(i, n) { A e, e2; A s = two_sum(ds[i], ss[i], &e); A c = (dc[i] + sc[i]) + e;"
    " ds[i] = two_sum(s, c, &e2); dc[i] = e2; }\n}\n"
    "extern \"C\" __global__ void pycoll_compensated_store(T *dst, const A *sum, const A *comp, i64 n,"
    " i64 divisor) {\n"
    "  double d = (double)divisor;\n"
    "  FOR_EACH(i, n) { double tail;\n"
    "#if IS_F64\n"
    "    dst[i] = divisor > 1 ? divide_pair(sum[i], comp[i], d, &tail) : sum[i] + comp[i];\n"
    "#else\n"
    "    double x = divisor > 1 ? divide_pair(sum[i], comp[i], d, &tail) : two_sum_d(sum[i], comp[i], &tail);\n"
    "#if KIND == 1\n"
    "    dst[i] = divisor > 1 ? (float)x : sum[i] + comp[i];\n"
    "#else\n"
    "    dst[i] = STORE(round_to_odd(x, tail));\n"
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
                     "%.*s#define T %s\n#define A %s\n#define U %s\n#define W %s\n%s",
                     pycoll_dtype_name(dtype), ty.kind, dtype == PYCOLL_FLOAT64,
                     (int)(strstr(kernel_template, "__device__") - kernel_template), kernel_template, ty.t, ty.a,
                     ty.u, ty.w, strstr(kernel_template, "__device__"));
    return n < 0 ? -1 : (int64_t)n;
}

/* ---- the libraries ---- */

/* NVRTC and driver entry points, with their C signatures (int results, 64-bit sizes, opaque handles). */
static struct {
    int (*create)(void **prog, const char *src, const char *name, int nheaders, const char *const *headers,
                  const char *const *include_names);
    int (*compile)(void *prog, int nopts, const char *const *opts);
    int (*ptx_size)(void *prog, size_t *size);
    int (*ptx)(void *prog, char *ptx);
    int (*log_size)(void *prog, size_t *size);
    int (*log)(void *prog, char *log);
    int (*destroy)(void **prog);
    const char *(*error_string)(int result);
} nvrtc;

static struct {
    int (*init)(unsigned flags);
    int (*ctx_get_current)(void **ctx);
    int (*ctx_get_device)(int *device);
    int (*device_attribute)(int *value, int attribute, int device);
    int (*module_load_data)(void **module, const void *image);
    int (*module_get_function)(void **fn, void *module, const char *name);
    int (*launch)(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned shared, void *stream, void **params, void **extra);
    int (*memcpy_async)(uint64_t dst, uint64_t src, size_t nbytes, void *stream);
    int (*mem_alloc)(uint64_t *ptr, size_t nbytes);
    int (*mem_free)(uint64_t ptr);
    int (*stream_query)(void *stream);
} cu;

static const pycoll_vendor_symbol_t nvrtc_symbols[] = {
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcCreateProgram", VENDOR_SLOT(nvrtc.create)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcCompileProgram", VENDOR_SLOT(nvrtc.compile)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcGetPTXSize", VENDOR_SLOT(nvrtc.ptx_size)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcGetPTX", VENDOR_SLOT(nvrtc.ptx)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcGetProgramLogSize", VENDOR_SLOT(nvrtc.log_size)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcGetProgramLog", VENDOR_SLOT(nvrtc.log)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcDestroyProgram", VENDOR_SLOT(nvrtc.destroy)},
    {PYCOLL_VENDOR_CALL_NONE, "nvrtcGetErrorString", VENDOR_SLOT(nvrtc.error_string)},
};

/* The _v2 names are what cuda.h's macros resolve cuMemAlloc / cuMemFree / cuCtxGetCurrent... to. */
static const pycoll_vendor_symbol_t driver_symbols[] = {
    {PYCOLL_VENDOR_CALL_NONE, "cuInit", VENDOR_SLOT(cu.init)},
    {PYCOLL_VENDOR_CALL_NONE, "cuCtxGetCurrent", VENDOR_SLOT(cu.ctx_get_current)},
    {PYCOLL_VENDOR_CALL_NONE, "cuCtxGetDevice", VENDOR_SLOT(cu.ctx_get_device)},
    {PYCOLL_VENDOR_CALL_NONE, "cuDeviceGetAttribute", VENDOR_SLOT(cu.device_attribute)},
    {PYCOLL_VENDOR_CALL_NONE, "cuModuleLoadData", VENDOR_SLOT(cu.module_load_data)},
    {PYCOLL_VENDOR_CALL_NONE, "cuModuleGetFunction", VENDOR_SLOT(cu.module_get_function)},
    {PYCOLL_VENDOR_CALL_NONE, "cuLaunchKernel", VENDOR_SLOT(cu.launch)},
    {PYCOLL_VENDOR_CALL_NONE, "cuMemcpyAsync", VENDOR_SLOT(cu.memcpy_async)},
    {PYCOLL_VENDOR_CALL_NONE, "cuMemAlloc_v2", VENDOR_SLOT(cu.mem_alloc)},
    {PYCOLL_VENDOR_CALL_NONE, "cuMemFree_v2", VENDOR_SLOT(cu.mem_free)},
    {PYCOLL_VENDOR_CALL_NONE, "cuStreamQuery", VENDOR_SLOT(cu.stream_query)},
};

static pycoll_vendor_library_t libraries[2] = {
    {"NVRTC (libnvrtc)", "CUDA 11.2 or newer is needed", nvrtc_symbols,
     (int32_t)(sizeof nvrtc_symbols / sizeof nvrtc_symbols[0]), NULL},
    {"the CUDA driver (libcuda)", NULL, driver_symbols, (int32_t)(sizeof driver_symbols / sizeof driver_symbols[0]),
     NULL},
};

pycoll_status_t pycoll_cuda_kernels_load(int32_t library, const char *path, char *error, size_t error_len)
{
    if (library < 0 || library > 1)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "cuda kernels: library %d is not 0 or 1",
                                   (int)library);
    return vendor_library_open(&libraries[library], path, error, error_len);
}

/* ---- the table ---- */

/* The collective's stream and transport (for its deadline): the table's entries have no context argument (the
 * host's are kernels.h's), so the vendor transport sets them for its thread before the schedules run
 * (cuda_kernels_bind). */
static _Thread_local void *bound_stream;
static _Thread_local const pycoll_p2p_t *bound_p2p;

enum { NUM_KERNELS = 6 };
static const char *const kernel_names[NUM_KERNELS] = {
    "pycoll_reduce", "pycoll_scale_avg", "pycoll_compensated_load", "pycoll_compensated_combine",
    "pycoll_compensated_store", NULL};

typedef struct dtype_module {
    void *ctx;                 /* the context the module was loaded in (modules are per context) */
    void *module;
    void *fn[NUM_KERNELS];
} dtype_module_t;

static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
static dtype_module_t modules[PYCOLL_NUM_DTYPES];

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

/* Compile dtype's source for the device of ctx (current) and load it; 0, else a CUDA/NVRTC result (cuda_error
 * says what failed). */
static int load_module(void *ctx, pycoll_dtype_t dtype, dtype_module_t *out)
{
    int device = 0, major = 0, minor = 0;
    int r = cu.ctx_get_device(&device);
    if (r == 0)
        r = cu.device_attribute(&major, 75, device); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    if (r == 0)
        r = cu.device_attribute(&minor, 76, device); /* ..._MINOR */
    if (r != 0)
        return failed(r, "the CUDA driver could not say the current device's architecture (CUresult %d)%s", NULL);
    char source[16384], arch[64];
    if (pycoll_cuda_kernel_source(dtype, source, sizeof source) < 0)
        return failed((int)dtype, "no CUDA kernels for dtype id %d%s", NULL);
    snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d%d", major, minor);
    /* --fmad=false: see kernel_template (TwoSum's error term). */
    const char *opts[] = {arch, "--fmad=false", "--std=c++14"};
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
        /* Room for the prefix failed() adds, so the whole message fits one error string; the log's start says
         * what failed first. */
        char detail[PYCOLL_ERROR_LEN - 96];
        snprintf(detail, sizeof detail, "%s for %s: %s", nvrtc.error_string(r), arch, log);
        return failed(r, "NVRTC could not compile pycoll's kernels (nvrtcResult %d): %s", detail);
    }
    size_t size = 0;
    char *ptx = NULL;
    if (r == 0)
        r = nvrtc.ptx_size(prog, &size);
    if (r == 0 && !(ptx = malloc(size ? size : 1)))
        r = -1;
    if (r == 0)
        r = nvrtc.ptx(prog, ptx);
    if (prog)
        nvrtc.destroy(&prog);
    dtype_module_t m = {.ctx = ctx};
    if (r == 0)
        r = cu.module_load_data(&m.module, ptx);
    free(ptx);
    for (int k = 0; r == 0 && kernel_names[k]; k++)
        if (k < 2 || dtype >= PYCOLL_FLOAT16) /* integers have no compensated kernels (KIND 0) */
            r = cu.module_get_function(&m.fn[k], m.module, kernel_names[k]);
    if (r != 0)
        return failed(r, "loading the compiled kernels failed (result %d)%s", NULL);
    *out = m;
    return 0;
}

/* The function `kernel` of dtype's module for the current context, compiled on first use. */
static void *kernel_for(pycoll_dtype_t dtype, int kernel)
{
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return NULL;
    void *ctx = NULL, *fn = NULL;
    if (cu.ctx_get_current(&ctx) != 0 || !ctx) { /* the caller's framework makes its device's context current */
        failed(0, "no CUDA context is current on this thread (cuCtxGetCurrent: %d)%s",
               " -- set the array's device first");
        return NULL;
    }
    pthread_mutex_lock(&module_lock);
    dtype_module_t *m = &modules[dtype];
    if (m->ctx != ctx || !m->module) {
        dtype_module_t fresh;
        if (load_module(ctx, dtype, &fresh) == 0)
            *m = fresh; /* a module of an older context is left to that context's teardown */
    }
    if (m->ctx == ctx && m->module) {
        fn = m->fn[kernel];
        if (!fn)
            failed((int)dtype, "no compensated kernels for dtype id %d (float dtypes only)%s", NULL);
    }
    pthread_mutex_unlock(&module_lock);
    return fn;
}

/* Launch on the bound stream: 256 threads a block, a grid-stride loop over at most 65535 blocks. */
static pycoll_status_t launch(pycoll_dtype_t dtype, int kernel, int64_t n, void **params)
{
    if (n <= 0)
        return PYCOLL_OK;
    void *fn = kernel_for(dtype, kernel);
    if (!fn)
        return PYCOLL_ERR_SYSTEM;
    int64_t blocks = (n + 255) / 256;
    int r = cu.launch(fn, (unsigned)(blocks < 65535 ? blocks : 65535), 1, 1, 256, 1, 1, 0, bound_stream, params,
                      NULL);
    return r == 0 ? PYCOLL_OK : (failed(r, "cuLaunchKernel failed (CUresult %d)%s", NULL), PYCOLL_ERR_SYSTEM);
}

static pycoll_status_t k_reduce(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                                pycoll_op_t op)
{
    int o = (int)op;
    void *params[] = {&out, (void *)&a, (void *)&b, &count, &o};
    return launch(dtype, 0, count, params);
}

static pycoll_status_t k_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                     pycoll_op_t op)
{
    return k_reduce(dst, dst, src, count, dtype, op);
}

static pycoll_status_t k_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor)
{
    void *params[] = {&buf, &count, &divisor};
    return divisor > 1 ? launch(dtype, 1, count, params) : PYCOLL_OK;
}

static pycoll_status_t k_load(void *sum, void *comp, const void *src, int64_t count, pycoll_dtype_t dtype)
{
    void *params[] = {&sum, &comp, (void *)&src, &count};
    return launch(dtype, 2, count, params);
}

static pycoll_status_t k_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                 int64_t count, pycoll_dtype_t dtype)
{
    void *params[] = {&dst_sum, &dst_comp, (void *)&src_sum, (void *)&src_comp, &count};
    return launch(dtype, 3, count, params);
}

static pycoll_status_t k_store(void *dst, const void *sum, const void *comp, int64_t count, pycoll_dtype_t dtype,
                               int64_t divisor)
{
    void *params[] = {&dst, (void *)&sum, (void *)&comp, &count, &divisor};
    return launch(dtype, 4, count, params);
}

/* On the bound stream, so it is ordered with the kernels and the vendor's sends and receives. Overlapping
 * ranges (all_gather's own block, when the caller passes overlapping buffers) are undefined for cuMemcpyAsync. */
static pycoll_status_t k_copy(void *dst, const void *src, int64_t nbytes)
{
    int r = cu.memcpy_async((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, (size_t)nbytes, bound_stream);
    return r == 0 ? PYCOLL_OK : (failed(r, "cuMemcpyAsync failed (CUresult %d)%s", NULL), PYCOLL_ERR_SYSTEM);
}

static void *k_alloc(int64_t nbytes)
{
    uint64_t p = 0;
    int r = cu.mem_alloc(&p, (size_t)(nbytes > 0 ? nbytes : 1));
    return r == 0 ? (void *)(uintptr_t)p : (failed(r, "cuMemAlloc failed (CUresult %d)%s", NULL), NULL);
}

/* Work queued on the stream may still use the block: wait for the stream first (cuMemFree does not order with
 * it), polling until the collective's deadline; past it the block is leaked rather than freed under a kernel
 * (the collective has failed by then, and the communicator is broken). */
static void k_free(void *p)
{
    if (!p)
        return;
    const int64_t deadline = bound_p2p ? bound_p2p->deadline_ns : pycoll_now_ns();
    int r;
    while ((r = cu.stream_query(bound_stream)) == 600 /* CUDA_ERROR_NOT_READY */ && pycoll_now_ns() < deadline)
        nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
    if (r != 600)
        cu.mem_free((uint64_t)(uintptr_t)p);
}

static const pycoll_memory_kernels_t cuda_kernels = {
    "cuda", k_reduce_into, k_reduce, k_scale_avg, k_load, k_combine, k_store, k_copy, k_alloc, k_free, k_last_error};

static void init_driver(void)
{
    cu.init(0); /* a failure shows in the first call that needs the driver (no current context) */
}

const pycoll_memory_kernels_t *cuda_kernels_bind(const pycoll_p2p_t *p2p, void *stream, char *why, size_t why_len)
{
    for (int i = 0; i < 2; i++) {
        if (!libraries[i].handle) {
            snprintf(why, why_len, "%s is not loaded", libraries[i].what);
            return NULL;
        }
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_driver);
    bound_stream = stream;
    bound_p2p = p2p;
    return &cuda_kernels;
}
