"""The shared-memory backend: host memory, every rank on one host, pycoll's algorithms over rings in shared
memory (native/transport/shm_transport.c)."""

from __future__ import annotations

import os
import secrets

from pycoll import plugins
from pycoll._bindings.comm import NativeComm, shm_segment_bytes
from pycoll.algorithms import ALGORITHMS, segment_bytes_from_env
from pycoll.plugins.tcp import NativeEngine, TcpBackend, _share_cost_model, spin_us
from pycoll.rendezvous.store import gather

SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "pycoll-"


def ring_bytes_from_env():
    """PYCOLL_SHM_RING_BYTES (a power of two >= 4096), else 0: the transport's default (4 MiB)."""
    text = os.environ.get("PYCOLL_SHM_RING_BYTES")
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"PYCOLL_SHM_RING_BYTES must be a number of bytes, got {text!r}") from None
    if value < 4096 or value & (value - 1):
        raise ValueError(f"PYCOLL_SHM_RING_BYTES must be a power of two of at least 4096, got {value}")
    return value


def _pid_namespace():
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def create_native(rank, world_size, store, timeout, local_ranks=None, tcp_fds=None):
    """A NativeComm over shared memory among local_ranks (default: every rank). Each of them creates the
    segment of its incoming rings, publishes its name (under a key of its host's), opens every local peer's,
    and unlinks its own once every local rank has opened them all (a barrier through the store): from then on
    nothing is left in /dev/shm whatever happens to the processes.

    With tcp_fds (sockets to the ranks of other hosts, None for this host's: pycoll.plugins.cpu), the
    communicator runs over per-pair transports, shared memory within the host and TCP to the others; it owns
    those sockets from this call on, also when it fails."""
    local_ranks = list(range(world_size)) if local_ranks is None else list(local_ranks)
    ring_bytes = ring_bytes_from_env()
    key = f"pycoll/shm/{local_ranks[0]}"  # the host's lowest rank names its keys
    name = f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    path = os.path.join(SHM_DIR, name)
    fds = [None] * world_size
    pids = [0] * world_size
    try:
        fds[rank] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fds[rank], shm_segment_bytes(world_size, ring_bytes))
            mine = f"{name} {os.getpid()} {_pid_namespace()}".encode()
            alone = len(local_ranks) == 1  # nothing to exchange (and a job of one rank has no store)
            peers = [mine.decode().split()] if alone else [
                v.decode().split() for v in gather(store, f"{key}/names", rank, world_size, mine, timeout,
                                                   local_ranks)]
            for r, (peer_name, pid, pidns) in zip(local_ranks, peers):
                # A peer's pid means something only in this pid namespace.
                pids[r] = int(pid) if int(pidns) == _pid_namespace() else 0
                if r != rank:
                    fds[r] = os.open(os.path.join(SHM_DIR, peer_name), os.O_RDWR | os.O_CLOEXEC)
            if not alone:
                gather(store, f"{key}/opened", rank, world_size, b"1", timeout, local_ranks)
        finally:
            os.unlink(path)
    except BaseException:
        for fd in tcp_fds or ():
            if fd is not None:
                os.close(fd)
        _close_all(fds)
        raise
    try:
        # This host's ranks share its cores.
        spin = spin_us(len(local_ranks))
        if tcp_fds is None:
            return NativeComm.over_shm(rank, world_size, fds, pids, ring_bytes, timeout, spin,
                                       segment_bytes_from_env())
        return NativeComm.over_routed(rank, world_size, tcp_fds, fds, pids, ring_bytes, timeout, spin,
                                      segment_bytes_from_env())
    finally:
        _close_all(fds)


def _close_all(fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def default_cost_model():
    """auto's model over shared memory where `pycoll tune` stored none: the library's defaults are loopback
    TCP's. Fitted by bench/fit_shm_cost_model.py from `pycoll bench --backend shm --algorithm all` at 2 and 4
    ranks on the 2-core development host (bench/results/shm.md says when and how)."""
    from pycoll.tuning import CostModel

    return CostModel(**SHM_COST_MODEL)


# bench/fit_shm_cost_model.py's output for bench/results/shm_cost_model.md's runs.
SHM_COST_MODEL = dict(
    alpha_s=1e-06, beta_s_per_byte=2e-10, gamma_s_per_byte=1e-10,
    latency_scale={'ring': 1.1237, 'halving_doubling': 1.0964, 'mesh': 1.0034, 'recursive_doubling': 1.5135,
                   'shm': 0.5844},
    bandwidth_scale={'ring': 0.9172, 'halving_doubling': 0.8871, 'mesh': 1.0394, 'recursive_doubling': 0.8707,
                     'shm': 0.5918})


def other_hosts_message(backend, hosts):
    away = [r for r, h in enumerate(hosts.host_of) if h != hosts.host_of[0]]
    return (f"backend {backend!r} needs every rank on one host, but ranks {', '.join(map(str, away))} are on "
            f"another host than rank 0 ({hosts.count} hosts: different boot id, IPC or network namespace); "
            f"use backend='cpu' or 'tcp'")


class ShmBackend(TcpBackend):
    """TcpBackend's engine and algorithms over the shared-memory transport, plus that transport's native
    collectives (algorithm "shm": native/transport/shm_collectives.c)."""

    name = "shm"
    algorithms = tuple(ALGORITHMS)

    def probe(self):
        if not os.path.isdir(SHM_DIR):
            return f"{SHM_DIR} is missing (POSIX shared memory is not mounted)"
        return None

    def create(self, *, rank, world_size, store, timeout, options):
        hosts = options["hosts"]
        if hosts.count > 1:
            raise ValueError(other_hosts_message(self.name, hosts))
        # One rank too: its collectives are the shared-memory transport's (algorithm "shm" runs everywhere
        # this backend does).
        native = create_native(rank, world_size, store, timeout)
        _share_cost_model(native, rank, world_size, self.name, default_cost_model())
        return NativeEngine(native, timeout)


plugins.register(ShmBackend())
