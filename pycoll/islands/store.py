"""The store view an island's vendor communicator exchanges its unique id through. A vendor engine names its
keys after the vendor and its own count of communicators, so two islands of one vendor (on two hosts) would both
write "rank 0's id" under one key: each island gets its own prefix."""

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
