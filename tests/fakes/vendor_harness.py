"""Runs pycoll's NCCL/HCCL engines against the fake vendor libraries (fake_nccl.c, fake_hccl.c) in real
processes: builds the fakes with the system C compiler, gives the ranks a file store, collects results."""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

import numpy as np
import pytest

FAKES = Path(__file__).resolve().parent

# The variables pycoll reads a vendor's libraries from; one fake library stands in for both.
LIBRARY_VARIABLES = {"nccl": ("PYCOLL_NCCL_LIBRARY", "PYCOLL_CUDART_LIBRARY"),
                     "hccl": ("PYCOLL_HCCL_LIBRARY", "PYCOLL_ACL_LIBRARY")}


def compile_shared(out: Path, sources, flags=(), libs=()) -> str:
    """Compile sources into the shared library out with the system C compiler, warnings as errors; None when
    there is no C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags, "-o", str(out),
                    *map(str, sources), *libs, "-lpthread", "-lm"], check=True)
    return str(out)


def build_fake(name: str, out_dir: Path, defines=()) -> str:
    """Compile fake_<name>.c (with -D each of defines) into a shared library in out_dir; None when there is no C
    compiler."""
    sources = [FAKES / f"fake_{name}.c", FAKES / "fake_vendor.c", FAKES / "fake_collectives.c"]
    return compile_shared(out_dir / f"libfake_{name}.so", sources, [f"-D{d}" for d in defines])


def fake_library_env(name: str, out_dir: Path, defines=()) -> dict:
    """Build fake_<name>.c into out_dir; the variables that point the vendor's libraries at it (skips the test
    where there is no C compiler)."""
    lib = build_fake(name, out_dir, defines)
    if lib is None:
        pytest.skip(f"no C compiler to build the fake {name.upper()}")
    return dict(dict.fromkeys(LIBRARY_VARIABLES[name], lib), FAKE_COLL_DIR=str(out_dir))


def job_env(fake_env: dict, tmp_path: Path) -> dict:
    """fake_env plus what one job of ranks shares: a fresh store directory and call log."""
    store = tmp_path / "store"
    store.mkdir()
    return dict(fake_env, FAKE_COLL_LOG=str(tmp_path / "log"), STORE_DIR=str(store))


def fakes_fixture():
    """A module-scoped fixture `fakes`: vendor -> its fake library's variables, each fake built once per module.
    In a test module: fakes = fakes_fixture()."""
    @pytest.fixture(scope="module")
    def fakes(tmp_path_factory):
        built = {}

        def fake_env(vendor):
            if vendor not in built:
                built[vendor] = fake_library_env(vendor, tmp_path_factory.mktemp(vendor))
            return built[vendor]

        return fake_env
    return fakes


def vendor_fixtures(name: str):
    """The fixtures of a test module run against fake_<name>.c, to assign as `fake_env, env = ...`: fake_env
    (per module) builds the fake and points the library variables at it; env (per test) adds a fresh store
    directory and call log."""

    @pytest.fixture(scope="module")
    def fake_env(tmp_path_factory):
        return fake_library_env(name, tmp_path_factory.mktemp(name))

    @pytest.fixture
    def env(fake_env, tmp_path):
        return job_env(fake_env, tmp_path)

    return fake_env, env


def _backend_class(name: str):
    return getattr(importlib.import_module(f"pycoll.plugins.{name}"), f"{name.capitalize()}Backend")


def make_engine(name: str, rank, world, timeout, options=None):
    """This rank's engine of backend `name` over the store in STORE_DIR (call it in a rank's process), with the
    guarded test table for device memory where the job's environment names one."""
    from fakes import guarded_memory

    guarded_memory.install_named()
    backend = _backend_class(name)()
    assert backend.probe() is None
    return backend.create(rank=rank, world_size=world, store=FileStore(os.environ["STORE_DIR"]), timeout=timeout,
                          options=options or {})


def with_engine(name: str, timeout):
    """Decorator: fn(engine, rank, world) becomes a rank's function for run_ranks, fn(rank, world), with this
    rank's engine of backend `name` made before fn runs and closed after it returns."""

    def decorate(fn):
        @functools.wraps(fn)  # the same qualified name: spawned ranks find the function by it
        def rank_main(rank, world):
            engine = make_engine(name, rank, world, timeout)
            out = fn(engine, rank, world)
            engine.close()
            return out

        return rank_main

    return decorate


def all_reduce_error(engine, x, op, accuracy):
    """(exception type name, message) of an in-place all_reduce of x, or None when it succeeds."""
    try:
        engine.all_reduce(buffer(x), buffer(x), op, "auto", accuracy)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


def dead_peer_rank(name, timeout, accuracy, rank, world):
    """Rank 1 leaves without calling; rank 0's all_reduce must raise Timeout, and its next call
    CommunicatorClosed. Rank 0 returns (the Timeout's message, the CommunicatorClosed's, the first call's seconds)."""
    engine = make_engine(name, rank, world, timeout)
    if rank == 1:
        return None
    from pycoll.errors import CommunicatorClosed, Timeout
    x = np.ones(4, np.float32)
    start = time.monotonic()
    with pytest.raises(Timeout) as timed_out:
        engine.all_reduce(buffer(x), buffer(x), 0, "auto", accuracy)
    elapsed = time.monotonic() - start
    with pytest.raises(CommunicatorClosed) as closed:
        engine.all_reduce(buffer(x), buffer(x), 0, "auto", accuracy)
    engine.close()
    return str(timed_out.value), str(closed.value), elapsed


def run_dead_peer(name, env, timeout, accuracy="fast"):
    """dead_peer_rank in 2 processes; rank 0's messages, after checking that the deadline (not longer) passed."""
    status, value = run_ranks(functools.partial(dead_peer_rank, name, timeout, accuracy), 2, env)[0]
    assert status == "ok", value
    timed_out, closed, elapsed = value
    assert timeout - 0.1 < elapsed < 5.0, elapsed
    return timed_out, closed


def injected_error_rank(name, dtype, accuracy, rank, world):
    return all_reduce_error(make_engine(name, rank, world, 5.0), np.ones(4, dtype), 0, accuracy)


def run_injected(name, env, fail, dtype="float32", accuracy="fast"):
    """Rank 0's (exception type name, message) of a 2-rank sum with FAKE_COLL_FAIL=fail (None: no error)."""
    status, value = run_ranks(functools.partial(injected_error_rank, name, dtype, accuracy), 2,
                              dict(env, FAKE_COLL_FAIL=fail))[0]
    assert status == "ok", value
    return value


def probe_without_library(name: str, tmp_path) -> str:
    """What backend `name`'s probe() says, in a fresh process, when its library variable names no file."""
    code = (f"from pycoll.plugins.{name} import {name.capitalize()}Backend; "
            f"print({name.capitalize()}Backend().probe())")
    variable = LIBRARY_VARIABLES[name][0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True,
                         env=dict(os.environ, **{variable: str(tmp_path / "missing.so")}))
    return out.stdout


class FileStore:
    """set/get over files in a directory shared by the ranks, with the store's timeout semantics."""

    def __init__(self, root):
        self.root = Path(root)

    def set(self, key, value):
        path = self.root / key.replace("/", "%")
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(bytes(value))
        tmp.rename(path)

    def get(self, key, timeout):
        path = self.root / key.replace("/", "%")
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"store: {key!r} not set within {timeout} s")
            time.sleep(0.001)
        return path.read_bytes()


class FakeDeviceArray:
    """A numpy array presented as device memory through __cuda_array_interface__ (what CuPy exports)."""

    def __init__(self, arr, stream=None):
        self.arr = arr
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        cai = dict(self.arr.__array_interface__, version=3)
        cai["stream"] = self.stream
        return cai


class FakeNpuArray:
    """A numpy array presented as an NPU tensor, as pycoll reads torch_npu's (a device "npu:0", torch-style
    accessors, no buffer protocol): the fake HCCL's "device" memory is host memory."""

    class _Device:
        type, index = "npu", 0

        def __str__(self):
            return "npu:0"

    device = _Device()

    def __init__(self, arr):
        self.arr = arr
        self.dtype = arr.dtype

    def __dlpack_device__(self):
        return 12, 0  # kDLExtDev, as an NPU may report

    def is_contiguous(self):
        return self.arr.flags.c_contiguous

    def data_ptr(self):
        return self.arr.__array_interface__["data"][0]

    def numel(self):
        return self.arr.size

    def element_size(self):
        return self.arr.itemsize


def device_array(memory, arr):
    """arr as an array of `memory` ("host", "cuda", "npu") as the fakes take it: a device array's memory is arr's."""
    return {"host": lambda a: a, "cuda": FakeDeviceArray, "npu": FakeNpuArray}[memory](arr)


def buffer(arr, memory="cuda", owner=None, dtype_id=None):
    """A pycoll Buffer (duck-typed: the engines read only these fields) over a numpy array."""
    ids = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7}
    return types.SimpleNamespace(ptr=arr.__array_interface__["data"][0], count=arr.size,
                                 dtype=ids[arr.dtype.name] if dtype_id is None else dtype_id,
                                 itemsize=arr.dtype.itemsize, memory=memory, device_id=0, readonly=False,
                                 owner=arr if owner is None else owner)


def _rank_main(fn, rank, world, env, queue):
    os.environ.update(env)
    try:
        queue.put((rank, "ok", fn(rank, world)))
    except BaseException as exc:  # report every failure to the parent, with its type
        queue.put((rank, "error", (type(exc).__name__, str(exc), traceback.format_exc())))


def run_ranks(fn, world, env, timeout=60, wait_for=None):
    """fn(rank, world) in `world` fresh processes with env set; {rank: ("ok", result) | ("error", info)}.
    wait_for: how many results to collect (default every rank's; fewer where a rank is meant to die)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world, env, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < (world if wait_for is None else wait_for):
            rank, status, value = queue.get(timeout=max(0.1, deadline - time.monotonic()))
            results[rank] = (status, value)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return results


def run_ranks_ok(fn, world, env, timeout=60):
    """run_ranks, after checking that every rank succeeded; the ranks' results in rank order."""
    results = run_ranks(fn, world, env, timeout)
    for rank in range(world):
        status, value = results[rank]
        assert status == "ok", value
    return [results[rank][1] for rank in range(world)]
