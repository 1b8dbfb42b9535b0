"""`pycoll bench --device cpu|cuda|npu`: the option reaches the ranks' config, a device this host lacks is refused
cleanly naming --device and LOCAL_RANK, every array a collective gets comes from the device layer (so a vendor
backend gets device arrays), results come back through it, and device timing is the event span."""

import subprocess
import sys
import types

import numpy as np
import pytest

from pycoll.cli import bench as bench_cli
from pycoll.tools.bench import sweep, worker


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-P", "-m", "pycoll", "bench", *args], check=False, capture_output=True,
                          text=True, timeout=60, env=env)


def _config(*argv):
    import argparse

    p = argparse.ArgumentParser()
    bench_cli.add_arguments(p)
    return bench_cli._config(p.parse_args(list(argv)))


def test_device_option_reaches_the_config():
    assert _config()["device"] == "cpu"
    assert _config("--device", "cuda")["device"] == "cuda"


@pytest.mark.timeout(60)
def test_the_device_defaults_to_the_memory_the_backend_takes():
    # `pycoll bench --backend nccl` must get CUDA arrays without --device (it failed with host arrays).
    assert bench_cli._device_for(["nccl"], None) == "cuda"
    assert bench_cli._device_for(["hccl"], None) == "npu"
    assert bench_cli._device_for(["cpu", "tcp"], None) == "cpu"
    assert bench_cli._device_for(["nccl"], "cpu") == "cpu"  # named: the user's choice, refused later if wrong
    with pytest.raises(ValueError, match="--device: backends nccl, tcp take different memory"):
        bench_cli._device_for(["nccl", "tcp"], None)


def test_unknown_device_is_refused_by_the_parser():
    proc = run_cli("--device", "tpu")
    assert proc.returncode != 0 and "--device" in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device, text", [("cuda", "--device cuda: no CUDA device 0 here (LOCAL_RANK=0"),
                                          ("npu", "--device npu: torch_npu is not installed")])
def test_missing_device_is_refused_cleanly(device, text):
    try:
        worker.device_arrays(device)
    except ValueError:
        pass
    else:
        pytest.skip(f"this machine has a {device} device")
    proc = run_cli("--device", device, "-b", "8", "-e", "8", "--iters", "1")
    assert proc.returncode != 0
    assert text in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


class Tagged(np.ndarray):
    """An array made by the fake device layer: what a device array is to the bench."""


class FakeDevice(worker.HostArrays):
    name = "fake"

    def __init__(self):
        self.timed = 0

    def to_device(self, a):
        return np.array(a).view(Tagged)

    def to_host(self, a):
        assert isinstance(a, Tagged), type(a)
        return np.asarray(a).view(np.ndarray)

    def time_iterations(self, run, barrier, warmup, iters):
        self.timed += 1
        return super().time_iterations(run, barrier, warmup, iters)


class OneRankComm:
    """A 1-rank communicator that accepts only device (Tagged) arrays, as a vendor backend accepts only its
    device's memory."""

    rank, size, backend, last_algorithm = 0, 1, "fake", "ring"

    def _device(self, *arrays):
        for a in arrays:
            if a is not None and not isinstance(a, Tagged):
                raise TypeError(f"x is in host memory ({type(a).__name__}), but this backend takes device memory")

    def barrier(self):
        pass

    def all_reduce(self, x, op="sum", out=None, algorithm="auto", accuracy="fast"):
        self._device(x, out)
        if out is None:
            return x
        out[...] = x
        return out

    def all_gather(self, x, out):
        self._device(x, out)
        out[...] = x
        return out

    def reduce_scatter(self, x, out, op="sum", algorithm="auto", accuracy="fast"):
        return self.all_gather(x, out)

    def broadcast(self, x, root=0):
        self._device(x)
        return x

    def reduce(self, x, root=0, op="sum", out=None, accuracy="fast"):
        return self.all_reduce(x, op, out)


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "broadcast", "reduce"])
def test_every_collective_gets_device_arrays_and_checks_their_results(collective):
    dev = FakeDevice()
    config = {"collective": collective, "dtypes": ["float32", "int32"], "ops": ["sum"], "algorithms": ["auto"],
              "accuracies": ["fast"], "sizes": sweep.sizes(8, 64, 8), "iters": 2, "warmup": 1}
    rows = worker.run_cases(OneRankComm(), config, dev=dev)
    assert rows and all(r["wrong"] == 0 for r in rows)
    assert dev.timed == len(rows)


def test_torch_device_timing_is_the_event_span():
    """With torch, --device cuda/npu times each iteration by events recorded around the call."""
    clock = iter([0.0, 1.0, 3.0, 10.0, 14.0, 20.0, 26.0])  # device milliseconds at each event recorded

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = next(clock)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.at - self.at

    module = types.SimpleNamespace(set_device=lambda i: None, Event=Event)
    torch = types.SimpleNamespace(cuda=module, device=lambda name: name)
    dev = worker.TorchDeviceArrays(torch, "cuda", 0)
    calls = []
    times = dev.time_iterations(lambda: calls.append("run"), lambda: calls.append("barrier"), 1, 3)
    assert times == pytest.approx([0.002, 0.004, 0.006])  # (3 - 1), (14 - 10), (26 - 20) ms
    assert calls == ["barrier", "run"] * 4
