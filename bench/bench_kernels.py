"""Throughput of pycoll's reduction kernels against numpy (and ml_dtypes for bfloat16).

    pytest bench/bench_kernels.py --benchmark-json=bench/results/kernels.json
    python bench/bench_kernels.py bench/results/kernels.json > bench/results/kernels.md

GB/s counts the bytes of one operand per second (n elements of the dtype), so the numbers of every
implementation, compensated or not, compare as times for the same reduction.
"""
import json
import platform
import subprocess
import sys

import numpy as np
import pytest

SIZES = [4 << 10 << (2 * i) for i in range(9)]  # 4 KiB .. 256 MiB
DTYPES = ["float32", "float64", "bfloat16"]
IMPLS = ["numpy_add", "pycoll_sum", "numpy_max", "pycoll_max", "pycoll_compensated_sum"]


def _dtype(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: f"{n >> 10}KiB")
def test_kernel_throughput(benchmark, impl, dtype, nbytes):
    from pycoll import kernels

    dt = _dtype(dtype)
    n = nbytes // dt.itemsize
    rng = np.random.default_rng(0)
    # Values in [1, 2): repeated sums stay normal numbers (no slow subnormals, no overflow to inf).
    a = rng.uniform(1, 2, n).astype(dt)
    b = rng.uniform(1, 2, n).astype(dt)
    if impl == "numpy_add":
        fn = lambda: np.add(a, b, out=a)  # noqa: E731
    elif impl == "numpy_max":
        fn = lambda: np.maximum(a, b, out=a)  # noqa: E731
    elif impl == "pycoll_sum":
        fn = lambda: kernels.reduce_into(a, b, "sum")  # noqa: E731
    elif impl == "pycoll_max":
        fn = lambda: kernels.reduce_into(a, b, "max")  # noqa: E731
    else:
        dst, src = kernels.compensated_load(a), kernels.compensated_load(b)
        fn = lambda: kernels.compensated_combine(dst[0], dst[1], src[0], src[1])  # noqa: E731
        del a, b
    benchmark.extra_info.update(nbytes=nbytes, dtype=dtype, impl=impl, simd=kernels.simd_name())
    benchmark(fn)


def _machine():
    try:
        model = next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    import os
    return model, os.cpu_count()


def report(path):
    """bench/results/kernels.md from a --benchmark-json file."""
    with open(path) as f:
        data = json.load(f)
    rows = {}
    simd = "?"
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        simd = info["simd"]
        rows.setdefault((info["dtype"], info["nbytes"]), {})[info["impl"]] = bench["stats"]["median"]
    model, cores = _machine()
    import ml_dtypes
    out = ["# Reduction kernel throughput", "",
           f"Machine: {model}, {cores} cores; kernels: `{simd}`. Python {platform.python_version()}, "
           f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
           f"pytest-benchmark {data.get('version', '?')}.", "",
           "Command: `pytest bench/bench_kernels.py --benchmark-json=bench/results/kernels.json && "
           "python bench/bench_kernels.py bench/results/kernels.json > bench/results/kernels.md`", "",
           "GB/s = bytes of one operand / median time. `x numpy` = numpy time / pycoll time (> 1: pycoll "
           "faster). `comp/sum` = compensated combine time / plain sum time (pairs move twice the bytes).", ""]
    for dtype in DTYPES:
        out += [f"## {dtype}", "",
                "| size | numpy add GB/s | pycoll sum GB/s | x numpy | numpy max GB/s | pycoll max GB/s | x numpy "
                "| compensated GB/s | comp/sum |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for nbytes in SIZES:
            t = rows.get((dtype, nbytes))
            if not t or len(t) < len(IMPLS):
                continue
            gbs = {k: nbytes / v / 1e9 for k, v in t.items()}
            size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
            out.append(f"| {size} | {gbs['numpy_add']:.2f} | {gbs['pycoll_sum']:.2f} | "
                       f"{t['numpy_add'] / t['pycoll_sum']:.2f} | {gbs['numpy_max']:.2f} | {gbs['pycoll_max']:.2f} | "
                       f"{t['numpy_max'] / t['pycoll_max']:.2f} | {gbs['pycoll_compensated_sum']:.2f} | "
                       f"{t['pycoll_compensated_sum'] / t['pycoll_sum']:.2f} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(sys.argv[1]))
