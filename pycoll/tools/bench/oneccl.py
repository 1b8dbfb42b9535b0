"""The `oneccl` peer of `--compare`: Intel oneCCL on the CPU, from an environment holding its packages
(PYCOLL_BENCH_ONECCL or --mpi-prefix oneccl=DIR).

oneCCL's API is C++, so oneccl_shim.cpp (beside this file; no part of pycoll's build) puts a C interface over it,
compiled here at run time with the system's C++ compiler against the environment's headers and library, into a
cache directory. The ranks load it with ctypes and run under pycoll's own launcher, so the same worker.run_cases
times oneCCL as every other peer. They meet through oneCCL's key-value store: rank 0 creates it and writes its
address to a file in the job's private directory, which the other ranks wait for.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time

from pycoll.dtypes import REAL_DTYPES

ENV = "PYCOLL_BENCH_ONECCL"
# The `oneccl` package, not `oneccl-cpu`: the CPU wheel's libccl.so.1 needs a libccl.so.2 that only `oneccl`
# ships. oneccl-devel has the headers; 2022.2 needs a libfabric the package index lacks.
PACKAGES = "oneccl==2022.1.2 oneccl-devel==2022.1.2"
INSTALL = f"python -m venv DIR && DIR/bin/pip install {PACKAGES}, then {ENV}=DIR or --mpi-prefix oneccl=DIR"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oneccl_shim.cpp")
# The order of oneccl_shim.cpp's kDtypes (pycoll's ids: every dtype but the complex ones, which come last) and kOps.
DTYPES = REAL_DTYPES
OPS = ("sum", "prod", "min", "max")
ADDRESS_BYTES = 256  # ccl::kvs::address_max_size
KVS_FILE = "oneccl-kvs-address"
# How the ranks run oneCCL unless the environment says otherwise. ATL over OFI: there is no MPI launcher to use
# ATL over MPI with. No worker thread (CCL_WORKER_OFFLOAD=0): the calling thread drives the collective, as in
# every other peer; oneCCL's default pins a polling worker per rank, which on a host whose ranks outnumber
# half its cores leaves the ranks' own threads fighting the workers for them. OFI's shared-memory provider
# between a host's ranks (CCL_ATL_SHM), as the MPIs and pycoll use by default, not TCP loopback. A wait that
# outlasts its spins yields the core (CCL_YIELD=sched_yield, not the default pause), so that a rank whose peer
# shares its core lets the peer run rather than spinning out a whole time slice. Warnings off: oneCCL warns
# about each of these settings.
SETTINGS = {"CCL_ATL_TRANSPORT": "ofi", "CCL_WORKER_OFFLOAD": "0", "CCL_ATL_SHM": "1", "CCL_YIELD": "sched_yield",
            "CCL_LOG_LEVEL": "error"}


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX") or "g++")


def _needed(prefix: str) -> list[tuple[str, str]]:
    """(path, package) of what the shim needs in the environment."""
    lib = os.path.join(prefix, "lib")
    return [(os.path.join(prefix, "include", "oneapi", "ccl.hpp"), "oneccl-devel"),
            (os.path.join(lib, "libccl.so"), "oneccl"), (os.path.join(lib, "libccl.so.2"), "oneccl")]


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pycoll", "oneccl")


def shim_path(prefix: str) -> str:
    """Where the shim built for this environment and this source lives (a new one when either changes)."""
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + os.path.realpath(prefix).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"oneccl_shim-{key}.so")


def build(prefix: str) -> str:
    """The shim for prefix, compiled unless already cached; RuntimeError with the compiler's message."""
    path = shim_path(prefix)
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lib = os.path.join(prefix, "lib")
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    # RPATH rather than RUNPATH (--disable-new-dtags): libccl.so's own dependencies (libccl.so.2, the SYCL and
    # compiler runtimes) are found in the environment too, with no LD_LIBRARY_PATH.
    cmd = [compiler(), "-O2", "-std=c++17", "-shared", "-fPIC", "-I", os.path.join(prefix, "include"), SOURCE,
           "-o", tmp, "-L", lib, "-lccl", f"-Wl,--disable-new-dtags,-rpath,{lib}"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        os.unlink(tmp)
        lines = proc.stdout.strip().splitlines()
        first = [ln for ln in lines if "error" in ln][:3] or lines[-3:]  # the first errors, not their fallout
        raise RuntimeError(f"compiling {os.path.basename(SOURCE)} failed: {' / '.join(first)}")
    os.replace(tmp, path)
    return path


def unavailable() -> str | None:
    """None when the peer can run, else why not; builds the shim (once) to find out."""
    prefix = os.environ.get(ENV) or None
    if prefix is None:
        return f"{ENV} is not set (install: {INSTALL})"
    for path, package in _needed(prefix):
        if not os.path.exists(path):
            return f"{path} is missing: {package} is not installed in {prefix} (install: {INSTALL})"
    if compiler() is None:
        return f"no C++ compiler ({os.environ.get('CXX') or 'g++'}) on PATH to build the oneCCL shim"
    try:
        build(prefix)
    except RuntimeError as exc:
        return str(exc)
    return None


def _exchange_address(lib, rank: int, directory: str, timeout: float = 120.0) -> ctypes.Array:
    """Rank 0's store address, written by rank 0 (atomically) and read by the others."""
    address = ctypes.create_string_buffer(ADDRESS_BYTES)
    path = os.path.join(directory, KVS_FILE)
    if rank == 0:
        _check(lib, lib.oneccl_shim_main_kvs(address, ADDRESS_BYTES))
        with open(path + ".tmp", "wb") as f:
            f.write(address.raw)
        os.replace(path + ".tmp", path)
        return address
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"oneccl: rank 0 wrote no store address to {path} in {timeout:.0f} s")
        time.sleep(0.01)
    with open(path, "rb") as f:
        address.raw = f.read()
    return address


def _check(lib, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"oneccl: {lib.oneccl_shim_error().decode(errors='replace')}")


class OnecclComm:
    """oneCCL's communicator of the launcher's ranks, on numpy arrays, with the Communicator methods the sweep
    uses. directory: the job's private directory, where rank 0 leaves the store's address."""

    backend = "oneccl"
    last_algorithm = "oneccl"

    def __init__(self, directory: str):
        self.rank, self.size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        for name, value in SETTINGS.items():  # the environment's own values win
            os.environ.setdefault(name, value)
        lib = self.lib = ctypes.CDLL(shim_path(os.environ.get(ENV) or None))
        lib.oneccl_shim_error.restype = ctypes.c_char_p
        size_t, int_, ptr = ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
        lib.oneccl_shim_main_kvs.argtypes = [ctypes.c_char_p, size_t]
        lib.oneccl_shim_init.argtypes = [int_, int_, ctypes.c_char_p, size_t]
        lib.oneccl_shim_allreduce.argtypes = [ptr, ptr, size_t, int_, int_]
        lib.oneccl_shim_reduce_scatter.argtypes = [ptr, ptr, size_t, int_, int_]
        lib.oneccl_shim_allgather.argtypes = [ptr, ptr, size_t, int_]
        lib.oneccl_shim_broadcast.argtypes = [ptr, size_t, int_, int_]
        lib.oneccl_shim_reduce.argtypes = [ptr, ptr, size_t, int_, int_, int_]
        lib.oneccl_shim_alltoall.argtypes = [ptr, ptr, size_t, int_]
        address = _exchange_address(lib, self.rank, directory)
        _check(lib, lib.oneccl_shim_init(self.rank, self.size, address, ADDRESS_BYTES))

    @staticmethod
    def _dtype(a) -> int:
        return DTYPES.index(a.dtype.name)

    def all_reduce(self, x, op="sum", *, out=None, algorithm="auto", accuracy="fast"):
        out = x if out is None else out
        _check(self.lib, self.lib.oneccl_shim_allreduce(x.ctypes.data, out.ctypes.data, x.size, self._dtype(x),
                                                         OPS.index(op)))
        return out

    def reduce_scatter(self, x, out, op="sum", *, algorithm="auto", accuracy="fast"):
        _check(self.lib, self.lib.oneccl_shim_reduce_scatter(x.ctypes.data, out.ctypes.data, out.size,
                                                              self._dtype(x), OPS.index(op)))
        return out

    def broadcast(self, x, root=0):
        _check(self.lib, self.lib.oneccl_shim_broadcast(x.ctypes.data, x.size, self._dtype(x), root))
        return x

    def reduce(self, x, root=0, op="sum", *, out=None, accuracy="fast"):
        out = x if out is None else out
        _check(self.lib, self.lib.oneccl_shim_reduce(x.ctypes.data, out.ctypes.data, x.size, self._dtype(x),
                                                      OPS.index(op), root))
        return out

    def all_gather(self, x, out):
        _check(self.lib, self.lib.oneccl_shim_allgather(x.ctypes.data, out.ctypes.data, x.size, self._dtype(x)))
        return out

    def all_to_all(self, x, out):
        _check(self.lib, self.lib.oneccl_shim_alltoall(x.ctypes.data, out.ctypes.data, x.size // self.size,
                                                        self._dtype(x)))
        return out

    def barrier(self):
        _check(self.lib, self.lib.oneccl_shim_barrier())

    def close(self):
        _check(self.lib, self.lib.oneccl_shim_finalize())

