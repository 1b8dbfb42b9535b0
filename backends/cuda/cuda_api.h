/* The NVRTC and CUDA driver calls pycoll's CUDA kernels make (cuda_kernels.c), declared here so that pycoll
 * builds without CUDA: each as X(field, symbol, return type, parameters), with pycoll's types (int for results
 * and enums, uint64_t for CUdeviceptr, void * for opaque handles). The same lists fill the function tables, the
 * dlsym names and the compile-time check against the real nvrtc.h and cuda.h (tests/vendors/test_nvidia_headers.py),
 * which compares each symbol's real type with the type here, parameter by parameter, by ABI class. */
#ifndef PYCOLL_CUDA_API_H
#define PYCOLL_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define PYCOLL_NVRTC_FUNCTIONS(X)                                                                                  \
    X(create, nvrtcCreateProgram, int,                                                                          \
      (void **prog, const char *src, const char *name, int nheaders, const char *const *headers,                \
       const char *const *include_names))                                                                       \
    X(compile, nvrtcCompileProgram, int, (void *prog, int nopts, const char *const *opts))                      \
    X(ptx_size, nvrtcGetPTXSize, int, (void *prog, size_t *size))                                               \
    X(ptx, nvrtcGetPTX, int, (void *prog, char *ptx))                                                           \
    X(cubin_size, nvrtcGetCUBINSize, int, (void *prog, size_t *size))                                           \
    X(cubin, nvrtcGetCUBIN, int, (void *prog, char *cubin))                                                     \
    X(log_size, nvrtcGetProgramLogSize, int, (void *prog, size_t *size))                                        \
    X(log, nvrtcGetProgramLog, int, (void *prog, char *log))                                                    \
    X(destroy, nvrtcDestroyProgram, int, (void **prog))                                                         \
    X(error_string, nvrtcGetErrorString, const char *, (int result))                                            \
    X(version, nvrtcVersion, int, (int *major, int *minor))                                                     \
    X(num_archs, nvrtcGetNumSupportedArchs, int, (int *count))                                                  \
    X(archs, nvrtcGetSupportedArchs, int, (int *archs))

/* The versioned names (_v2) are what cuda.h's macros make of cuMemAlloc, cuCtxPushCurrent, ... */
#define PYCOLL_CUDA_DRIVER_FUNCTIONS(X)                                                                            \
    X(init, cuInit, int, (unsigned flags))                                                                      \
    X(device_get, cuDeviceGet, int, (int *device, int ordinal))                                                 \
    X(device_attribute, cuDeviceGetAttribute, int, (int *value, int attribute, int device))                     \
    X(primary_retain, cuDevicePrimaryCtxRetain, int, (void **ctx, int device))                                  \
    X(ctx_push, cuCtxPushCurrent_v2, int, (void *ctx))                                                          \
    X(ctx_pop, cuCtxPopCurrent_v2, int, (void **ctx))                                                           \
    X(pointer_attribute, cuPointerGetAttribute, int, (void *data, int attribute, uint64_t ptr))                 \
    X(module_load_data, cuModuleLoadData, int, (void **module, const void *image))                              \
    X(module_get_function, cuModuleGetFunction, int, (void **fn, void *module, const char *name))               \
    X(launch, cuLaunchKernel, int,                                                                              \
      (void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, \
       void *stream, void **params, void **extra))                                                              \
    X(memcpy_async, cuMemcpyAsync, int, (uint64_t dst, uint64_t src, size_t nbytes, void *stream))             \
    X(mem_alloc, cuMemAlloc_v2, int, (uint64_t *ptr, size_t nbytes))                                            \
    X(mem_free, cuMemFree_v2, int, (uint64_t ptr))                                                              \
    X(stream_query, cuStreamQuery, int, (void *stream))

/* Optional (CUDA 11.2 and newer drivers): stream-ordered allocation from the device's memory pool. Where the
 * driver has them, scratch is allocated and freed on the collective's stream (no host wait before a free, and the
 * memory goes back to the pool, where the framework's allocator can have it); else cuMemAlloc / cuMemFree. */
#define PYCOLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(X)                                                                   \
    X(mem_alloc_async, cuMemAllocAsync, int, (uint64_t *ptr, size_t nbytes, void *stream))                      \
    X(mem_free_async, cuMemFreeAsync, int, (uint64_t ptr, void *stream))

/* cuda.h's values (checked against it with the functions). */
#define PYCOLL_CUDA_SUCCESS_RESULT 0                     /* CUDA_SUCCESS */
#define PYCOLL_CU_ERROR_NOT_READY 600                    /* CUDA_ERROR_NOT_READY */
#define PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MAJOR 75           /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MINOR 76           /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
#define PYCOLL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9     /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */

#endif
