"""The NCCL backend: collectives on NVIDIA GPUs through libnccl.so.2, loaded at run time (no CUDA at build time).

Where NCCL comes from, first found wins: PYCOLL_NCCL_LIBRARY; the nvidia-nccl-cu12 / -cu13 wheels
(nvidia/nccl/lib); the system's libnccl.so.2. The CUDA runtime (to wait on streams) likewise:
PYCOLL_CUDART_LIBRARY; the nvidia-cuda-runtime wheels; the system's libcudart.

accuracy="compensated" and accuracy="reproducible" (its exact mode: backends/README.md) run pycoll's ring over
ncclSend/ncclRecv with the arithmetic on the device; everything else is NCCL's own collectives. The engine is
pycoll.plugins.vendor's; this module only declares NCCL.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os

from pycoll import plugins
from pycoll.algorithms import COLL_ALGORITHMS, HOST_ALGORITHMS, NATIVE_ONLY
from pycoll.errors import BackendUnavailable
from pycoll.plugins.vendor import VendorBackend, library_candidates, load_first, load_libraries

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
# pycoll's schedules of each collective that NCCL lacks, from its algorithm table: not the transport's own
# (NCCL is the transport) and not those that span hosts by a host map (a vendor communicator has none).
NCCL_OWN_ALGORITHMS = {
    coll: tuple(name for name in COLL_ALGORITHMS[coll]
                if name not in NCCL_ALGORITHMS and name not in NATIVE_ONLY and name not in HOST_ALGORITHMS)
    for coll in ("all_reduce", "reduce_scatter")
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


_driver_missing = []  # [why] once the driver was looked for: a failed dlopen does not start working later


def load_cuda_driver():
    """None when the CUDA driver (libcuda) is loaded into pycoll, else why not (looked for once per process)."""
    if not _driver_missing:
        from pycoll._bindings import vendor as _vendor
        _driver_missing.append(load_first(lambda path: _vendor.cuda_kernels_load(1, path),
                                          cuda_driver_candidates()))
    return _driver_missing[0]


# Where each launcher puts a rank's index on its host (pycoll/rendezvous/launch_env.py), first found wins.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                        "SLURM_LOCALID")


def local_rank():
    """(the variable, its value) of this rank's index on its host, or None where no launcher set one."""
    for name in LOCAL_RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.strip().isdigit():
            return name, int(value)
    return None


class NcclBackend(VendorBackend):
    name = "nccl"
    memory = "cuda"
    libraries = (
        (nccl_candidates, "libnccl.so.2 not found -- pip install nvidia-nccl-cu12 (or set PYCOLL_NCCL_LIBRARY) "
                          "[{why}]"),
        (cudart_candidates, "the CUDA runtime (libcudart) was not found -- pip install nvidia-cuda-runtime-cu12 "
                            "(or set PYCOLL_CUDART_LIBRARY) [{why}]"),
    )
    # Compensated and reproducible modes on GPU memory: pycoll's kernels, compiled with NVRTC, launched through the
    # driver.
    device_kernel_libraries = (
        (nvrtc_candidates, "NVRTC (libnvrtc), which compiles pycoll's CUDA kernels, was not found -- pip install "
                           "nvidia-cuda-nvrtc-cu12 (or set PYCOLL_NVRTC_LIBRARY) [{why}]"),
        (cuda_driver_candidates, "the CUDA driver (libcuda.so.1), which launches pycoll's CUDA kernels, was not "
                                 "found -- install the NVIDIA driver (or set PYCOLL_CUDA_DRIVER_LIBRARY) [{why}]"),
    )
    algorithm_env = "NCCL_ALGO"
    algorithm_settings = NCCL_ALGORITHMS
    own_algorithms = NCCL_OWN_ALGORITHMS
    algorithms = tuple(dict.fromkeys([*NCCL_ALGORITHMS, *(a for own in NCCL_OWN_ALGORITHMS.values() for a in own)]))
    accuracies = ("fast", "compensated", "reproducible")
    # NCCL reduces every pycoll dtype with every op (nccl.h: ncclBfloat16 and ncclAvg since 2.10): nothing refused.
    refusals = ()

    # library index -> the path it was loaded from: per process, as the libraries are (the first load stays).
    loaded: dict = {}

    def load(self):
        """None when NCCL and the CUDA runtime are loaded, else why not; remembers where each came from."""
        from pycoll._bindings import vendor as _vendor

        vendor = _vendor.Vendor(self.name)

        def loader(library, path):
            why = vendor.load(library, path)
            if why is None:
                self.loaded.setdefault(library, path)
            return why

        return load_libraries(self.libraries, loader)

    def nccl_version(self):
        """The loaded NCCL's version, "2.32.3" ("" when none is loaded)."""
        from pycoll._bindings import vendor as _vendor

        code = _vendor.Vendor(self.name).library_version()
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}" if code else ""

    def device_count(self):
        """(the number of CUDA devices the loaded CUDA runtime sees, why none): cudaGetDeviceCount's answer."""
        path = self.loaded.get(1)
        if path is None:
            return 0, "the CUDA runtime is not loaded"
        runtime = ctypes.CDLL(path)  # the library pycoll loaded (dlopen gives the same handle)
        count_fn = getattr(runtime, "cudaGetDeviceCount", None)
        if count_fn is None:
            return 0, f"{path} has no cudaGetDeviceCount"
        count = ctypes.c_int(0)
        result = count_fn(ctypes.byref(count))
        if result == 0 and count.value > 0:
            return count.value, ""
        text = ""
        error_string = getattr(runtime, "cudaGetErrorString", None)
        if error_string is not None:
            error_string.restype = ctypes.c_char_p
            text = (error_string(result) or b"").decode(errors="replace")
        return 0, f"cudaGetDeviceCount: {text or 'no devices'} (cudaError {result})"

    def probe(self):
        """Usable only with the libraries loaded and a CUDA device present: on a machine without a GPU, NCCL and the
        runtime load (the wheels install anywhere) but every communicator would fail, so the reason names both."""
        reason = super().probe()
        if reason:
            return reason
        count, why = self.device_count()
        if count:
            return None
        return (f"no CUDA device: NCCL {self.nccl_version()} ({self.loaded.get(0)}) and the CUDA runtime "
                f"({self.loaded.get(1)}) are installed, but {why} -- run on a machine with an NVIDIA GPU and its "
                f"driver (check nvidia-smi and CUDA_VISIBLE_DEVICES)")

    def current_device(self):
        """The device the CUDA runtime uses on this thread (cudaGetDevice): the one NCCL's communicator takes."""
        runtime = ctypes.CDLL(self.loaded[1])
        device = ctypes.c_int(-1)
        return device.value if runtime.cudaGetDevice(ctypes.byref(device)) == 0 else -1

    def check_device_choice(self):
        """Refuse a rank that never chose its GPU: with several visible, every such rank of a host takes GPU 0 and
        NCCL fails (or, worse, they share it). A rank the launcher numbers > 0 on its host must have set another
        (one GPU per rank through CUDA_VISIBLE_DEVICES makes that GPU 0 of one: nothing to choose then)."""
        local = local_rank()
        if local is None or local[1] == 0:
            return
        count, _ = self.device_count()
        if count > 1 and self.current_device() == 0:
            name, value = local
            raise ValueError(
                f"nccl: this rank has {name}={value} but uses GPU 0 of the {count} it sees, as every rank that "
                f"never sets its device does, so the ranks of this host would share GPU 0: set the device before "
                f"pycoll.init (torch.cuda.set_device(int(os.environ['{name}'])), or "
                f"cupy.cuda.Device(int(os.environ['{name}'])).use()), or give each rank one GPU with "
                f"CUDA_VISIBLE_DEVICES")

    def create(self, *, rank, world_size, store, timeout, options):
        reason = self.probe()
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        self.check_device_choice()
        return super().create(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)


plugins.register(NcclBackend())
