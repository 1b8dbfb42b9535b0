"""The HCCL backend: collectives on Ascend NPUs (torch_npu tensors) through libhccl.so, loaded at run time.

Where HCCL comes from, first found wins: PYCOLL_HCCL_LIBRARY; $ASCEND_HOME_PATH/lib64 (set by CANN's
set_env.sh); /usr/local/Ascend/ascend-toolkit/latest/lib64; the system loader's libhccl.so. AscendCL
(libascendcl.so, to wait on streams) likewise, or PYCOLL_ACL_LIBRARY.
"""

from __future__ import annotations

import math
import os

from pycoll import plugins
from pycoll.plugins.vendor import VendorBackend, VendorEngine, divide_in_place, load_first

_AVG = 4
_SUM = 0

# pycoll algorithm -> HCCL_ALGO while that communicator is created (level0: inside a server, level1: between
# servers; NA leaves level0 to HCCL). Check the names your CANN version accepts.
HCCL_ALGORITHMS = {
    "auto": None,
    "ring": "level0:NA;level1:ring",
    "halving_doubling": "level0:NA;level1:H-D_R",
    "recursive_doubling": "level0:NA;level1:H-D_R",
    "mesh": "level0:NA;level1:fullmesh",
}


def _dirs():
    dirs = [os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64")] if os.environ.get("ASCEND_HOME_PATH") else []
    return dirs + ["/usr/local/Ascend/ascend-toolkit/latest/lib64", "/usr/local/Ascend/latest/lib64"]


def _candidates(env, name):
    if os.environ.get(env):
        return [os.environ[env]]
    return [p for p in (os.path.join(d, name) for d in _dirs()) if os.path.exists(p)] + [name]


def load():
    """None when HCCL and AscendCL are loaded, else why not and what to install or set."""
    from pycoll._bindings import vendor as _vendor
    why = load_first(_vendor.hccl_load, _candidates("PYCOLL_HCCL_LIBRARY", "libhccl.so"))
    if why:
        return (f"libhccl.so not found -- install the CANN toolkit and source its set_env.sh "
                f"(or set PYCOLL_HCCL_LIBRARY) [{why}]")
    why = load_first(_vendor.acl_load, _candidates("PYCOLL_ACL_LIBRARY", "libascendcl.so"))
    if why:
        return f"libascendcl.so not found -- install the CANN toolkit (or set PYCOLL_ACL_LIBRARY) [{why}]"
    return None


class HcclEngine(VendorEngine):
    """HCCL has no average: avg runs as a sum, then one division on the device through the array's own
    framework (torch: div_ for floats, trunc division for integers), on the rank(s) holding the result."""

    name = "hccl"
    algorithm_env = "HCCL_ALGO"
    algorithm_settings = HCCL_ALGORITHMS

    def __init__(self, *, rank, world_size, store, timeout, options):
        # HCCL's init blocks; HCCL_CONNECT_TIMEOUT (whole seconds) is its only bound, so it follows ours
        # unless the user set it.
        os.environ.setdefault("HCCL_CONNECT_TIMEOUT", str(max(1, math.ceil(float(timeout)))))
        super().__init__(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)

    def _new_id(self):
        from pycoll._bindings import vendor as _vendor
        return _vendor.hccl_root_info()

    def _new_comm(self, root_info):
        from pycoll._bindings import vendor as _vendor
        return _vendor.HcclComm(root_info, self.rank, self.size, self.timeout)

    def all_reduce(self, send, recv, op, algorithm, accuracy):
        ran = super().all_reduce(send, recv, _SUM if op == _AVG else op, algorithm, accuracy)
        if op == _AVG:
            divide_in_place(recv, self.size)
        return ran

    def reduce_scatter(self, send, recv, op, algorithm, accuracy):
        ran = super().reduce_scatter(send, recv, _SUM if op == _AVG else op, algorithm, accuracy)
        if op == _AVG:
            divide_in_place(recv, self.size)
        return ran

    def reduce(self, send, recv, op, root, accuracy):
        ran = super().reduce(send, recv, _SUM if op == _AVG else op, root, accuracy)
        if op == _AVG and self.rank == root:
            divide_in_place(recv, self.size)
        return ran


class HcclBackend(VendorBackend):
    engine = HcclEngine
    name = "hccl"
    memory = "npu"
    algorithms = tuple(HCCL_ALGORITHMS)

    def load(self):
        return load()


plugins.register(HcclBackend())
