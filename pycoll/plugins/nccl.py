"""The NCCL backend: collectives on NVIDIA GPUs through libnccl.so.2, loaded at run time (no CUDA at build time).

Where NCCL comes from, first found wins: PYCOLL_NCCL_LIBRARY; the nvidia-nccl-cu12 / -cu13 wheels
(nvidia/nccl/lib); the system's libnccl.so.2. The CUDA runtime (to wait on streams) likewise:
PYCOLL_CUDART_LIBRARY; the nvidia-cuda-runtime wheels; the system's libcudart.

accuracy="compensated" runs pycoll's ring over ncclSend/ncclRecv with the arithmetic on the device; everything
else is NCCL's own collectives. The engine is pycoll.plugins.vendor's; this module only declares NCCL.
"""

from __future__ import annotations

import importlib.util
import os

from pycoll import plugins
from pycoll.plugins.vendor import VendorBackend, library_candidates

# pycoll algorithm -> NCCL_ALGO while that communicator is created (NCCL reads it at creation). NCCL runs Ring for
# every collective; its other algorithms are each for some collectives only (src/enqueue.cc: broadcast and reduce
# run Ring only; all_gather and reduce_scatter Ring, PAT, NVLS, CollNetDirect) and none is halving-doubling,
# recursive doubling or a mesh, and a communicator left with no algorithm a collective can run fails it with
# ncclInvalidUsage, sticky on a non-blocking communicator. So NCCL runs "auto" (its own choice) and "ring"
# (all_reduce, reduce_scatter); the other pycoll algorithms run as pycoll's own schedules over ncclSend/ncclRecv
# (NCCL_OWN_ALGORITHMS), and the call reports the one that ran.
NCCL_ALGORITHMS = {
    "auto": None,
    "ring": "Ring",
}
NCCL_OWN_ALGORITHMS = {
    "all_reduce": ("halving_doubling", "recursive_doubling", "mesh"),
    "reduce_scatter": ("halving_doubling", "mesh"),  # pycoll has no recursive-doubling reduce_scatter
}


def _wheel_dirs(*parts):
    """nvidia/<parts> in every installed `nvidia` namespace package (the nvidia-*-cu12/-cu13 wheels)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    return [os.path.join(root, *parts) for root in roots]


def nccl_candidates():
    dirs = _wheel_dirs("nccl", "lib") + _wheel_dirs("cu13", "lib")
    return library_candidates("PYCOLL_NCCL_LIBRARY", ["libnccl.so.2"], dirs)


def cudart_candidates():
    return library_candidates("PYCOLL_CUDART_LIBRARY", ["libcudart.so.12", "libcudart.so.13", "libcudart.so"],
                              _wheel_dirs("cuda_runtime", "lib") + _wheel_dirs("cu13", "lib"))


def nvrtc_candidates():
    return library_candidates("PYCOLL_NVRTC_LIBRARY", ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"],
                              _wheel_dirs("cuda_nvrtc", "lib") + _wheel_dirs("cu13", "lib"))


def cuda_driver_candidates():
    """The driver comes with the GPU's kernel driver, never in a wheel."""
    return library_candidates("PYCOLL_CUDA_DRIVER_LIBRARY", ["libcuda.so.1", "libcuda.so"])


class NcclBackend(VendorBackend):
    name = "nccl"
    memory = "cuda"
    libraries = (
        (nccl_candidates, "libnccl.so.2 not found -- pip install nvidia-nccl-cu12 (or set PYCOLL_NCCL_LIBRARY) "
                          "[{why}]"),
        (cudart_candidates, "the CUDA runtime (libcudart) was not found -- pip install nvidia-cuda-runtime-cu12 "
                            "(or set PYCOLL_CUDART_LIBRARY) [{why}]"),
    )
    # Compensated mode on GPU memory: pycoll's kernels, compiled with NVRTC, launched through the driver.
    device_kernel_libraries = (
        (nvrtc_candidates, "NVRTC (libnvrtc), which compiles pycoll's CUDA kernels, was not found -- pip install "
                           "nvidia-cuda-nvrtc-cu12 (or set PYCOLL_NVRTC_LIBRARY) [{why}]"),
        (cuda_driver_candidates, "the CUDA driver (libcuda.so.1), which launches pycoll's CUDA kernels, was not "
                                 "found -- install the NVIDIA driver (or set PYCOLL_CUDA_DRIVER_LIBRARY) [{why}]"),
    )
    algorithm_env = "NCCL_ALGO"
    algorithm_settings = NCCL_ALGORITHMS
    own_algorithms = NCCL_OWN_ALGORITHMS
    algorithms = ("auto", "ring", "halving_doubling", "recursive_doubling", "mesh")
    accuracies = ("fast", "compensated")
    # NCCL reduces every pycoll dtype with every op (nccl.h: ncclBfloat16 and ncclAvg since 2.10): nothing refused.
    refusals = ()


plugins.register(NcclBackend())
