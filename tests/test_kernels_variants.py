"""Rerun the kernel tests under every SIMD variant this CPU supports (PYCOLL_SIMD is read once per process,
so each variant gets its own pytest process)."""
import os
import subprocess
import sys

import pytest

from pycoll import kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def supported_variants():
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split())
    except (OSError, StopIteration):
        flags = set()
    variants = ["scalar"]
    if {"avx2", "f16c"} <= flags:
        variants.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl"} <= flags:
            variants.append("avx512")
    return variants


@pytest.mark.skipif("PYCOLL_SIMD" in os.environ, reason="already running under a forced variant")
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.timeout(90)
def test_kernels_under_variant(variant):
    if variant == kernels.simd_name():
        pytest.skip("the default variant runs in this process")
    env = dict(os.environ, PYCOLL_SIMD=variant)
    tests = [os.path.join(HERE, name) for name in ("test_kernels.py", "test_kernels_compensated.py")]
    # Run from tests/ so the installed pycoll is imported, not the source folder.
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                            cwd=HERE, env=env, capture_output=True, text=True, timeout=85)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
