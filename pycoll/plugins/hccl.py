"""The HCCL backend: collectives on Ascend NPUs (torch_npu tensors) through libhccl.so, loaded at run time.

Where HCCL comes from, first found wins: PYCOLL_HCCL_LIBRARY; $ASCEND_HOME_PATH/lib64 (set by CANN's
set_env.sh); /usr/local/Ascend/ascend-toolkit/latest/lib64; the system loader's libhccl.so. AscendCL
(libascendcl.so, to wait on streams) likewise, or PYCOLL_ACL_LIBRARY.

HCCL has no average: avg runs as a sum, then one division on the device through the array's own framework
(torch: div_ for floats, trunc division for integers), on the rank(s) holding the result. The engine is
pycoll.plugins.vendor's; this module only declares HCCL.
"""

from __future__ import annotations

import math
import os

from pycoll import plugins
from pycoll.plugins.vendor import VendorBackend, library_candidates

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


class HcclBackend(VendorBackend):
    name = "hccl"
    memory = "npu"
    libraries = (
        (lambda: library_candidates("PYCOLL_HCCL_LIBRARY", ["libhccl.so"], _dirs()),
         "libhccl.so not found -- install the CANN toolkit and source its set_env.sh (or set PYCOLL_HCCL_LIBRARY) "
         "[{why}]"),
        (lambda: library_candidates("PYCOLL_ACL_LIBRARY", ["libascendcl.so"], _dirs()),
         "libascendcl.so not found -- install the CANN toolkit (or set PYCOLL_ACL_LIBRARY) [{why}]"),
    )
    algorithm_env = "HCCL_ALGO"
    algorithm_settings = HCCL_ALGORITHMS
    algorithms = tuple(HCCL_ALGORITHMS)
    native_avg = False

    def create(self, *, rank, world_size, store, timeout, options):
        # HCCL's init blocks; HCCL_CONNECT_TIMEOUT (whole seconds) is its only bound, so it follows ours
        # unless the user set it.
        os.environ.setdefault("HCCL_CONNECT_TIMEOUT", str(max(1, math.ceil(float(timeout)))))
        return super().create(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)


plugins.register(HcclBackend())
