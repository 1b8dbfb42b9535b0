"""`pycoll bench --device cpu|cuda|npu`: the option reaches the ranks' config, a device this host lacks is refused
cleanly naming --device and LOCAL_RANK, every array a collective gets comes from the device layer (so a vendor
backend gets device arrays), results come back through it, and device timing is the event span."""

import subprocess
import sys
import types

import numpy as np
import pytest

from pycoll.cli import bench as bench_cli
from pycoll.tools.bench import sweep, timing, worker


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


class DeviceClock:
    """A fake device: each call queued costs the next of `costs` milliseconds on its stream; events read the
    stream's time when recorded, and count the host's synchronizes."""

    def __init__(self, costs):
        self.costs, self.now, self.syncs, self.log = iter(costs), 0.0, 0, []

    def call(self):
        self.now += next(self.costs)
        self.log.append("run")

    def event_class(self):
        clock = self

        class Event:
            def __init__(self, enable_timing=True):
                assert enable_timing
                self.at = None

            def record(self):
                self.at = clock.now
                clock.log.append("record")

            def synchronize(self):
                clock.syncs += 1
                clock.log.append("sync")

            def elapsed_time(self, end):
                return end.at - self.at

        return Event


def test_window_sizes_split_the_calls_evenly():
    assert timing.window_sizes(25) == [3, 3, 3, 3, 3, 2, 2, 2, 2, 2]
    assert timing.window_sizes(5) == [1] * 5
    assert timing.window_sizes(200) == [20] * 10
    with pytest.raises(ValueError, match="iters must be at least 1"):
        timing.window_sizes(0)


@pytest.mark.parametrize("layer", ["torch", "cupy"])
def test_device_timing_runs_each_window_back_to_back_with_one_synchronize(layer):
    """--device cuda/npu times as nccl-tests does: warm-up calls back to back, then per window a barrier, an
    event, the window's calls with nothing between them, an event and ONE synchronize; a window's time per call
    is its span over its calls (the old code synchronized after every call)."""
    warmup, iters = 2, 25
    costs = [100.0] * warmup + [float(k) for k in range(1, iters + 1)]  # the k-th timed call takes k ms
    clock = DeviceClock(costs)
    Event = clock.event_class()
    if layer == "torch":
        module = types.SimpleNamespace(set_device=lambda i: None, Event=Event)
        dev = worker.TorchDeviceArrays(types.SimpleNamespace(cuda=module, device=lambda name: name), "cuda", 0)
    else:
        cuda = types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: a.elapsed_time(b),
                                     Device=lambda i: types.SimpleNamespace(use=lambda: None))
        dev = worker.CupyArrays(types.SimpleNamespace(cuda=cuda), 0)
    times = dev.time_iterations(clock.call, lambda: clock.log.append("barrier"), warmup, iters)
    sizes = timing.window_sizes(iters)
    assert clock.syncs == len(sizes) == 10
    want, k = [], 1
    for n in sizes:
        want.append(sum(range(k, k + n)) / n / 1e3)
        k += n
    assert times == pytest.approx(want)
    expected = ["barrier"] + ["run"] * warmup
    for n in sizes:
        expected += ["barrier", "record"] + ["run"] * n + ["record", "sync"]
    assert clock.log == expected


class WindowedDevice(worker.DeviceArrays):
    """The fake device layer (Tagged arrays) timed in windows by a DeviceClock."""

    name = "fake"

    def __init__(self, clock):
        self.clock, self.Event = clock, clock.event_class()

    to_device, to_host = FakeDevice.to_device, FakeDevice.to_host

    def new_event(self):
        return self.Event()

    def elapsed_ms(self, start, end):
        return start.elapsed_time(end)


class GrowingComm(OneRankComm):
    """A sum in place doubles its input (two ranks holding the same values), and each call costs 1 ms of the
    device clock; the inputs of every in-place call are recorded."""

    def __init__(self, clock):
        self.clock, self.in_place_inputs = clock, []

    def all_reduce(self, x, op="sum", out=None, algorithm="auto", accuracy="fast"):
        self._device(x, out)
        self.clock.now += 1.0
        if out is None:
            self.in_place_inputs.append(np.array(x))
            x[...] = x * 2
            return x
        out[...] = x
        return out


def test_device_rows_come_from_windows_and_in_place_sums_do_not_grow():
    """Each rank reports one time per window (the gather sizes follow), and an in-place sum timed back to back
    reduces values it leaves unchanged (zeros), so 25 calls without a restore between them neither grow nor
    overflow."""
    clock = DeviceClock(iter(()))
    comm = GrowingComm(clock)
    config = {"collective": "all_reduce", "dtypes": ["int8"], "ops": ["sum"], "algorithms": ["auto"],
              "accuracies": ["fast"], "sizes": [8], "iters": 25, "warmup": 3, "in_place": (True,)}
    rows = worker.run_cases(comm, config, dev=WindowedDevice(clock))
    (row,) = rows
    assert row["in_place"] and row["time_us"] == pytest.approx(1000.0)  # 1 ms a call, whatever the window
    assert row["time_p50_us"] == pytest.approx(1000.0) and row["time_p99_us"] == pytest.approx(1000.0)
    timed = comm.in_place_inputs[-(25 + 3):]
    assert all(not a.any() for a in timed), [a for a in timed if a.any()][:1]
