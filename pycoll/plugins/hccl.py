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
import warnings

from pycoll import plugins
from pycoll.plugins.vendor import VendorBackend, env_setting, library_candidates
from pycoll.plugins.vendor_capabilities import REDUCTIONS, Refusal

# HCCL reads HCCL_ALGO once per process (and per collective on newer paths), not per communicator, and
# HcclCommConfig has no algorithm: an HCCL_ALGO set around one communicator's creation is silently ignored. So
# pycoll offers only HCCL's own choice, "auto", and reports that; to steer HCCL, set HCCL_ALGO for the whole
# job before it starts.
HCCL_ALGORITHMS = {"auto": None}

# HCCL_CONNECT_TIMEOUT's documented range, in seconds: HCCL refuses a value outside it.
HCCL_CONNECT_TIMEOUT_RANGE = (120, 7200)

# What HCCL refuses (hccl_types.h's HcclDataType; src/ops' dtype checks): HCCL_E_NOT_SUPPORT, synchronously.
HCCL_REFUSALS = (
    Refusal(REDUCTIONS, "uint8", None, None, "HCCL reduces no uint8 (HCCL_E_NOT_SUPPORT)"),
    # HCCL's API reference (CANN 9.0, HcclAllReduce/HcclReduceScatter/HcclReduce dataType): float64 reductions on
    # Ascend 950PR/950DT (Atlas 350) only, within one node; Atlas A3, A2 and 910 list none. hccl_types.h's
    # HCCL_DATA_TYPE_FP64 is 10 (backends/hccl/hccl_api.h).
    Refusal(REDUCTIONS, "float64", None, None, "only Ascend 950 parts reduce float64, and within one node (CANN "
            "9.0's HCCL; others: HCCL_E_NOT_SUPPORT)", unless="Ascend 950"),
    Refusal(REDUCTIONS, "bfloat16", None, "Atlas 910", "Atlas 910 (Ascend910A/Pro) has no bfloat16 (only Atlas A2 "
            "and A3 do) (HCCL_E_NOT_SUPPORT)"),
    Refusal(REDUCTIONS, "bfloat16", "prod", None, "HCCL has no prod on bfloat16 (HCCL_E_NOT_SUPPORT)"),
)


def device_generation(soc_name: str) -> str:
    """The Ascend generation of aclrtGetSocName()'s model: "Ascend 950" (Ascend950*), "Atlas A2/A3" (Ascend910B*,
    Ascend910_93*), else "Atlas 910" for the other Ascend910 models, else the name itself."""
    if soc_name.startswith("Ascend950"):
        return "Ascend 950"
    if soc_name.startswith(("Ascend910B", "Ascend910_93")):
        return "Atlas A2/A3"
    if soc_name.startswith("Ascend910"):
        return "Atlas 910"
    return soc_name


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
    algorithm_hint = (" (HCCL reads HCCL_ALGO once per process, not per communicator: set it for the whole job "
                      "before it starts)")
    algorithms = tuple(HCCL_ALGORITHMS)
    native_avg = False
    refusals = HCCL_REFUSALS

    @staticmethod
    def device_generation(soc_name):
        return device_generation(soc_name)

    # The HCCL_CONNECT_TIMEOUT this process's HCCL read at its first communicator (None before it): HCCL reads
    # its environment once per process, so that value bounds every later init too.
    _connect_timeout = None

    def init_settings(self, timeout):
        """HCCL's init blocks; HCCL_CONNECT_TIMEOUT (whole seconds, within its documented range) is its only
        bound, and HCCL reads it once per process. So it is set (clamped to the range) around the process's first
        HCCL communicator only, from that communicator's `timeout`, unless the user set it; a later communicator
        whose timeout would give another value gets a warning saying which value HCCL still uses."""
        user = os.environ.get("HCCL_CONNECT_TIMEOUT")
        low, high = HCCL_CONNECT_TIMEOUT_RANGE
        wanted = str(min(high, max(low, math.ceil(float(timeout)))))
        read = HcclBackend._connect_timeout
        if read is None:
            HcclBackend._connect_timeout = user or wanted
            return env_setting("HCCL_CONNECT_TIMEOUT", None if user else wanted)
        if not user and wanted != read:
            warnings.warn(f"hccl: this communicator's timeout ({timeout:g} s) would set HCCL_CONNECT_TIMEOUT={wanted}, "
                          f"but HCCL reads it once per process and keeps {read} s from its first communicator; set "
                          f"HCCL_CONNECT_TIMEOUT for the whole job to choose it", RuntimeWarning, stacklevel=2)
        return env_setting("HCCL_CONNECT_TIMEOUT", None)


plugins.register(HcclBackend())
