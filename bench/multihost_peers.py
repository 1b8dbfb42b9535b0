"""The peers of bench/multihost.py that bring their own launcher or library, each beside pycoll across the same
namespace hosts:

- openmpi, openmpi-yield: the system's Open MPI (Debian's openmpi-bin, mpirun) with mpi4py built against it in a
  virtual environment of its own (SYSTEM_OPENMPI_ENV), ob1 over TCP between hosts and shared memory within one;
  openmpi-yield adds `--mca mpi_yield_when_idle 1` (a waiting rank yields its core: the cores are shared).
  mpirun runs in host 0's namespace and reaches the others through an rsh agent that runs the remote command
  with `ip netns exec HOST` (the agent script below), from a hostfile of the namespaces' addresses.
- mpich: MPICH from the package index (pycoll's --compare mpich prefix, PYCOLL_BENCH_MPICH), its hydra mpiexec
  with the same agent as its ssh launcher, UCX over TCP only between hosts (UCX_TLS=tcp,self: UCX would use
  shared memory between the namespace hosts otherwise, which share the machine's memory).
- mlx: MLX's ring backend (mlx.core.distributed, backend "ring", CPU build: `pip install "mlx[cpu]"`, MLX_ENV),
  one rank per `ip netns exec`, with a hostfile of the ranks' addresses and ports.

Every peer's ranks run this interpreter (numpy, pycoll's timing) with the peer's site-packages ahead on the path.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from pycoll.tools.bench.peers import PEERS as BENCH_PEERS

SYSTEM_OPENMPI_ENV = "PYCOLL_BENCH_SYSTEM_OPENMPI"  # a venv: MPICC=mpicc pip install --no-binary mpi4py mpi4py
MLX_ENV = "PYCOLL_BENCH_MLX"  # a venv: pip install "mlx[cpu]"
PEERS = ("openmpi", "openmpi-yield", "mpich", "mlx")
MPIRUN = "/usr/bin/mpirun"  # the system's: mpirun from a venv on PATH would be another MPI
# ob1 with TCP between hosts and shared memory (vader) only within one; never UCX, whose shared-memory transports
# would join ranks on different namespace hosts.
OPENMPI_MCA = ("--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "eth0",
               "--mca", "oob_tcp_if_include", "eth0")


def _site_packages(prefix):
    return os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")


def _prefix_unavailable(env_name, module, install):
    prefix = os.environ.get(env_name)
    if not prefix:
        return f"{env_name} is not set (install: {install}, then {env_name}=DIR)"
    if not os.path.isdir(os.path.join(_site_packages(prefix), module)):
        return f"{module} is not installed in {prefix} (install: {install})"
    return None


def unavailable(lib):
    """Why the peer `lib` cannot run here, or None."""
    if lib in ("openmpi", "openmpi-yield", "mpich") and shutil.which("unshare") is None:
        return "unshare (util-linux) is missing: the launch agent gives each namespace host its own host name"
    if lib.startswith("openmpi"):
        if not os.path.exists(MPIRUN):
            return f"{MPIRUN} is missing (apt-get install openmpi-bin libopenmpi-dev)"
        return _prefix_unavailable(SYSTEM_OPENMPI_ENV, "mpi4py",
                                   "python -m venv DIR && MPICC=mpicc DIR/bin/pip install --no-binary mpi4py mpi4py")
    if lib == "mpich":
        return BENCH_PEERS["mpich"].unavailable()
    if lib == "mlx":
        return _prefix_unavailable(MLX_ENV, "mlx", 'python -m venv DIR && DIR/bin/pip install "mlx[cpu]"')
    raise ValueError(f"unknown peer {lib!r}; choose from {', '.join(PEERS)}")


def _rank_env(lib, env):
    """The ranks' environment: the peer's site-packages ahead of the path."""
    if lib == "mpich":
        _, libmpi, site = BENCH_PEERS["mpich"].paths()
        env = dict(env, MPI4PY_LIBMPI=libmpi, UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0")
    elif lib == "mlx":
        site = _site_packages(os.environ[MLX_ENV])
    else:
        site = _site_packages(os.environ[SYSTEM_OPENMPI_ENV])
        env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return dict(env, PYTHONPATH=os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p))


def _agent(names, hosts, workdir):
    """An rsh/ssh agent: `agent [-options] ADDRESS COMMAND...` runs COMMAND (a shell command line, as ssh would
    hand it to the remote shell) in the namespace host whose address is ADDRESS, under that namespace's name as
    its host name: the namespaces share one /dev/shm, and Open MPI names its shared-memory segments after the
    host name and the local rank, so two hosts of one name write into each other's segments."""
    cases = "\n".join(f"  {addr}) ns={name} ;;" for addr, name in zip(hosts, names))
    path = Path(workdir) / "netns-agent"
    path.write_text(textwrap.dedent("""\
        #!/bin/sh
        while [ "${1#-}" != "$1" ]; do shift; done
        case "$1" in
        %s
          *) echo "netns-agent: no namespace host has the address $1" >&2; exit 255 ;;
        esac
        shift
        exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
        """) % cases)
    path.chmod(0o755)
    return str(path)


def launch(lib, names, placement, addresses, worker, env, workdir, log):
    """Starts the job of peer `lib`: rank r on host placement[r] (names: the namespaces, addresses: theirs),
    each rank running the command `worker`; returns the processes to wait for (each its own process group)."""
    env = _rank_env(lib, env)
    n, per_host = len(placement), placement.count(0)
    hosts = addresses[:max(placement) + 1]
    start = dict(env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    in_host0 = ["ip", "netns", "exec", names[0]]
    if lib.startswith("openmpi"):
        hostfile = Path(workdir) / "hostfile"
        hostfile.write_text("".join(f"{h} slots={per_host}\n" for h in hosts))
        yield_mca = ("--mca", "mpi_yield_when_idle", "1") if lib == "openmpi-yield" else ()
        cmd = [MPIRUN, "-n", str(n), "--hostfile", str(hostfile), "--map-by", "slot", "--bind-to", "none",
               "--mca", "plm_rsh_agent", _agent(names, hosts, workdir), *OPENMPI_MCA, *yield_mca, *worker]
        return [subprocess.Popen(in_host0 + cmd, **start)]
    if lib == "mpich":
        mpiexec, _, _ = BENCH_PEERS["mpich"].paths()
        cmd = [mpiexec, "-n", str(n), "-hosts", ",".join(f"{h}:{per_host}" for h in hosts), "-launcher", "ssh",
               "-launcher-exec", _agent(names, hosts, workdir), "-iface", "eth0", *worker]
        return [subprocess.Popen(in_host0 + cmd, **start)]
    # mlx: each rank listens on its host's address, at a port of its own (ranks of one host share the address).
    base = 20000 + int.from_bytes(os.urandom(2), "little") % 20000
    ring = Path(workdir) / "mlx-hosts.json"
    ring.write_text("[" + ",".join(f'["{addresses[h]}:{base + r}"]' for r, h in enumerate(placement)) + "]")
    return [subprocess.Popen(["ip", "netns", "exec", names[h], *worker], **dict(
        start, env=dict(env, MLX_RANK=str(r), MLX_HOSTFILE=str(ring)))) for r, h in enumerate(placement)]


def stop(proc):
    """Ends a job's process and everything it started in its process group (mpirun's agents and daemons)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Mpi:
    """mpi4py's COMM_WORLD (whichever MPI library the peer's mpi4py loads)."""

    def __init__(self):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def all_reduce(self, x, out):
        self.comm.Allreduce(x, out, op=self.MPI.SUM)

    def barrier(self):
        self.comm.Barrier()

    def describe(self):
        # "Open MPI v4.1.4, package: Debian OpenMPI, ..." or "MPICH Version:      5.0.2 ...": name and version
        first = self.MPI.Get_library_version().strip().splitlines()[0]
        return " ".join(",".join(first.split(",")[:2]).split())

    def close(self):
        pass  # MPI_Finalize at exit


class Mlx:
    """MLX's ring group. The input becomes an MLX array once per vector (not timed: MLX's callers hold MLX
    arrays); each call's result is copied into out, as gloo copies its input first (both are in place)."""

    def __init__(self):
        import mlx.core as mx

        self.mx = mx
        self.group = mx.distributed.init(strict=True, backend="ring")
        self.rank, self.size = self.group.rank(), self.group.size()
        self.token, self.held = mx.zeros(1), (None, None)

    def all_reduce(self, x, out):
        if self.held[0] is not x:
            self.held = (x, self.mx.array(x))
        total = self.mx.distributed.all_sum(self.held[1], group=self.group)
        self.mx.eval(total)
        np.copyto(out, np.asarray(total))

    def barrier(self):  # MLX has no barrier: a one-element all-sum
        self.mx.eval(self.mx.distributed.all_sum(self.token, group=self.group))

    def describe(self):
        import importlib.metadata

        return f"mlx {importlib.metadata.version('mlx')} ring"

    def close(self):
        pass
