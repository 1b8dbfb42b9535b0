"""Creating a native communicator (backends cpu, shm, tcp) through the C bootstrap (native/bootstrap,
pycoll/bootstrap.h) -- the same calls a C program makes:

- ``pycoll.init()`` (launcher-driven): rank 0 makes a unique id and publishes it in the rendezvous store, the
  other ranks read it, then every rank calls ``pycoll_comm_init_rank`` with it.
- ``pycoll.get_unique_id()`` / ``pycoll.init_rank(unique_id, rank, world_size)``: no store; the program passes
  the id (128 bytes, and a secret: keep it private) by its own means -- Ray's object store, MPI, a file.

Connection set-up, authentication (HMAC with the id's secret), host detection, the choice of transport and
every deadline are in C.
"""

from __future__ import annotations

import functools

from pycoll import settings
from pycoll._bindings.comm import UNIQUE_ID_BYTES, NativeComm, unique_id_create
from pycoll.rendezvous.wait_report import WaitReport

UNIQUE_ID_KEY = "pycoll/unique_id"


def get_unique_id(ifname: str | None = None, *, toward: str | None = None) -> bytes:
    """A new unique id (pycoll_unique_id_create), ``UNIQUE_ID_BYTES`` bytes. It listens on interface
    ``ifname``'s address (default: ``PYCOLL_SOCKET_IFNAME``), else on the local address routed to host
    ``toward``, else on this host's first interface that is up and not loopback. The process that makes it must
    itself join with it (``init_rank``, any rank): its call serves the other ranks' registrations."""
    for name, value in (("ifname", ifname), ("toward", toward)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
    return unique_id_create(ifname, toward)


def share_unique_id(store, rank: int, timeout: float, master_addr: str, ifname: str | None) -> bytes:
    """Rank 0 makes the job's id, listening where the others reach it (the route toward master_addr, or
    ``ifname``), and publishes it in the rendezvous store; the others read it."""
    if rank == 0:
        unique_id = get_unique_id(ifname, toward=master_addr)
        store.set(UNIQUE_ID_KEY, unique_id)
        return unique_id
    return store.get(UNIQUE_ID_KEY, timeout)


def create_native(unique_id: bytes, rank: int, world_size: int, *, timeout: float, transport: str,
                  ifname: str | None = None, watch=None) -> NativeComm:
    """``pycoll_comm_init_rank_config`` with the settings pycoll's environment variables choose. ``watch``
    (e.g. the rendezvous's watch) runs every 100 ms while set-up waits: a failure recorded for the
    whole job -- a rank that failed the secret check, rank 0's store gone -- ends the wait at once, and is the
    error raised when set-up fails for a reason that follows from it (the root closing, a rank missing).
    Without one (init_rank: no store), set-up still says at intervals that it waits (_unaided_progress)."""
    if watch is None and world_size > 1:
        watch = WaitReport(functools.partial(_unaided_progress, rank, world_size, timeout)).poll

    return NativeComm.init_rank(unique_id, rank, world_size, transport=transport, timeout=float(timeout),
                                watch=watch, **_setup_settings(ifname))


def grow_native(native: NativeComm, unique_id: bytes | None, world_size: int, *, timeout: float, transport: str,
                ifname: str | None = None) -> NativeComm:
    """``pycoll_comm_grow_config`` over ``native`` with the settings create_native uses: rank 0's unique_id
    reaches the other members over ``native``, then the larger job's bootstrap runs."""
    watch = WaitReport(functools.partial(_grow_progress, native.rank, world_size, timeout)).poll
    return native.grow(unique_id, world_size, transport=transport, timeout=float(timeout), watch=watch,
                       **_setup_settings(ifname))


def _setup_settings(ifname):
    """What pycoll's environment variables choose for a new communicator (pycoll_init_config_t)."""
    from pycoll.algorithms import segment_bytes_from_env

    settings.check_values()
    spin_us = settings.get("PYCOLL_SPIN_US")  # unset: -1, the library's choice (pycoll_init_config_t.spin_ns)
    return dict(ifname=ifname or settings.get("PYCOLL_SOCKET_IFNAME"),
                ring_bytes=settings.get("PYCOLL_SHM_RING_BYTES") or 0, segment_bytes=segment_bytes_from_env(),
                spin_us=-1.0 if spin_us is None else max(0.0, spin_us))


def _grow_progress(rank, world_size, timeout, waited):
    return (f"rank {rank}: comm.grow has waited {waited:.0f} s for the ranks of the job growing to {world_size}; "
            f"check that every member calls grow({world_size}) and that each new process calls pycoll.join with "
            f"rank 0's unique id and world_size {world_size}; it gives up after {timeout:g} s")


def _unaided_progress(rank, world_size, timeout, waited):
    """What a rank joining by unique id alone can say: only the process that made the id learns which ranks
    registered (in C, which logs nothing)."""
    return (f"rank {rank}: pycoll.init_rank has waited {waited:.0f} s for the other ranks of {world_size}; check "
            f"that every rank calls init_rank with the same unique id and world_size {world_size} (the process "
            "that made the id included), and that the ranks reach each other's addresses (a firewall, or "
            f"PYCOLL_SOCKET_IFNAME); set-up gives up after {timeout:g} s")


__all__ = ["UNIQUE_ID_BYTES", "get_unique_id", "share_unique_id", "create_native", "grow_native"]
