"""The real NVIDIA libraries and headers from the package index (the `gpu` extra: nvidia-nccl-cu12,
nvidia-cuda-nvrtc-cu12, nvidia-cuda-runtime-cu12), for the tests that check pycoll against them without a GPU.

Where one is missing the test skips, saying what to install; with PYCOLL_TEST_REQUIRE_NVIDIA=1 (CI, after installing
the extra) the skip is a failure, so CI cannot pass without running them."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from fakes.vendor_harness import FAKES, compile_shared

REQUIRE = os.environ.get("PYCOLL_TEST_REQUIRE_NVIDIA") == "1"

# wheel package -> (its directory under the `nvidia` namespace, the pip name)
WHEELS = {"nccl": ("nccl", "nvidia-nccl-cu12"), "nvrtc": ("cuda_nvrtc", "nvidia-cuda-nvrtc-cu12"),
          "runtime": ("cuda_runtime", "nvidia-cuda-runtime-cu12"),
          # crt/host_defines.h, which cuda_runtime_api.h includes (the header checks only)
          "nvcc": ("cuda_nvcc", "nvidia-cuda-nvcc-cu12")}


def unavailable(why: str):
    """Skip with a reason, or fail when the NVIDIA wheels are required."""
    if REQUIRE:
        pytest.fail(f"PYCOLL_TEST_REQUIRE_NVIDIA=1, but {why}")
    pytest.skip(why)


def wheel_dir(name: str, *parts: str) -> Path:
    """nvidia/<wheel>/<parts> of an installed NVIDIA wheel that has it, or skip (fail when required)."""
    sub, pip_name = WHEELS[name]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root, sub, *parts)
        if path.exists():
            return path
    unavailable(f"{'/'.join(('nvidia', sub) + parts)} not found: pip install {pip_name} (the `gpu` extra)")


def compiler(language: str = "c") -> str:
    names = ("cc", "gcc") if language == "c" else ("c++", "g++")
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    unavailable(f"no {language} compiler")


def build_fake_cuda_driver(out_dir: Path, async_alloc: bool = True) -> str:
    """tests/fakes/fake_cuda_driver.c built into out_dir (skips the test where there is no C compiler); without
    async_alloc, a driver older than CUDA 11.2: no cuMemAllocAsync / cuMemFreeAsync."""
    old = [] if async_alloc else ["-DFAKE_CUDA_NO_ASYNC_ALLOC"]
    out = compile_shared(out_dir / "libfake_cuda.so", [FAKES / "fake_cuda_driver.c"], old)
    if out is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    return out
