"""The store view an island's communicator (and the leaders') exchanges its unique id through. An engine names its
keys the same in every communicator it makes (a vendor's after the vendor and its own count of communicators, a
host one's "pycoll/unique_id"), so two islands would both write "rank 0's id" under one key: each communicator
gets its own prefix."""

from __future__ import annotations


class IslandStore:
    """set/get of `store` under `prefix`; `store` None (a job of one rank) keeps the keys in this process."""

    def __init__(self, store, prefix):
        self._store, self._prefix, self._local = store, prefix, {}

    def set(self, key, value):
        if self._store is None:
            self._local[key] = bytes(value)
        else:
            self._store.set(self._prefix + key, value)

    def get(self, key, timeout=None):
        if self._store is None:
            return self._local[key]
        return self._store.get(self._prefix + key, timeout)

    def watch(self):
        """The job store's watch: what it recorded for the whole job (a rank that failed the secret check),
        raised, so that the host bootstrap's wait ends at once; progress while it waits."""
        watch = getattr(self._store, "watch", None)
        if watch is not None:
            watch()


class HostExchange:
    """The store an island's vendor engine exchanges its ids through after a shrink, when the job's store may
    have died with its host: a host communicator of the island's survivors (`calls`: its all_gather, as
    pycoll.objects takes it). Rank 0's set and every other rank's get are one all-gather of rank 0's value, so
    they pair up in the order every rank makes them, as an engine's creations do."""

    def __init__(self, calls, rank):
        self._calls, self._rank = calls, rank

    def set(self, key, value):
        self._exchange(bytes(value))

    def get(self, key, timeout=None):
        return self._exchange(None)

    def _exchange(self, value):
        from pycoll.objects import all_gather_object
        return all_gather_object(self._calls, value)[0]
