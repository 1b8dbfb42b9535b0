"""The reproducible summary kernel (backends/cuda/cuda_kernels.c, pycoll_repro_summary) reduces within each warp
and block before it touches global memory: one atomicMax of each of its three words per block, not three per
thread. Checked without a GPU by compiling the kernel source for the host with a shim that runs one block as
real threads (shuffles and __syncthreads over barriers, shared memory as statics, atomics counted)."""

import ctypes

import numpy as np
import pytest
from cuda_host_build import host_library, ptr

pytest.importorskip("ml_dtypes")

THREADS = 256  # the block every launch uses (cuda_kernels.c)

BLOCK_SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
using std::fabs;
struct dim { unsigned x; };
static const dim blockIdx = {0}, gridDim = {1};
static dim blockDim = {1};
static thread_local dim threadIdx = {0};
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static std::mutex atomic_lock;
static int atomics;
static inline int atomicMax(int *p, int v) {
    std::lock_guard<std::mutex> hold(atomic_lock); atomics++; int old = *p; *p = v > old ? v : old; return old; }
static std::barrier<> *block_barrier, *warp_barrier[32];
static int lanes[1024];
static inline void __syncthreads() { block_barrier->arrive_and_wait(); }
static inline int __shfl_down_sync(unsigned, int v, int offset) {
    unsigned t = threadIdx.x, lane = t & 31, width = blockDim.x - (t & ~31u) < 32 ? blockDim.x - (t & ~31u) : 32;
    std::barrier<> *warp = warp_barrier[t >> 5];
    lanes[t] = v; warp->arrive_and_wait();
    int got = lane + offset < width ? lanes[t + offset] : v; warp->arrive_and_wait(); return got; }
#define __shared__ static
#define __device__
#define __global__
"""

TAIL = r"""
extern "C" int summary_block(const void *x, long long n, int *summary, int threads) {
    blockDim.x = (unsigned)threads; atomics = 0;
    std::barrier<> block(threads); block_barrier = &block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (int w = 0; w < (threads + 31) / 32; w++) {
        warps.emplace_back(new std::barrier<>(threads - 32 * w < 32 ? threads - 32 * w : 32));
        warp_barrier[w] = warps.back().get();
    }
    std::vector<std::thread> all;
    for (int t = 0; t < threads; t++)
        all.emplace_back([=] { threadIdx.x = (unsigned)t; pycoll_repro_summary((const RB *)x, n, summary); });
    for (auto &t : all) t.join();
    return atomics;
}
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_block_makes_three_atomics_and_the_summary_of_one_thread(tmp_path, dtype):
    lib = host_library(tmp_path, dtype, BLOCK_SHIM, TAIL)
    emask = (1 << {"float32": 8, "float64": 11}[dtype]) - 1
    rng = np.random.default_rng(5)
    cases = {"spread": (rng.standard_normal(3001) * 10.0 ** rng.integers(-30, 30, 3001)).astype(dtype),
             "zeros and a subnormal": np.array([0.0, -0.0, np.finfo(dtype).smallest_subnormal] + [0.0] * 300, dtype),
             "an infinity": np.array([1.0, np.inf] + [2.0] * 700, dtype),
             "fewer elements than threads": np.array([3.0, -5e-3, 7e4], dtype)}
    for name, x in cases.items():
        want = np.array([0, -emask, 0], np.int32)
        got = want.copy()
        assert lib.summary_block(ptr(x), ctypes.c_longlong(len(x)), ptr(want), 1) == 3, name
        assert lib.summary_block(ptr(x), ctypes.c_longlong(len(x)), ptr(got), THREADS) == 3, name
        assert got.tolist() == want.tolist(), name
        assert (want[2] == 1) == bool(np.isinf(x).any()), name
    top = np.frexp(np.abs(cases["spread"]))[1].max() + (emask >> 1) - 1  # the largest biased exponent
    assert lib.summary_block(ptr(cases["spread"]), ctypes.c_longlong(3001), ptr(got := np.array([0, -emask, 0],
                                                                                             np.int32)), THREADS) == 3
    assert got[0] == top
