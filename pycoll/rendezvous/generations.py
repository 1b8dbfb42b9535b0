"""Rendezvous generations: each init is its own rendezvous, its keys under a generation number every rank agrees on
through the store's counter, and a failure recorded for the job ends every rank's wait at once."""

import time

from pycoll.errors import AuthenticationError, PeerFailure, Timeout
from pycoll.rendezvous import rank_claims
from pycoll.rendezvous.file_store import FileStore
from pycoll.rendezvous.store_protocol import AUTH_FAILURE_KEY, check_timeout, key_bytes, key_list
from pycoll.rendezvous.tcp_store import create_store
from pycoll.rendezvous.wait_report import WaitReport, ranks_text

WATCH_INTERVAL = 0.2  # how often a rank waiting on the rendezvous checks for failures elsewhere


RENDEZVOUS_PREFIX = "pycoll/rdv"


class Rendezvous:
    """One rendezvous's view of a store, used like a store: every key lives under pycoll/rdv/<generation>/,
    so an init never reads what an earlier init of the job left in the same store (on a FileStore, or on a
    TCPStore still shutting down). check_failures() raises what was recorded for the whole job: a rank that
    failed the secret check at the store's server or at a peer. Given this process's ``rank`` and the
    ``world_size``, watch() also says at intervals which ranks it still waits for (wait_report)."""

    def __init__(self, store, generation, rank=None, world_size=None):
        self.store, self.generation = store, generation
        self.prefix = f"{RENDEZVOUS_PREFIX}/{generation}"
        self.timeout = store.timeout
        self.rank, self.world_size = rank, world_size
        self._report = WaitReport(self._progress) if rank is not None and world_size else None

    def _key(self, key):
        key_bytes(key)
        return f"{self.prefix}/{key}"

    def set(self, key, value):
        self.store.set(self._key(key), value)

    def get(self, key, timeout=None):
        """Like the store's get, but a failure recorded for the job ends the wait at once."""
        wait = self.timeout if timeout is None else check_timeout("timeout", timeout)
        try:
            return get_watching(self.store, self._key(key), time.monotonic() + wait, self.watch)
        except Timeout:
            raise Timeout(f"key {key!r} was not set within {wait:g} s") from None

    def add(self, key, n):
        return self.store.add(self._key(key), n)

    def check(self, keys):
        return self.store.check([self._key(k) for k in key_list(keys)])

    def check_failures(self):
        """Raises pycoll.AuthenticationError or pycoll.DuplicateRank if one was recorded; PeerFailure(rank=0) if
        the store is gone."""
        for key in (AUTH_FAILURE_KEY, self._key(AUTH_FAILURE_KEY)):  # the server's record, then the ranks'
            if self.store.check(key):
                raise AuthenticationError(self.store.get(key, 0.0).decode(errors="replace"))
        rank_claims.check(self)

    def watch(self):
        """What init's waits run between slices (get(), and the C bootstrap's every 100 ms): check_failures(),
        then a progress message when one is due."""
        self.check_failures()
        if self._report is not None:
            self._report.poll()

    def missing_ranks(self):
        """The ranks no process has joined this rendezvous as yet (their claims, rank_claims)."""
        keys = [rank_claims.claims_key(r) for r in range(self.world_size)]
        if self.check(keys):
            return []
        return [r for r, key in enumerate(keys) if not self.check(key)]

    def _progress(self, waited):
        where, missing = store_location(self.store), self.missing_ranks()
        if missing:
            started = "it was" if len(missing) == 1 else "they were"
            return (f"rank {self.rank}: waiting {waited:.0f} s for {ranks_text(missing)} of {self.world_size} to "
                    f"join the rendezvous at {where}; check that {started} started, with the same MASTER_ADDR "
                    "and MASTER_PORT as this rank (and the same PYCOLL_JOB_ID, where set), and did not fail "
                    f"before init (its output says why); init gives up after {self.timeout:g} s")
        return (f"rank {self.rank}: all {self.world_size} ranks joined the rendezvous at {where}, but set-up "
                f"has waited {waited:.0f} s for the others; check that the ranks reach each other's addresses "
                "(a firewall, or PYCOLL_SOCKET_IFNAME naming an interface the others cannot reach) and that none "
                f"is stopped (a debugger, SIGSTOP); init gives up after {self.timeout:g} s")

    def record_failure(self, exc):
        self.set(AUTH_FAILURE_KEY, str(exc).encode())

    def close(self):
        """The store belongs to whoever opened it."""


def get_watching(store, key, deadline, check):
    """store.get(key) in slices of WATCH_INTERVAL with ``check()`` (which raises to give up) in between, so that
    a failure elsewhere ends the wait at once; Timeout at ``deadline`` (time.monotonic())."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            return store.get(key, timeout=max(min(remaining, WATCH_INTERVAL), 0.0))
        except Timeout:
            if remaining <= WATCH_INTERVAL:
                raise
        check()


def rendezvous(launch, store=None, *, timeout=300.0, secret=None, env=None):
    """(the store this process opened or None, this rendezvous's Rendezvous or None for a single rank).

    Every rank's init adds one to a counter: the n-th init of a job on one store is generation
    (n - 1) // world_size. Rank 0's own TCPStore is new, so there the generation must be 0: a rank that gets
    more reached the previous rendezvous's server while rank 0 was closing it, and reconnects until the new
    one is up; so does one whose first request that closing server cut off."""
    if store is not None:
        if isinstance(store, FileStore):
            store = store.with_secret(secret)
        joined = Rendezvous(store, _next_generation(store, launch.world_size), launch.rank, launch.world_size)
        rank_claims.claim(joined, launch.rank)
        return None, joined
    if launch.world_size == 1:
        return None, None
    deadline = time.monotonic() + timeout
    while True:
        own = create_store(launch, timeout=timeout, secret=secret, env=env)
        try:
            generation = _own_generation(own, launch)
            if generation == 0:
                rank_claims.claim(Rendezvous(own, 0), launch.rank)
        except PeerFailure:
            own.close(linger=0)
            if launch.rank == 0 or time.monotonic() > deadline:
                raise
            generation = None
        except BaseException:
            own.close(linger=0)
            raise
        if generation == 0:
            return own, Rendezvous(own, 0, launch.rank, launch.world_size)
        own.close(linger=0)
        if time.monotonic() > deadline:
            raise Timeout(f"the rendezvous store at {own.host}:{own.port} still served a finished rendezvous "
                          f"after {timeout:g} s (rank 0 did not close its previous communicator)")
        time.sleep(0.05)


def _own_generation(own, launch):
    """The generation on rank 0's own store: 0, its only one, unless this process reached the server of a
    rendezvous it already took part in (rank 0 still closing it): then 1, and the caller reconnects. A process
    counted past the first world_size arrivals for another reason is an extra one (a rank started twice): it
    joins generation 0, where its claim of the rank says so."""
    generation = _next_generation(own, launch.world_size)
    if generation == 0 or launch.rank == 0:  # rank 0's store is the one it just made
        return 0
    return 1 if rank_claims.claimed_by_this_process(Rendezvous(own, 0), launch.rank) else 0


def _next_generation(store, world_size):
    return (store.add(f"{RENDEZVOUS_PREFIX}/arrivals", 1) - 1) // world_size


def store_location(store):
    """Where a store is, for messages: a FileStore's directory, a TCP store's host:port."""
    path = getattr(store, "path", None)
    if path:
        return str(path)
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    return f"{host}:{port}" if host else f"its {type(store).__name__}"
