"""Each rank of a rendezvous is claimed by exactly one process: the first to claim it in the store holds it, and
a second process started with the same rank is told at once which process holds it (pycoll.DuplicateRank), and
records that for the job so that every rank still waiting for the job to form learns it too.

A claim is an add on the rank's counter (atomic on every store) followed by the owner's description; only the
process whose add returned 1 writes it."""

import os
import secrets
import socket

from pycoll.errors import DuplicateRank, Timeout

DUPLICATE_KEY = "pycoll/duplicate-rank"  # under a rendezvous's prefix: why that rendezvous cannot form
OWNER_WAIT = 2.0  # how long a second claimant waits for the first one's description (it writes it right away)

_process = {}  # pid -> this process's random token: a fork is another process


def _token():
    pid = os.getpid()
    if pid not in _process:
        _process.clear()
        _process[pid] = secrets.token_hex(8)
    return _process[pid]


def this_process():
    """This process in words: its pid and host."""
    return f"pid {os.getpid()} on host {socket.gethostname()}"


def _owner_value():
    return f"{_token()} {this_process()}".encode()


def _parse(value):
    token, _, words = value.decode(errors="replace").partition(" ")
    return token, words


def claims_key(rank):
    """The counter of ``rank``'s claims: set once any process joined as that rank."""
    return f"ranks/{rank}/claims"


def claimed_by_this_process(store, rank):
    """Whether ``store`` (a Rendezvous) holds a claim of ``rank`` by this very process: an earlier init of it."""
    key = f"ranks/{rank}/owner"
    return store.check(key) and _parse(store.get(key, 0.0))[0] == _token()


def claim(store, rank):
    """Claims ``rank`` in ``store`` (a Rendezvous) for this process; DuplicateRank, recorded for the whole
    rendezvous, when another process claimed it first."""
    if store.add(claims_key(rank), 1) == 1:
        store.set(f"ranks/{rank}/owner", _owner_value())
        return
    try:
        owner = _parse(store.get(f"ranks/{rank}/owner", OWNER_WAIT))[1]
    except Timeout:
        owner = "another process (it did not say which)"
    message = (f"rank {rank} was started twice: {this_process()} joined as rank {rank}, which {owner} had "
               "already registered; every process of a job needs its own rank (check RANK, or the launcher's "
               "equivalent, on each)")
    store.set(DUPLICATE_KEY, f"{rank} {message}".encode())
    raise DuplicateRank(message, rank=rank)


def check(store):
    """Raises the DuplicateRank recorded in ``store`` (a Rendezvous), if any."""
    if store.check(DUPLICATE_KEY):
        rank, _, message = store.get(DUPLICATE_KEY, 0.0).decode(errors="replace").partition(" ")
        raise DuplicateRank(message, rank=int(rank) if rank.isdigit() else None)
