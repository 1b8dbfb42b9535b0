"""Runs pycoll's NCCL/HCCL engines against the fake vendor libraries (fake_nccl.c, fake_hccl.c) in real
processes: builds the fakes with the system C compiler, gives the ranks a file store, collects results."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import time
import traceback
import types
from pathlib import Path

import numpy as np

FAKES = Path(__file__).resolve().parent


def build_fake(name: str, out_dir: Path) -> str:
    """Compile fake_<name>.c into a shared library in out_dir; None when there is no C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    out = out_dir / f"libfake_{name}.so"
    subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(out),
                    str(FAKES / f"fake_{name}.c"), str(FAKES / "fake_collectives.c"), "-lpthread", "-lm"],
                   check=True)
    return str(out)


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


def run_ranks(fn, world, env, timeout=60):
    """fn(rank, world) in `world` fresh processes with env set; {rank: ("ok", result) | ("error", info)}."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world, env, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            rank, status, value = queue.get(timeout=max(0.1, deadline - time.monotonic()))
            results[rank] = (status, value)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return results
