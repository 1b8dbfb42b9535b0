"""pycoll's CUDA kernels on the device of the buffer, in that device's primary context, from any thread: against a
fake CUDA driver (tests/fakes/fake_cuda_driver.c) that refuses module loads and launches without a current context
and launches of another device's module, with the real NVRTC compiling the kernels for each fake device's
architecture. The device is taken from the pointer (cuPointerGetAttribute), the context pushed and popped around
every driver call (the thread is left as it was), and the compiled modules are cached per (device, dtype)."""

import os
import subprocess
import sys

import pytest
from nvidia_wheels import build_fake_cuda_driver, unavailable

SCRIPT = r"""
import ctypes, sys, threading
import numpy as np
from pycoll._bindings import vendor
from pycoll.errors import BackendUnavailable
from pycoll.plugins.nccl import nvrtc_candidates

fake_path = sys.argv[1]
assert any(vendor.cuda_kernels_load(0, p) is None for p in nvrtc_candidates()), "no NVRTC"
assert vendor.cuda_kernels_load(1, fake_path) is None
fake = ctypes.CDLL(fake_path)
fake.fake_cuda_log.restype = ctypes.c_char_p
fake.fake_cuda_register.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
FLOAT32 = 6
a = np.zeros(1000, np.float32)
b = np.zeros(1000, np.float32)
fake.fake_cuda_register(a.ctypes.data, a.nbytes, 0)
fake.fake_cuda_register(b.ctypes.data, b.nbytes, 1)

vendor.cuda_kernels_scale(a.ctypes.data, a.size, FLOAT32, 2)        # device 0: compile, load, launch
vendor.cuda_kernels_scale(b.ctypes.data, b.size, FLOAT32, 2)        # device 1: its own module
vendor.cuda_kernels_scale(a.ctypes.data + 400, 10, FLOAT32, 3)      # inside a: device 0, cached
vendor.cuda_kernels_scale(b.ctypes.data, b.size, FLOAT32, 5, 0x1234)  # on the caller's stream
errors = []
def other_thread():
    try:
        vendor.cuda_kernels_scale(b.ctypes.data, 4, FLOAT32, 2)     # a thread with no context of its own
        errors.append(fake.fake_cuda_depth())
    except Exception as exc:
        errors.append(repr(exc))
t = threading.Thread(target=other_thread)
t.start(); t.join()
print("THREAD", errors)
print("DEPTH", fake.fake_cuda_depth())
host = np.zeros(4, np.float32)
try:
    vendor.cuda_kernels_scale(host.ctypes.data, 4, FLOAT32, 2)
    print("HOST ok")
except BackendUnavailable as exc:
    print("HOST", exc)
print("LOG")
print(fake.fake_cuda_log().decode())
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = build_fake_cuda_driver(tmp_path_factory.mktemp("fake_cuda"))
    env = dict(os.environ, FAKE_CUDA_CC="80,90")
    done = subprocess.run([sys.executable, "-P", "-c", SCRIPT, str(out)], env=env, capture_output=True, text=True,
                          timeout=100)
    if "no NVRTC" in done.stderr:
        unavailable("NVRTC not found: pip install nvidia-cuda-nvrtc-cu12")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _log(out):
    return out.split("LOG\n", 1)[1].splitlines()


def test_each_device_gets_a_cubin_for_its_architecture_in_its_own_context(run):
    log = _log(run)
    assert "cubin sm_80 device=0" in log and "cubin sm_90 device=1" in log
    assert [line for line in log if line.startswith("cuDevicePrimaryCtxRetain")] == [
        "cuDevicePrimaryCtxRetain device=0", "cuDevicePrimaryCtxRetain device=1"]


def test_modules_are_cached_per_device_and_dtype(run):
    loads = [line for line in _log(run) if line.startswith("cuModuleLoadData")]
    assert loads == ["cuModuleLoadData device=0 cubin", "cuModuleLoadData device=1 cubin"]


def test_every_launch_runs_on_the_buffers_device(run):
    launches = [line for line in _log(run) if line.startswith("cuLaunchKernel")]
    assert not [line for line in launches if "refused" in line], launches
    devices = [line.split("device=")[1].split()[0] for line in launches]
    assert devices == ["0", "1", "0", "1", "1"], launches
    assert "stream=0x1234" in launches[3]


def test_the_thread_is_left_without_a_context(run):
    assert "DEPTH 0" in run
    assert "THREAD [0]" in run  # the other thread launched too, and its stack is empty after


def test_memory_the_driver_does_not_know_is_refused(run):
    assert "HOST the CUDA driver cannot say which device the buffer is on" in run
