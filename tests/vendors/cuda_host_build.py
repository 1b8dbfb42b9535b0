"""pycoll's CUDA kernels (backends/cuda/cuda_kernels.c) compiled for the host, checked without a GPU: the
source for a dtype over a shim standing in for CUDA's built-ins (test_cuda_kernel_source.py,
test_cuda_summary_block.py)."""

import ctypes
import shutil
import subprocess

import pytest

from pycoll._bindings import vendor

DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7}


# A host shim for what NVRTC provides: one thread of one block, the bit casts, and the PTX conversions.
SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
using std::fabs;
struct dim { unsigned x; };
static const dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int atomicMax(int *p, int v) { int old = *p; *p = v > old ? v : old; return old; }
// One thread: a shuffle from a lane that does not exist leaves the value as it is; nothing to synchronise.
static inline int __shfl_down_sync(unsigned, int v, int) { return v; }
static inline void __syncthreads() {}
#define __shared__ static
#define __device__
#define __global__
"""


def host_library(tmp_path, dtype, shim=SHIM, tail=""):
    """The kernels of dtype compiled for the host over `shim` (CUDA's built-ins), `tail` appended."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the kernels for the host")
    source = vendor.cuda_kernel_source(DTYPES[dtype])
    # The PTX conversions (float16 only) become the host's: numpy's float16 rounding is the same (RNE).
    source = source.replace('asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));', "f = host_f16_to_f32(h);")
    source = source.replace('u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;',
                            "return host_f32_to_f16_subnormal(f);")
    helpers = r"""
static float host_f16_to_f32(unsigned short h) { return (float)(_Float16)__builtin_bit_cast(_Float16, h); }
static unsigned short host_f32_to_f16_subnormal(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
"""
    path = tmp_path / f"k_{dtype}.cpp"
    path.write_text(shim + helpers + source + tail)
    out = tmp_path / f"k_{dtype}.so"
    result = subprocess.run([cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
                             "-pthread", "-o", str(out), str(path)], capture_output=True, text=True)
    if result.returncode != 0 and "_Float16" in result.stderr:
        pytest.skip("the host C++ compiler has no _Float16")
    assert result.returncode == 0, result.stderr
    return ctypes.CDLL(str(out))


def ptr(a):
    """A NumPy array's data as a C pointer argument."""
    return ctypes.c_void_p(a.ctypes.data)
