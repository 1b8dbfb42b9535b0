"""The CUDA kernels' source (backends/cuda/cuda_kernels.c), checked without a GPU: generated for every dtype with
the kernels that dtype needs, and -- compiled for the host with a small shim standing in for CUDA's built-ins
(one thread, the grid-stride loop runs every element) -- bit for bit the host kernels' results (pycoll.kernels).
That checks the arithmetic, not NVRTC, the driver or a launch: those need a GPU (see backends/README.md)."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from pycoll import kernels
from pycoll._bindings import vendor
from pycoll.accuracy import make_inputs

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7}
FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPENSATED = ("pycoll_compensated_load", "pycoll_compensated_combine", "pycoll_compensated_store")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_source_for_every_dtype(dtype):
    source = vendor.cuda_kernel_source(DTYPES[dtype])
    assert f"kernels for {dtype} " in source
    for kernel in ("pycoll_reduce", "pycoll_scale_avg") + COMPENSATED:
        assert f'extern "C" __global__ void {kernel}(' in source
    # The compensated kernels compile only for float dtypes (KIND != 0).
    assert ("#define KIND 0" in source) == (dtype not in FLOATS)


def test_no_source_for_an_unknown_dtype():
    assert vendor.cuda_kernel_source(99) is None


# A host shim for what NVRTC provides: one thread of one block, the bit casts, and the PTX conversions.
SHIM = r"""
#include <cstring>
#include <cstdint>
struct dim { unsigned x; };
static const dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
#define __device__
#define __global__
"""


def _host_library(tmp_path, dtype):
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
    path.write_text(SHIM + helpers + source)
    out = tmp_path / f"k_{dtype}.so"
    result = subprocess.run([cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
                             "-o", str(out), str(path)], capture_output=True, text=True)
    if result.returncode != 0 and "_Float16" in result.stderr:
        pytest.skip("the host C++ compiler has no _Float16")
    assert result.returncode == 0, result.stderr
    return ctypes.CDLL(str(out))


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_kernels_compiled_for_the_host_match_the_host_kernels(tmp_path, dtype):
    lib = _host_library(tmp_path, dtype)
    n = 513
    rng = np.random.default_rng(3)
    if dtype in FLOATS:
        a, b = (np.asarray(x).copy() for x in make_inputs("mixed", 2, n, dtype, seed=4))
        a[:3] = np.array([np.nan, 0.0, -0.0]).astype(a.dtype)
        b[:3] = np.array([1.0, -0.0, 0.0]).astype(b.dtype)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    for op_id, op in enumerate(("sum", "prod", "min", "max")):
        got = np.empty_like(a)
        lib.pycoll_reduce(_p(got), _p(a), _p(b), ctypes.c_longlong(n), ctypes.c_int(op_id))
        assert got.tobytes() == kernels.reduce(a, b, op).tobytes(), op
    for divisor in (3, 7):
        got, want = a.copy(), a.copy()
        lib.pycoll_scale_avg(_p(got), ctypes.c_longlong(n), ctypes.c_longlong(divisor))
        kernels.scale_avg(want, divisor)
        assert got.tobytes() == want.tobytes(), divisor
    if dtype not in FLOATS:
        return
    acc = np.float64 if dtype == "float64" else np.float32
    s1, c1, s2, c2 = (np.empty(n, acc) for _ in range(4))
    lib.pycoll_compensated_load(_p(s1), _p(c1), _p(a), ctypes.c_longlong(n))
    lib.pycoll_compensated_load(_p(s2), _p(c2), _p(b), ctypes.c_longlong(n))
    ws, wc = kernels.compensated_load(a)
    assert s1.tobytes() == np.asarray(ws).tobytes() and c1.tobytes() == np.asarray(wc).tobytes()
    ws2, wc2 = kernels.compensated_load(b)
    lib.pycoll_compensated_combine(_p(s1), _p(c1), _p(s2), _p(c2), ctypes.c_longlong(n))
    kernels.compensated_combine(ws, wc, ws2, wc2)
    assert s1.tobytes() == np.asarray(ws).tobytes() and c1.tobytes() == np.asarray(wc).tobytes()
    for divisor in (1, 3):
        got, want = np.empty_like(a), np.empty_like(a)
        lib.pycoll_compensated_store(_p(got), _p(s1), _p(c1), ctypes.c_longlong(n), ctypes.c_longlong(divisor))
        kernels.compensated_store(want, ws, wc, divisor)
        assert got.tobytes() == want.tobytes(), divisor
