"""The SIMD variants of the host kernels this CPU supports, and a Python process run under one of them
(PYCOLL_SIMD is read once per process, so each variant needs a process of its own)."""

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


def run_under_variant(variant, args, timeout):
    """`python *args` with PYCOLL_SIMD=variant, from tests/ so that the installed pycoll is imported, not the
    source folder; skips the variant this process runs already."""
    if variant == kernels.simd_name():
        pytest.skip("the default variant runs in this process")
    return subprocess.run([sys.executable, *args], cwd=HERE, env=dict(os.environ, PYCOLL_SIMD=variant),
                          capture_output=True, text=True, timeout=timeout)
