"""Which GPU a rank's arrays and communicator are on, against fakes: an array exporting only the CUDA array
interface (which has no device field) is placed by the driver (cuPointerGetAttribute), not taken as device 0; and
a rank its launcher numbers > 0 on its host that never set a device (so every such rank would take GPU 0) is
refused before NCCL is initialised, naming the launcher's variable. Each case runs in a fresh process: the
libraries pycoll loads stay loaded."""

import os
import subprocess
import sys

import pytest
from fakes.vendor_harness import build_fake
from nvidia_wheels import build_fake_cuda_driver

ARRAY = r"""
import ctypes, os
import numpy as np
from pycoll.buffers import as_buffer

fake = ctypes.CDLL(os.environ["PYCOLL_CUDA_DRIVER_LIBRARY"])
fake.fake_cuda_register.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
x = np.zeros(8, np.float32)
fake.fake_cuda_register(x.ctypes.data, x.nbytes, 1)

class Array:  # what Numba and other producers export: no .device
    __cuda_array_interface__ = dict(x.__array_interface__, version=3)

class Unknown:  # memory the driver does not know
    __cuda_array_interface__ = dict(np.zeros(2, np.float32).__array_interface__, version=3)

print("DEVICES", as_buffer(Array()).device_id, as_buffer(Unknown()).device_id)
"""

CHOICE = r"""
from pycoll.plugins.nccl import NcclBackend

class PastTheCheck(Exception):
    pass

class Store:  # the engine's first use of the store comes after the device check
    def get(self, key, timeout):
        raise PastTheCheck
    set = get

backend = NcclBackend()
assert backend.probe() is None, backend.probe()
try:
    backend.create(rank=1, world_size=2, store=Store(), timeout=5.0, options={})
except ValueError as exc:
    print("REFUSED", exc)
except PastTheCheck:
    print("PAST THE CHECK")
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    return build_fake_cuda_driver(tmp_path_factory.mktemp("fake_cuda"))


def _run(script, env):
    done = subprocess.run([sys.executable, "-P", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_device_of_a_cuda_array_interface_comes_from_the_driver(fake_driver):
    out = _run(ARRAY, dict(os.environ, PYCOLL_CUDA_DRIVER_LIBRARY=fake_driver, FAKE_CUDA_CC="80,80"))
    assert "DEVICES 1 0" in out  # device 1, as the driver says; memory it does not know keeps 0


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory):
    lib = build_fake("nccl", tmp_path_factory.mktemp("nccl"))
    if lib is None:
        pytest.skip("no C compiler to build the fake NCCL")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                                            "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID")}
    return dict(env, PYCOLL_NCCL_LIBRARY=lib, PYCOLL_CUDART_LIBRARY=lib)


@pytest.mark.parametrize("variable", ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"])
def test_a_rank_that_never_set_its_device_is_refused_naming_its_local_rank(fake_nccl, variable):
    out = _run(CHOICE, dict(fake_nccl, FAKE_CUDA_DEVICE_COUNT="4", **{variable: "2"}))
    assert f"REFUSED nccl: this rank has {variable}=2 but uses GPU 0 of the 4 it sees" in out, out
    assert f"torch.cuda.set_device(int(os.environ['{variable}']))" in out


@pytest.mark.parametrize("settings", [
    {"LOCAL_RANK": "2", "FAKE_CUDA_CURRENT_DEVICE": "2", "FAKE_CUDA_DEVICE_COUNT": "4"},  # set its device
    {"LOCAL_RANK": "2", "FAKE_CUDA_DEVICE_COUNT": "1"},  # one GPU per rank (CUDA_VISIBLE_DEVICES)
    {"LOCAL_RANK": "0", "FAKE_CUDA_DEVICE_COUNT": "4"},  # the first rank of its host
    {"FAKE_CUDA_DEVICE_COUNT": "4"},                     # no launcher numbering
])
def test_a_rank_on_its_own_device_passes_the_check(fake_nccl, settings):
    out = _run(CHOICE, dict(fake_nccl, **settings))
    assert "PAST THE CHECK" in out, out
