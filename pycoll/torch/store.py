"""torch.distributed's store (a c10d Store: TCPStore, FileStore, PrefixStore, ...) as pycoll's rendezvous store,
so a pycoll process group meets through the store torch already set up (pycoll.rendezvous.store's protocol:
set, get with a timeout, add, check, close, timeout)."""

import time

from pycoll.errors import Timeout


class TorchStore:
    def __init__(self, store, timeout):
        self._store = store
        self.timeout = float(timeout)

    def set(self, key, value):
        self._store.set(key, value)

    def get(self, key, timeout=None):
        # Polls check() rather than blocking in the store's wait(), which logs a warning at every expiry, and
        # pycoll's rendezvous waits in short slices (get_watching).
        wait = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + wait
        delay = 0.001
        while not self._store.check([key]):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"key {key!r} was not set within {wait:g} s")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        return self._store.get(key)

    def add(self, key, n):
        return self._store.add(key, n)

    def check(self, keys):
        return self._store.check([keys] if isinstance(keys, str) else list(keys))

    def close(self):
        """The store belongs to torch."""
