"""The real libnccl.so.2 (nvidia-nccl-cu12) and CUDA runtime (nvidia-cuda-runtime-cu12) through pycoll, on a
machine without a GPU: found where pycoll looks (the wheels' directories), loaded with every symbol pycoll needs,
its version read, a unique id made, its ncclCommShrink / ncclCommRevoke / ncclCommGrow found (so a shrinking
island takes the shrink path); and because there is no device, pycoll.backends() reports nccl present but
unusable, naming the version and "no CUDA device", and init raises BackendUnavailable saying so. Each check runs in
a fresh process: a library pycoll loads stays loaded, and the other NCCL tests load a fake one."""

import json
import os
import subprocess
import sys

import pytest
from nvidia_wheels import wheel_dir

CHECK = r"""
import json, pycoll
from pycoll._bindings import vendor
from pycoll.errors import BackendUnavailable, PycollError
from pycoll.plugins.nccl import NcclBackend, nccl_candidates

out = {"candidates": nccl_candidates()}
status = {s.name: s for s in pycoll.backends()}["nccl"]
out["usable"], out["reason"] = status.usable, status.reason
backend = NcclBackend()
out["load"] = backend.load()
out["loaded"] = backend.loaded
out["version"] = backend.nccl_version()
out["devices"] = backend.device_count()
v = vendor.Vendor("nccl")
uid = v.unique_id()
out["uid"] = [len(uid), uid != v.unique_id(), any(uid)]
try:
    pycoll.init(backend="nccl", rank=0, world_size=1, timeout=10)
    out["init"] = None
except BackendUnavailable as exc:
    out["init"] = str(exc)
# Below pycoll's device check: the real ncclCommInitRankConfig, non-blocking, without a device, fails cleanly.
try:
    v.comm(uid, 0, 1, 5.0)
    out["comm"] = None
except PycollError as exc:
    out["comm"] = [type(exc).__name__, str(exc)]
# ncclCommShrink, ncclCommRevoke, ncclCommGrow (NCCL 2.27+) found by the loader, and the engine's choice of how a
# shrunk island's communicator is made (islands/shrink.py asks can_shrink()): through the vendor's shrink.
from pycoll.plugins.vendor import VendorEngine
out["fault_tolerance"] = sorted(v.fault_tolerance())
engine = VendorEngine.__new__(VendorEngine)
engine.vendor = v
out["can_shrink"] = engine.can_shrink()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def real():
    nccl_lib = wheel_dir("nccl", "lib")
    wheel_dir("runtime", "lib")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYCOLL_NCCL", "PYCOLL_CUDART", "FAKE_"))}
    done = subprocess.run([sys.executable, "-P", "-c", CHECK], env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    if out["devices"][0]:  # not a missing package: never a failure, even where the wheels are required
        pytest.skip("a CUDA device is present: these checks are of a machine without one")
    out["wheel_lib"] = str(nccl_lib / "libnccl.so.2")
    return out


def test_the_wheel_library_is_found_and_loaded(real):
    assert real["candidates"][0] == real["wheel_lib"]  # the wheel's copy first, then the loader's search
    assert "libnccl.so.2" in real["candidates"]
    assert real["load"] is None
    assert real["loaded"]["0"] == real["wheel_lib"]


def test_its_version_is_read(real):
    import importlib.metadata

    wheel = importlib.metadata.version("nvidia-nccl-cu12")
    assert real["version"] and wheel.startswith(real["version"]), (real["version"], wheel)


def test_a_unique_id_is_made_without_a_device(real):
    size, differs, nonzero = real["uid"]
    assert size == 128 and differs and nonzero


def test_backends_reports_nccl_present_but_unusable(real):
    assert real["usable"] is False
    reason = real["reason"]
    assert reason.startswith("no CUDA device")
    assert f"NCCL {real['version']}" in reason and real["wheel_lib"] in reason
    assert "cudaGetDeviceCount" in reason


def test_init_raises_backend_unavailable_naming_no_cuda_device(real):
    assert real["init"] is not None and real["init"].startswith("nccl: no CUDA device"), real["init"]


def test_the_real_init_fails_cleanly_without_a_device(real):
    kind, message = real["comm"]
    assert kind == "PycollError"
    assert "ncclCommInitRankConfig" in message and "unhandled cuda error" in message, message


def test_its_shrink_revoke_and_grow_are_found_and_the_shrink_path_is_chosen(real):
    assert real["fault_tolerance"] == ["grow", "revoke", "shrink"], real["fault_tolerance"]
    assert real["can_shrink"] is True
