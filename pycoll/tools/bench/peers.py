"""The peers of `--compare`: torch.distributed (gloo, CPU) and mpi4py: `mpi` is Open MPI with its default
transports (shared memory between the ranks of a host), `mpi-tcp` Open MPI over TCP only, `impi` Intel MPI (the
`impi-rt` package) and `mpich` MPICH (the `mpich` package), each from its own environment (PREFIX_ENV), and
`oneccl` Intel oneCCL on the CPU (pycoll/tools/bench/oneccl.py), from its environment too.

Each peer is wrapped in a small adapter with the Communicator methods the sweep uses, so the very same
worker.run_cases times it: barrier, one timed call, per-rank median, medians gathered with the peer itself,
and the same #wrong / max_rel_err checks. `python -m pycoll.tools.bench.peers NAME CONFIG.json RESULT.json` is one
rank of a peer's job.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import numpy as np

from pycoll.dtypes import REAL_DTYPES
from pycoll.tools.bench import launch, oneccl, sweep
from pycoll.tools.bench.progress import for_rank
from pycoll.tools.bench.worker import run_cases


class _GlooComm:
    """torch.distributed with the gloo backend, on numpy arrays (shared with torch tensors, no copies)."""

    backend = "gloo"
    last_algorithm = "gloo"

    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method="env://")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
                    "max": dist.ReduceOp.MAX}

    def _tensor(self, a):
        if a.dtype.name == "bfloat16":  # torch.from_numpy does not know ml_dtypes' bfloat16: same bits
            return self.torch.from_numpy(a.view(np.uint16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(a)

    def all_reduce(self, x, op="sum", *, out=None, algorithm="auto", accuracy="fast"):
        # gloo reduces in place; out-of-place is a copy then in place (what pycoll does with out= too).
        if out is not None:
            np.copyto(out, x)
            x = out
        self.dist.all_reduce(self._tensor(x), op=self.ops[op])
        return x

    def reduce_scatter(self, x, out, op="sum", *, algorithm="auto", accuracy="fast"):
        self.dist.reduce_scatter_tensor(self._tensor(out), self._tensor(x), op=self.ops[op])
        return out

    def broadcast(self, x, root=0):
        self.dist.broadcast(self._tensor(x), src=root)
        return x

    def reduce(self, x, root=0, op="sum", *, out=None, accuracy="fast"):
        # gloo reduces in place, into x on the root: out-of-place is a copy first, as for all_reduce.
        if out is not None:
            np.copyto(out, x)
            x = out
        self.dist.reduce(self._tensor(x), dst=root, op=self.ops[op])
        return x

    def all_to_all(self, x, out):
        self.dist.all_to_all_single(self._tensor(out), self._tensor(x))
        return out

    def all_gather(self, x, out):
        # all_gather_single replaces all_gather_into_tensor in recent torch releases.
        gather = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        gather(self._tensor(out), self._tensor(x))
        return out

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.destroy_process_group()


class _MpiComm:
    """mpi4py's COMM_WORLD on numpy arrays."""

    def __init__(self, name):
        from mpi4py import MPI

        self.backend = name  # "mpi", "mpi-tcp", "impi" or "mpich": the label of its rows
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.ops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
        self.last_algorithm = "ompi-tuned" if "Open MPI" in MPI.Get_library_version() else name

    def all_reduce(self, x, op="sum", *, out=None, algorithm="auto", accuracy="fast"):
        if out is None:
            self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self.ops[op])
            return x
        self.comm.Allreduce(x, out, op=self.ops[op])
        return out

    def reduce_scatter(self, x, out, op="sum", *, algorithm="auto", accuracy="fast"):
        self.comm.Reduce_scatter_block(x, out, op=self.ops[op])
        return out

    def broadcast(self, x, root=0):
        self.comm.Bcast(x, root=root)
        return x

    def reduce(self, x, root=0, op="sum", *, out=None, accuracy="fast"):
        if out is None:
            self.comm.Reduce(self.MPI.IN_PLACE if self.rank == root else x, x, op=self.ops[op], root=root)
            return x
        self.comm.Reduce(x, out, op=self.ops[op], root=root)
        return out

    def all_gather(self, x, out):
        # In place, x is this rank's block of out: MPI says so with MPI_IN_PLACE (it forbids aliased buffers).
        self.comm.Allgather(self.MPI.IN_PLACE if np.shares_memory(x, out) else x, out)
        return out

    def all_to_all(self, x, out):
        self.comm.Alltoall(x, out)
        return out

    def barrier(self):
        self.comm.Barrier()

    def close(self):
        pass


class Peer:
    name = ""
    dtypes: tuple = ()
    ops: tuple = ("sum", "prod", "min", "max")
    # The collectives whose in-place form (sweep.FORMS) the adapter runs in the library's own in-place way:
    # gloo and oneCCL reduce in place into the one buffer given, and broadcast has one buffer everywhere.
    in_place: tuple = ("all_reduce", "reduce", "broadcast")

    def unavailable(self) -> str | None:
        """None when the peer can run here, else why not (and what to install)."""
        raise NotImplementedError

    def launch(self, n: int, config_path: str, result_path: str, timeout: float) -> None:
        raise NotImplementedError


class GlooPeer(Peer):
    name = "gloo"
    dtypes = REAL_DTYPES

    def unavailable(self):
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (pip install torch; the CPU wheel has gloo)"
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            return "this torch build has no gloo backend"
        return None

    def launch(self, n, config_path, result_path, timeout):
        launch.run_module(n, "pycoll.tools.bench.peers", ["gloo", config_path, result_path], timeout=timeout)


class MpiPeer(Peer):
    """Open MPI under mpirun: `mca` are the settings that choose its transports. Its ranks run with
    PYTHONSAFEPATH, so that `-m` from a source checkout's root still imports the installed pycoll."""

    dtypes = ("int8", "uint8", "int32", "int64", "float32", "float64")  # no float16/bfloat16 in MPI-3
    in_place = Peer.in_place + ("all_gather",)  # MPI_IN_PLACE

    def unavailable(self):
        if shutil.which("mpirun") is None:
            return "mpirun is not on PATH (apt-get install openmpi-bin libopenmpi-dev)"
        if importlib.util.find_spec("mpi4py") is None:
            return "mpi4py is not installed (pip install mpi4py, after Open MPI's libopenmpi-dev)"
        return None

    def __init__(self, name, mca):
        self.name, self.mca = name, mca

    def launch(self, n, config_path, result_path, timeout):
        # No binding, since ranks may outnumber the cores.
        cmd = ["mpirun", "-n", str(n), "--oversubscribe", "--bind-to", "none", *self.mca,
               sys.executable, "-m", "pycoll.tools.bench.peers", self.name, config_path, result_path]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1")
        launch.run_command(cmd, env, timeout)


# Where each MPI from the package index lives: a virtual environment (or any prefix) holding that MPI and
# mpi4py for this Python, e.g. `python -m venv DIR && DIR/bin/pip install impi-rt mpi4py`.
PREFIX_ENV = {"impi": "PYCOLL_BENCH_IMPI", "mpich": "PYCOLL_BENCH_MPICH", "oneccl": oneccl.ENV}
PREFIX_PACKAGE = {"impi": "impi-rt", "mpich": "mpich"}


def install_hint(name: str) -> str:
    return (f"python -m venv DIR && DIR/bin/pip install {PREFIX_PACKAGE[name]} mpi4py, then "
            f"{PREFIX_ENV[name]}=DIR or --mpi-prefix {name}=DIR")


class PrefixMpiPeer(Peer):
    """An MPI installed from its package (impi-rt, mpich) into a prefix: that prefix's mpiexec starts this Python
    (which has pycoll), with the prefix's mpi4py ahead on the path and pointed at the prefix's libmpi (mpi4py's
    wheels load the MPI library named by MPI4PY_LIBMPI)."""

    dtypes = MpiPeer.dtypes
    in_place = MpiPeer.in_place

    def __init__(self, name):
        self.name = name

    def prefix(self) -> str | None:
        return os.environ.get(PREFIX_ENV[self.name]) or None

    def paths(self) -> tuple[str, str, str]:
        """(mpiexec, libmpi, site-packages) under the prefix."""
        prefix = self.prefix()
        site = os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
        return os.path.join(prefix, "bin", "mpiexec"), os.path.join(prefix, "lib", "libmpi.so.12"), site

    def unavailable(self):
        prefix = self.prefix()
        if prefix is None:
            return f"{PREFIX_ENV[self.name]} is not set (install: {install_hint(self.name)})"
        mpiexec, libmpi, site = self.paths()
        for path, what in ((mpiexec, PREFIX_PACKAGE[self.name]), (libmpi, PREFIX_PACKAGE[self.name]),
                           (os.path.join(site, "mpi4py"), "mpi4py")):
            if not os.path.exists(path):
                return f"{path} is missing: {what} is not installed in {prefix} (install: {install_hint(self.name)})"
        return None

    def launch(self, n, config_path, result_path, timeout):
        mpiexec, libmpi, site = self.paths()
        cmd = [mpiexec, "-n", str(n), sys.executable, "-m", "pycoll.tools.bench.peers", self.name, config_path,
               result_path]
        path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
        # No pinning, as for Open MPI above (Intel MPI pins by default; MPICH's hydra does not).
        env = dict(os.environ, PYTHONPATH=path, MPI4PY_LIBMPI=libmpi, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1",
                   I_MPI_PIN="0")
        launch.run_command(cmd, env, timeout)


class OnecclPeer(Peer):
    """oneCCL through its C shim, under pycoll's own launcher (it needs no MPI launcher)."""

    name = "oneccl"
    dtypes = oneccl.DTYPES

    def unavailable(self):
        return oneccl.unavailable()

    def launch(self, n, config_path, result_path, timeout):
        launch.run_module(n, "pycoll.tools.bench.peers", [self.name, config_path, result_path], timeout=timeout)


def set_prefixes(text: str) -> None:
    """--mpi-prefix impi=DIR,mpich=DIR,oneccl=DIR: sets PREFIX_ENV for this process (and so for the peers' jobs);
    ValueError naming --mpi-prefix on a bad entry."""
    for item in (t.strip() for t in text.split(",")):
        name, sep, path = item.partition("=")
        if not sep or name not in PREFIX_ENV or not path:
            raise ValueError(f"--mpi-prefix: expected NAME=DIR with NAME one of {', '.join(PREFIX_ENV)}, "
                             f"got {item!r}")
        os.environ[PREFIX_ENV[name]] = os.path.abspath(os.path.expanduser(path))


# mpi-tcp: TCP only (btl tcp,self: no shared memory), like pycoll's and gloo's loopback sockets; ob1 so that the
# btl setting is what moves the bytes. mpi: whatever Open MPI picks by default (shared memory on one host).
MPI_TCP_ONLY = ("--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo")
PEERS = {p.name: p for p in (GlooPeer(), MpiPeer("mpi", ()), MpiPeer("mpi-tcp", MPI_TCP_ONLY),
                              PrefixMpiPeer("impi"), PrefixMpiPeer("mpich"), OnecclPeer())}


# What the peers' adapters above run (every collective the bench times but the uneven and rooted-vector ones).
PEER_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")


def peer_config(peer: Peer, config: dict) -> tuple[dict | None, str | None]:
    """The sweep's config restricted to what the peer can run, or (None, why it cannot run any of it)."""
    if config["collective"] not in PEER_COLLECTIVES:
        return None, f"--compare runs {', '.join(PEER_COLLECTIVES)}"
    collective = config["collective"]
    no_data = collective in sweep.NO_DATA  # runs one case whatever dtypes and ops were asked for
    dtypes = [d for d in config["dtypes"] if d in peer.dtypes or no_data]
    ops = [o for o in config["ops"] if o in peer.ops or no_data]
    if not dtypes or not ops:
        return None, f"supports none of the requested dtypes/ops (it has {', '.join(peer.dtypes)}; " \
                     f"{', '.join(peer.ops)})"
    in_place = [f for f in config.get("in_place", (False, True)) if not f or collective in peer.in_place]
    if not no_data and not [f for f in sweep.FORMS[collective] if f in in_place]:
        return None, f"runs {collective} out of place only here"
    return dict(config, backends=[peer.name], algorithms=["default"], accuracies=["fast"], dtypes=dtypes,
                ops=ops, in_place=in_place), None


def _rank_main(name, config_path, result_path):
    with open(config_path) as f:
        config = json.load(f)
    if name == "gloo":
        comm = _GlooComm()
    elif name == "oneccl":
        comm = oneccl.OnecclComm(os.path.dirname(config_path))  # the job's private directory
    else:
        comm = _MpiComm(name)
    try:
        rows = run_cases(comm, config, for_rank(config.get("progress_file")) if comm.rank == 0 else None)
    finally:
        comm.close()
    if rows is not None:
        with open(result_path, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    _rank_main(*sys.argv[1:4])
