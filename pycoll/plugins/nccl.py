"""The NCCL backend: collectives on NVIDIA GPUs through libnccl.so.2, loaded at run time (no CUDA at build time).

Where NCCL comes from, first found wins: PYCOLL_NCCL_LIBRARY; the nvidia-nccl-cu12 / -cu13 wheels
(nvidia/nccl/lib); the system's libnccl.so.2. The CUDA runtime (to wait on streams) likewise:
PYCOLL_CUDART_LIBRARY; the nvidia-cuda-runtime wheels; the system's libcudart.

accuracy="compensated" runs pycoll's ring over ncclSend/ncclRecv with the arithmetic on the device
(pycoll.plugins.device_ring); everything else is NCCL's own collectives.
"""

from __future__ import annotations

import importlib.util
import os

from pycoll import plugins
from pycoll.plugins import device_ring
from pycoll.plugins.vendor import VendorBackend, VendorEngine, current_stream, load_first

# pycoll algorithm -> NCCL_ALGO while that communicator is created. NCCL has no halving-doubling or recursive
# doubling; Tree (a double binary tree, also log-depth) is the nearest. "mesh" means the one-hop algorithms
# (NVLink SHARP, CollNet); NCCL fails the collective where the machine has neither.
NCCL_ALGORITHMS = {
    "auto": None,
    "ring": "Ring",
    "halving_doubling": "Tree",
    "recursive_doubling": "Tree",
    "mesh": "NVLS,CollNetDirect",
}

_SUM, _AVG = 0, 4


def _wheel_dirs(*parts):
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    return [os.path.join(root, *parts) for root in roots]


def nccl_candidates():
    if os.environ.get("PYCOLL_NCCL_LIBRARY"):
        return [os.environ["PYCOLL_NCCL_LIBRARY"]]
    wheels = _wheel_dirs("nccl", "lib", "libnccl.so.2") + _wheel_dirs("cu13", "lib", "libnccl.so.2")
    return [p for p in wheels if os.path.exists(p)] + ["libnccl.so.2"]


def cudart_candidates():
    if os.environ.get("PYCOLL_CUDART_LIBRARY"):
        return [os.environ["PYCOLL_CUDART_LIBRARY"]]
    wheels = (_wheel_dirs("cuda_runtime", "lib", "libcudart.so.12") + _wheel_dirs("cu13", "lib", "libcudart.so.13"))
    return [p for p in wheels if os.path.exists(p)] + ["libcudart.so.12", "libcudart.so.13", "libcudart.so"]


def load():
    """None when NCCL and the CUDA runtime are loaded, else why not and what to install or set."""
    from pycoll._bindings import vendor as _vendor
    why = load_first(_vendor.nccl_load, nccl_candidates())
    if why:
        return (f"libnccl.so.2 not found -- pip install nvidia-nccl-cu12 (or set PYCOLL_NCCL_LIBRARY) [{why}]")
    why = load_first(_vendor.cudart_load, cudart_candidates())
    if why:
        return (f"the CUDA runtime (libcudart) was not found -- pip install nvidia-cuda-runtime-cu12 "
                f"(or set PYCOLL_CUDART_LIBRARY) [{why}]")
    return None


class NcclEngine(VendorEngine):
    name = "nccl"
    algorithm_env = "NCCL_ALGO"
    algorithm_settings = NCCL_ALGORITHMS

    def _new_id(self):
        from pycoll._bindings import vendor as _vendor
        return _vendor.nccl_unique_id()

    def _new_comm(self, unique_id):
        from pycoll._bindings import vendor as _vendor
        return _vendor.NcclComm(unique_id, self.rank, self.size, self.timeout)

    def _check_device(self, buf):
        device = self._comm("auto").device
        if buf.device_id != device:
            raise ValueError(f"the array is on cuda:{buf.device_id}, but this rank's NCCL communicator is on "
                             f"cuda:{device} (set the device before pycoll.init)")

    @staticmethod
    def _compensates(buf, op, accuracy):
        """Compensated mode applies to float sums and averages; anything else is exact or has no compensated
        form, so it runs as NCCL's own (as the C algorithms do)."""
        return accuracy == "compensated" and buf.dtype in device_ring.COMPENSATED_DTYPES and op in (_SUM, _AVG)

    def all_reduce(self, send, recv, op, algorithm, accuracy):
        self._check_device(recv)
        if self._compensates(recv, op, accuracy):
            # pycoll's ring whatever the algorithm asked for: the compensated result does not depend on it.
            device_ring.ring_all_reduce(self._comm(algorithm), send, recv, op, self.rank, self.size,
                                        current_stream(recv.owner))
            return "ring"
        return super().all_reduce(send, recv, op, algorithm, "fast")

    def reduce_scatter(self, send, recv, op, algorithm, accuracy):
        self._check_device(recv)
        if self._compensates(recv, op, accuracy):
            device_ring.ring_reduce_scatter(self._comm(algorithm), send, recv, op, self.rank, self.size,
                                            current_stream(recv.owner))
            return "ring"
        return super().reduce_scatter(send, recv, op, algorithm, "fast")

    def all_gather(self, send, recv):
        self._check_device(recv)
        return super().all_gather(send, recv)

    def broadcast(self, buf, root):
        self._check_device(buf)
        return super().broadcast(buf, root)

    def reduce(self, send, recv, op, root, accuracy):
        self._check_device(send)
        if self._compensates(send, op, accuracy):
            device_ring.ring_reduce(self._comm("auto"), send, recv, op, root, self.rank, self.size,
                                    current_stream(send.owner))
            return "ring"
        return super().reduce(send, recv, op, root, "fast")


class NcclBackend(VendorBackend):
    engine = NcclEngine
    name = "nccl"
    memory = "cuda"
    algorithms = tuple(NCCL_ALGORITHMS)
    accuracies = ("fast", "compensated")

    def load(self):
        return load()


plugins.register(NcclBackend())
