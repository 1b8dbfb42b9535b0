"""The CUDA kernels' source (backends/cuda/cuda_kernels.c), checked without a GPU: generated for every dtype with
the kernels that dtype needs, and -- compiled for the host with a small shim standing in for CUDA's built-ins
(one thread, the grid-stride loop runs every element) -- bit for bit the host kernels' results (pycoll.kernels).
That checks the arithmetic, not NVRTC, the driver or a launch: those need a GPU (see backends/README.md)."""

import ctypes

import numpy as np
import pytest
from cuda_host_build import DTYPES, host_library, ptr
from float_cases import same, specials
from reproducible_cases import double_rounding_traps, edges, spanning

from pycoll import kernels
from pycoll._bindings import vendor
from pycoll.tools.accuracy import make_inputs

ml_dtypes = pytest.importorskip("ml_dtypes")

FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPENSATED = ("pycoll_compensated_load", "pycoll_compensated_combine", "pycoll_compensated_store")
REPRODUCIBLE = ("pycoll_repro_summary", "pycoll_repro_encode", "pycoll_repro_decode")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_source_for_every_dtype(dtype):
    source = vendor.cuda_kernel_source(DTYPES[dtype])
    assert f"kernels for {dtype} " in source
    for kernel in ("pycoll_reduce", "pycoll_scale_avg") + COMPENSATED + REPRODUCIBLE:
        assert f'extern "C" __global__ void {kernel}(' in source
    # The compensated and reproducible kernels compile only for float dtypes (KIND != 0).
    assert ("#define KIND 0" in source) == (dtype not in FLOATS)


def test_no_source_for_an_unknown_dtype():
    assert vendor.cuda_kernel_source(99) is None


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_kernels_compiled_for_the_host_match_the_host_kernels(tmp_path, dtype):
    lib = host_library(tmp_path, dtype)
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
        lib.pycoll_reduce(ptr(got), ptr(a), ptr(b), ctypes.c_longlong(n), ctypes.c_int(op_id))
        assert got.tobytes() == kernels.reduce(a, b, op).tobytes(), op
    for divisor in (3, 7):
        got, want = a.copy(), a.copy()
        lib.pycoll_scale_avg(ptr(got), ctypes.c_longlong(n), ctypes.c_longlong(divisor))
        kernels.scale_avg(want, divisor)
        assert got.tobytes() == want.tobytes(), divisor
    if dtype not in FLOATS:
        return
    acc = np.float64 if dtype == "float64" else np.float32
    s1, c1, s2, c2 = (np.empty(n, acc) for _ in range(4))
    lib.pycoll_compensated_load(ptr(s1), ptr(c1), ptr(a), ctypes.c_longlong(n))
    lib.pycoll_compensated_load(ptr(s2), ptr(c2), ptr(b), ctypes.c_longlong(n))
    ws, wc = kernels.compensated_load(a)
    assert s1.tobytes() == np.asarray(ws).tobytes() and c1.tobytes() == np.asarray(wc).tobytes()
    ws2, wc2 = kernels.compensated_load(b)
    lib.pycoll_compensated_combine(ptr(s1), ptr(c1), ptr(s2), ptr(c2), ctypes.c_longlong(n))
    kernels.compensated_combine(ws, wc, ws2, wc2)
    assert s1.tobytes() == np.asarray(ws).tobytes() and c1.tobytes() == np.asarray(wc).tobytes()
    for divisor in (1, 3):
        got, want = np.empty_like(a), np.empty_like(a)
        lib.pycoll_compensated_store(ptr(got), ptr(s1), ptr(c1), ctypes.c_longlong(n), ctypes.c_longlong(divisor))
        kernels.compensated_store(want, ws, wc, divisor)
        assert got.tobytes() == want.tobytes(), divisor


def _reproducible_plan(summary, dtype, size):
    """kernels/reproducible.c's repro_plan restated: (limbs, bits, base) of the exact mode, or None for the
    general mode (which has no device kernels)."""
    frac, exp_bits, general_limbs = {"float16": (10, 5, 1), "bfloat16": (7, 8, 2), "float32": (23, 8, 2),
                                     "float64": (52, 11, 3)}[dtype]
    top, minus_bottom, special = summary
    bits = 62 - (size - 1).bit_length()
    if special:
        return None
    if top == 0:
        return 1, bits, 0
    span = top + minus_bottom + frac + 1
    if span > 46 * general_limbs or span > 2 * bits:
        return None
    limbs = -(-span // bits)
    return limbs, bits, top - ((1 << (exp_bits - 1)) - 1) + 1 - bits * limbs


def _reproducible_cases(dtype):
    t = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    big = ml_dtypes.finfo(t).max
    cases = [make_inputs(name, size, 257, dtype, seed=size) for name in ("gaussian", "mixed") for size in (2, 3, 9)]
    cases += [spanning(dtype, span, seed=span) for span in edges(dtype) or [11, 20, 29]]
    cases.append(double_rounding_traps(dtype))
    cases.append([np.array([big, -big, big, 0, -0.0, 1], t), np.array([big, -big, -big, 0, -0.0, -1], t)])
    if dtype == "float64":  # results below the normal range: the long way (one limb, then two)
        tiny = np.float64(5e-324)
        for largest in (-1019, -960):
            x = np.arange(-40, 40) * tiny
            x[0] = 2.0 ** largest
            cases.append([x, -x[::-1] + 3 * tiny, np.full_like(x, 2.0 ** -1021)])
    return cases


@pytest.mark.parametrize("dtype", FLOATS)
def test_reproducible_kernels_compiled_for_the_host_give_the_host_bits(tmp_path, dtype):
    """The device's exact mode -- summary, encode on every rank, the limbs summed as int64 (the int64 program's
    pycoll_reduce), decode -- gives the bytes of the host's reproducible all_reduce of the same data."""
    from pycoll.tools.simulate import simulate

    lib = host_library(tmp_path, dtype)
    emask = (1 << {"float16": 5, "bfloat16": 8, "float32": 8, "float64": 11}[dtype]) - 1
    ran = 0
    for inputs in _reproducible_cases(dtype):
        inputs = [np.ascontiguousarray(x) for x in inputs]
        n = len(inputs[0])
        summary = np.array([0, -emask, 0], np.int32)
        for x in inputs:
            lib.pycoll_repro_summary(ptr(x), ctypes.c_longlong(n), ptr(summary))
        plan = _reproducible_plan(summary.tolist(), dtype, len(inputs))
        if plan is None:
            continue
        limbs, bits, base = plan
        total = np.zeros(n * limbs, np.int64)
        for x in inputs:
            encoded = np.empty(n * limbs, np.int64)
            lib.pycoll_repro_encode(ptr(x), ctypes.c_longlong(n), ctypes.c_int(base), ctypes.c_int(bits),
                                    ctypes.c_int(limbs), ptr(encoded))
            total += encoded
        got = np.empty_like(inputs[0])
        lib.pycoll_repro_decode(ptr(total), ctypes.c_longlong(n), ctypes.c_int(base), ctypes.c_int(bits),
                                ctypes.c_int(limbs), ptr(got))
        want = simulate("all_reduce", inputs, accuracy="reproducible")[0]
        assert got.tobytes() == want.tobytes(), (len(inputs), plan, np.flatnonzero(got.view(np.uint8) !=
                                                                                   want.view(np.uint8))[:5])
        ran += 1
    assert ran >= 10, ran  # the rest are the general mode's (infinities)


@pytest.mark.parametrize("dtype", FLOATS)
def test_compensated_kernels_compiled_for_the_host_keep_special_values(tmp_path, dtype):
    """Every ordered pair of special values (float_cases.py's: infinities, NaN, the largest finite and
    sums past it, both zeros) through the device's load, combine and store: fast mode's sums, and the host
    kernels' bits."""
    lib = host_library(tmp_path, dtype)
    v = specials(np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype))
    pairs = (np.ascontiguousarray(np.repeat(v, v.size)), np.ascontiguousarray(np.tile(v, v.size)))
    n = pairs[0].size
    acc = np.float64 if dtype == "float64" else np.float32
    s1, c1, s2, c2 = (np.empty(n, acc) for _ in range(4))
    lib.pycoll_compensated_load(ptr(s1), ptr(c1), ptr(pairs[0]), ctypes.c_longlong(n))
    lib.pycoll_compensated_load(ptr(s2), ptr(c2), ptr(pairs[1]), ctypes.c_longlong(n))
    lib.pycoll_compensated_combine(ptr(s1), ptr(c1), ptr(s2), ptr(c2), ctypes.c_longlong(n))
    ws, wc = kernels.compensated_load(pairs[0])
    kernels.compensated_combine(ws, wc, *kernels.compensated_load(pairs[1]))
    assert s1.tobytes() == ws.tobytes() and c1.tobytes() == wc.tobytes()
    for divisor in (1, 3):
        got, want = np.empty_like(pairs[0]), np.empty_like(pairs[0])
        lib.pycoll_compensated_store(ptr(got), ptr(s1), ptr(c1), ctypes.c_longlong(n), ctypes.c_longlong(divisor))
        kernels.compensated_store(want, ws, wc, divisor)
        assert got.tobytes() == want.tobytes(), divisor
        if divisor == 1:
            with np.errstate(all="ignore"):
                same(got, kernels.reduce(*pairs, "sum"))
