/* A fake CUDA driver (libcuda): the calls pycoll's CUDA kernels make (backends/cuda/cuda_api.h), as strict about
 * contexts as the real one. Devices have primary contexts; each thread has a context stack (push/pop); a pointer's
 * device is what the test registered (fake_cuda_register). Module loads, allocations, copies and launches need a
 * current context (CUDA_ERROR_INVALID_CONTEXT, 201, otherwise), and a launch needs its function's module to be of
 * the current context's device (CUDA_ERROR_INVALID_HANDLE, 400, otherwise). Nothing is computed: each call is
 * logged (fake_cuda_log) for the test to read. Device compute capabilities: FAKE_CUDA_CC ("80,90": device 0 is
 * 8.0, device 1 9.0; two devices by default).
 *
 * Allocations are tracked (fake_cuda_live counts those not yet freed): cuMemAllocAsync records its stream, and
 * cuMemFreeAsync refuses a block freed on another stream, one freed twice or one it never gave out (logged as
 * "refused", CUDA_ERROR_INVALID_VALUE). Built with -DFAKE_CUDA_NO_ASYNC_ALLOC it is a driver older than CUDA 11.2,
 * without the stream-ordered calls.
 *
 * Where the process has loaded the fake CUDA runtime (PYCOLL_CUDART_LIBRARY: the fake NCCL's, whose streams run
 * its sends and receives on threads of their own, fake_collectives.c), the driver's stream calls follow that
 * work as the real driver follows the runtime's: cuMemFreeAsync frees the block only once the work queued
 * before it on its stream has run, and cuStreamQuery answers CUDA_ERROR_NOT_READY while the stream is busy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { MAX_DEVICES = 8, MAX_DEPTH = 16, MAX_POINTERS = 64, MAX_MODULES = 64, MAX_FUNCTIONS = 8 };
enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
       INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600 };

/* A function of the fake runtime, where the process loaded it; NULL otherwise. */
static void *runtime_symbol(const char *name)
{
    const char *path = getenv("PYCOLL_CUDART_LIBRARY");
    void *lib = path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    void *fn = lib ? dlsym(lib, name) : NULL;
    if (lib)
        dlclose(lib); /* only drops the reference RTLD_NOLOAD took: the library stays loaded */
    return fn;
}

static void free_block(void *p)
{
    free(p);
}

typedef struct fake_context {
    int device;
} fake_context_t;

typedef struct fake_module {
    int device;
    int sm;
    char functions[MAX_FUNCTIONS][40]; /* a float program's: reduce, scale_avg, compensated x3, reproducible x3 */
} fake_module_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int num_devices;
static int cc[MAX_DEVICES];
static fake_context_t contexts[MAX_DEVICES];
static struct {
    uintptr_t start;
    size_t bytes;
    int device;
    int allocated; /* 1: cuMemAlloc's, 2: cuMemAllocAsync's; 0: registered by the test */
    void *stream;  /* cuMemAllocAsync's */
} pointers[MAX_POINTERS];
static int num_pointers;
static fake_module_t modules[MAX_MODULES];
static int num_modules;
static char log_text[1 << 16];

static _Thread_local fake_context_t *stack[MAX_DEPTH];
static _Thread_local int depth;

static void logf_(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&lock);
    size_t used = strlen(log_text);
    snprintf(log_text + used, sizeof log_text - used, "%s\n", line);
    pthread_mutex_unlock(&lock);
}

static fake_context_t *current(void)
{
    return depth ? stack[depth - 1] : NULL;
}

EXPORT const char *fake_cuda_log(void)
{
    return log_text;
}

EXPORT int fake_cuda_depth(void)
{
    return depth;
}

/* [ptr, ptr + bytes) is memory of `device`. */
EXPORT void fake_cuda_register(uintptr_t ptr, size_t bytes, int device)
{
    pthread_mutex_lock(&lock);
    if (num_pointers < MAX_POINTERS)
        pointers[num_pointers++] = (__typeof__(pointers[0])){ptr, bytes, device, 0, NULL};
    pthread_mutex_unlock(&lock);
}

EXPORT int cuInit(unsigned flags)
{
    if (flags)
        return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        const char *list = getenv("FAKE_CUDA_CC");
        char copy[64];
        snprintf(copy, sizeof copy, "%s", list ? list : "80,80");
        char *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && num_devices < MAX_DEVICES; t = strtok_r(NULL, ",", &save))
            cc[num_devices++] = atoi(t);
        for (int d = 0; d < num_devices; d++)
            contexts[d].device = d;
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    logf_("cuInit");
    return SUCCESS;
}

EXPORT int cuDeviceGet(int *device, int ordinal)
{
    if (!initialized)
        return NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= num_devices)
        return INVALID_DEVICE;
    *device = ordinal;
    return SUCCESS;
}

EXPORT int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    if (!initialized)
        return NOT_INITIALIZED;
    if (device < 0 || device >= num_devices)
        return INVALID_DEVICE;
    if (attribute == 75)
        *value = cc[device] / 10;
    else if (attribute == 76)
        *value = cc[device] % 10;
    else
        return INVALID_VALUE;
    return SUCCESS;
}

EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int device)
{
    if (!initialized)
        return NOT_INITIALIZED;
    if (device < 0 || device >= num_devices)
        return INVALID_DEVICE;
    *ctx = &contexts[device];
    logf_("cuDevicePrimaryCtxRetain device=%d", device);
    return SUCCESS;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx)
{
    if (!ctx || depth == MAX_DEPTH)
        return INVALID_VALUE;
    stack[depth++] = ctx;
    return SUCCESS;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx)
{
    if (!depth)
        return INVALID_CONTEXT;
    fake_context_t *top = stack[--depth];
    if (ctx)
        *ctx = top;
    return SUCCESS;
}

/* The device of memory the driver knows, -1 for host memory. */
static int device_of(uint64_t ptr)
{
    int device = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < num_pointers && device < 0; i++)
        if (ptr >= pointers[i].start && ptr < pointers[i].start + pointers[i].bytes)
            device = pointers[i].device;
    pthread_mutex_unlock(&lock);
    return device;
}

EXPORT int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr)
{
    if (!initialized)
        return NOT_INITIALIZED;
    if (attribute != 9) /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
        return INVALID_VALUE;
    const int device = device_of(ptr);
    if (device < 0)
        return INVALID_VALUE; /* memory the driver does not know: host memory */
    *(int *)data = device;
    return SUCCESS;
}

/* A CUBIN (64-bit ELF, EM_CUDA) of the current device's architecture, or PTX. */
EXPORT int cuModuleLoadData(void **module, const void *image)
{
    fake_context_t *ctx = current();
    if (!ctx)
        return INVALID_CONTEXT;
    const unsigned char *p = image;
    int sm = 0;
    if (memcmp(p, "\x7f" "ELF", 4) == 0) {
        uint16_t machine;
        uint32_t flags;
        memcpy(&machine, p + 18, 2);
        memcpy(&flags, p + 48, 4);
        if (machine != 190)
            return INVALID_IMAGE;
        sm = (int)(p[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
        if (sm / 10 != cc[ctx->device] / 10 || sm > cc[ctx->device])
            return 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
    } else if (!strstr((const char *)image, ".target")) {
        return INVALID_IMAGE;
    }
    pthread_mutex_lock(&lock);
    if (num_modules == MAX_MODULES) {
        pthread_mutex_unlock(&lock);
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    fake_module_t *m = &modules[num_modules++];
    pthread_mutex_unlock(&lock);
    m->device = ctx->device;
    m->sm = sm;
    *module = m;
    logf_("cuModuleLoadData device=%d %s", ctx->device, sm ? "cubin" : "ptx");
    if (sm)
        logf_("cubin sm_%d device=%d", sm, ctx->device);
    return SUCCESS;
}

EXPORT int cuModuleGetFunction(void **fn, void *module, const char *name)
{
    fake_module_t *m = module;
    if (!current())
        return INVALID_CONTEXT;
    for (int i = 0; i < MAX_FUNCTIONS; i++) {
        if (!m->functions[i][0]) {
            snprintf(m->functions[i], sizeof m->functions[i], "%s", name);
            *fn = m->functions[i];
            return SUCCESS;
        }
    }
    return NOT_FOUND;
}

static fake_module_t *module_of(void *fn)
{
    for (int i = 0; i < num_modules; i++)
        if ((char *)fn >= (char *)&modules[i] && (char *)fn < (char *)(&modules[i] + 1))
            return &modules[i];
    return NULL;
}

EXPORT int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, void *stream, void **params, void **extra)
{
    (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)extra;
    fake_context_t *ctx = current();
    if (!ctx) {
        logf_("cuLaunchKernel refused: no current context");
        return INVALID_CONTEXT;
    }
    fake_module_t *m = module_of(fn);
    if (!m || m->device != ctx->device) {
        logf_("cuLaunchKernel refused: a function of another device's module");
        return INVALID_HANDLE;
    }
    logf_("cuLaunchKernel %s device=%d grid=%u block=%u stream=%p", (const char *)fn, ctx->device, gx, bx, stream);
    /* The scalars a reproducible encode or decode was given, in its parameters' order (x or sums, i64 n, int base,
     * int bits, int limbs, out), so that a test sees the plan reach the kernel in that order. */
    if (strcmp(fn, "pycoll_repro_encode") == 0 || strcmp(fn, "pycoll_repro_decode") == 0)
        logf_("  n=%lld base=%d bits=%d limbs=%d", *(const long long *)params[1], *(const int *)params[2],
              *(const int *)params[3], *(const int *)params[4]);
    return SUCCESS;
}

/* Logged where the destination is host memory (the copies the host reads next), the rest not: there are many. */
EXPORT int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t nbytes, void *stream)
{
    if (!current())
        return INVALID_CONTEXT;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, nbytes);
    if (device_of(dst) < 0)
        logf_("cuMemcpyAsync to host bytes=%zu stream=%p", nbytes, stream);
    return SUCCESS;
}

/* The number of blocks allocated through the driver and not yet freed. */
EXPORT int fake_cuda_live(void)
{
    int live = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < num_pointers; i++)
        live += pointers[i].allocated != 0;
    pthread_mutex_unlock(&lock);
    return live;
}

static int allocate(uint64_t *ptr, size_t nbytes, int how, void *stream)
{
    fake_context_t *ctx = current();
    if (!ctx)
        return INVALID_CONTEXT;
    void *p = malloc(nbytes);
    if (!p)
        return 2;
    pthread_mutex_lock(&lock);
    if (num_pointers == MAX_POINTERS) {
        pthread_mutex_unlock(&lock);
        free(p);
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    pointers[num_pointers++] = (__typeof__(pointers[0])){(uintptr_t)p, nbytes, ctx->device, how, stream};
    pthread_mutex_unlock(&lock);
    *ptr = (uintptr_t)p;
    return SUCCESS;
}

/* Frees a block `how` allocated it (on `stream` for cuMemAllocAsync's): INVALID_VALUE for anything else. */
static int release(uint64_t ptr, int how, void *stream, const char *call)
{
    if (!current())
        return INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < num_pointers && !(pointers[i].allocated && pointers[i].start == ptr))
        i++;
    const char *why = i == num_pointers ? "not allocated (or freed twice)"
                      : pointers[i].allocated != how ? "allocated by the other call"
                      : how == 2 && pointers[i].stream != stream ? "allocated on another stream" : NULL;
    if (!why)
        pointers[i] = pointers[--num_pointers];
    pthread_mutex_unlock(&lock);
    if (why) {
        logf_("%s refused: %#llx %s", call, (unsigned long long)ptr, why);
        return INVALID_VALUE;
    }
    typedef long long (*submit_fn)(void *, void (*)(void *), void *, void *, long long);
    submit_fn submit = how == 2 ? (submit_fn)runtime_symbol("fake_stream_submit") : NULL;
    if (!submit || submit(stream, free_block, (void *)(uintptr_t)ptr, NULL, 0) < 0)
        free((void *)(uintptr_t)ptr);
    logf_("%s stream=%p", call, stream);
    return SUCCESS;
}

EXPORT int cuMemAlloc_v2(uint64_t *ptr, size_t nbytes)
{
    int r = allocate(ptr, nbytes, 1, NULL);
    if (r == SUCCESS)
        logf_("cuMemAlloc device=%d bytes=%zu", current()->device, nbytes);
    return r;
}

EXPORT int cuMemFree_v2(uint64_t ptr)
{
    return release(ptr, 1, NULL, "cuMemFree");
}

#ifndef FAKE_CUDA_NO_ASYNC_ALLOC
EXPORT int cuMemAllocAsync(uint64_t *ptr, size_t nbytes, void *stream)
{
    int r = allocate(ptr, nbytes, 2, stream);
    if (r == SUCCESS)
        logf_("cuMemAllocAsync device=%d bytes=%zu stream=%p", current()->device, nbytes, stream);
    return r;
}

EXPORT int cuMemFreeAsync(uint64_t ptr, void *stream)
{
    return release(ptr, 2, stream, "cuMemFreeAsync");
}
#endif

EXPORT int cuStreamQuery(void *stream)
{
    if (!current())
        return INVALID_CONTEXT;
    logf_("cuStreamQuery stream=%p", stream);
    int (*busy)(void *) = (int (*)(void *))runtime_symbol("fake_stream_busy");
    return busy && busy(stream) ? NOT_READY : SUCCESS;
}
