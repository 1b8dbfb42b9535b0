"""accuracy="reproducible" through the CUDA memory table's own entries (backends/cuda/cuda_kernels.c), against the
fake NCCL (every buffer "device" memory) and the fake CUDA driver (tests/fakes/fake_cuda_driver.c), with the real
NVRTC compiling the kernels. The fake computes nothing, so this checks the driver calls, not the values (the values:
tests/vendors/test_cuda_kernel_source.py runs the same source on the host; test_nccl_reproducible.py the
comm layer's path with the host loops standing in): each call launches the summary kernel, sums it over the transport in
device scratch, copies it to the host and waits for the stream before the plan is drawn, then launches encode,
the int64 sums and decode -- every launch, copy and allocation on the collective's stream, every block freed on it,
nothing held after the call."""

import ctypes
import os

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, buffer, make_engine, run_ranks_ok, vendor_fixtures
from nvidia_wheels import build_fake_cuda_driver, unavailable

SUM, AVG = 0, 4
STREAM = 0x5EED  # the framework's stream the arrays name: the collective's stream
COUNT = 1001

fake_env, env = vendor_fixtures("nccl")


def _reproducible_rank(rank, world):
    """The driver's log lines of each reproducible collective on "device" arrays, and the blocks live after it."""
    from pycoll._bindings import vendor
    from pycoll.plugins.nccl import nvrtc_candidates
    if not any(vendor.cuda_kernels_load(0, p) is None for p in nvrtc_candidates()):
        return None
    fake = ctypes.CDLL(os.environ["PYCOLL_CUDA_DRIVER_LIBRARY"])
    fake.fake_cuda_log.restype = ctypes.c_char_p
    fake.fake_cuda_register.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
    x, y, full = np.ones(COUNT, np.float32), np.ones(COUNT, np.float32), np.ones(COUNT * world, np.float32)
    for a in (x, y, full):
        fake.fake_cuda_register(a.ctypes.data, a.nbytes, 0)

    def dev(a):
        return buffer(a, owner=FakeDeviceArray(a, STREAM))

    engine = make_engine("nccl", rank, world, 30.0)
    calls = {"all_reduce": lambda: engine.all_reduce(dev(x), dev(x), SUM, "auto", "reproducible"),
             "all_reduce_avg": lambda: engine.all_reduce(dev(x), dev(y), AVG, "auto", "reproducible"),
             "reduce_scatter": lambda: engine.reduce_scatter(dev(full), dev(y), SUM, "auto", "reproducible"),
             "reduce": lambda: engine.reduce(dev(x), dev(y), SUM, 1, "reproducible")}
    logs, live = {}, {}
    for name, call in calls.items():
        mark = len(fake.fake_cuda_log().decode().splitlines())
        call()
        logs[name] = fake.fake_cuda_log().decode().splitlines()[mark:]
        live[name] = fake.fake_cuda_live()
    engine.close()
    return logs, live


@pytest.fixture
def ranks(env, tmp_path):
    driver = build_fake_cuda_driver(tmp_path)
    out = run_ranks_ok(_reproducible_rank, 2, dict(env, FAKE_CUDA_MEMORY_TYPE="2", FAKE_CUDA_CC="80,80",
                                                   PYCOLL_CUDA_DRIVER_LIBRARY=driver), timeout=110)
    if None in out:
        unavailable("NVRTC not found: pip install nvidia-cuda-nvrtc-cu12")
    return out


def _kernel(line):
    return line.split()[1] if line.startswith("cuLaunchKernel") else None


@pytest.mark.timeout(120)
def test_summary_to_host_then_encode_sums_decode_on_the_collectives_stream(ranks):
    stream = f"stream={STREAM:#x}"
    for rank, (logs, live) in enumerate(ranks):
        for name, log in logs.items():
            assert not [line for line in log if "refused" in line], (name, log)
            kernels = [_kernel(line) for line in log if _kernel(line)]
            receives = name != "reduce" or rank == 1
            repro = [k for k in kernels if k.startswith("pycoll_repro")]
            assert repro == ["pycoll_repro_summary", "pycoll_repro_encode"] + ["pycoll_repro_decode"] * receives, \
                (name, kernels)
            assert kernels.count("pycoll_scale_avg") == (name == "all_reduce_avg"), (name, kernels)
            # The summary reaches the host, and the stream is waited for, before the plan makes the limbs.
            to_host = [i for i, line in enumerate(log) if line.startswith("cuMemcpyAsync to host")]
            summary = log.index(next(line for line in log if _kernel(line) == "pycoll_repro_summary"))
            encode = log.index(next(line for line in log if _kernel(line) == "pycoll_repro_encode"))
            assert len(to_host) == 1 and summary < to_host[0] < encode, (name, log)
            assert log[to_host[0]] == f"cuMemcpyAsync to host bytes=12 {stream}", log[to_host[0]]
            assert any(line == f"cuStreamQuery {stream}" for line in log[to_host[0]:encode]), (name, log)
            # The plan the summary gives (the fake computed nothing: the empty summary, all zeros: one limb of
            # 62 - ceil(log2 2) bits, base 0), passed in the kernels' order: encode the elements sent, decode
            # those received.
            scalars = [line.strip() for line in log if line.startswith("  n=")]
            sent = COUNT * (2 if name == "reduce_scatter" else 1)
            assert scalars == [f"n={n} base=0 bits=61 limbs=1" for n in [sent] + [COUNT] * receives], (name, scalars)
            # The limbs' sums between encode and decode, as reductions on the device (off reduce's root: none).
            after_encode = kernels[kernels.index("pycoll_repro_encode"):]
            assert ("pycoll_reduce" in after_encode) == receives, (name, kernels)
            launches = [line for line in log if _kernel(line)]
            assert all(stream in line for line in launches), launches
            allocs = [line for line in log if line.startswith("cuMemAllocAsync")]
            frees = [line for line in log if line.startswith("cuMemFreeAsync")]
            assert len(allocs) >= 2 and len(allocs) == len(frees), (name, log)  # the summary and the limbs
            assert all(line.endswith(stream) for line in allocs + frees), allocs + frees
            assert live[name] == 0, (name, live)
