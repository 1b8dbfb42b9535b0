"""FileStore: a rendezvous store in a directory every rank can see (mode 0700, files 0600, values HMAC'd with a
secret)."""

import contextlib
import fcntl
import hashlib
import hmac
import os
import threading
import time

from pycoll.errors import AuthenticationError, PycollError, Timeout
from pycoll.rendezvous import user_secret
from pycoll.rendezvous.store_protocol import U32, check_timeout, key_bytes, key_list, value_bytes


class FileStore:
    """A rendezvous store in a directory every rank can see. One file per key (named by the key's SHA-256),
    written to a temporary name and renamed into place so readers never see half a value; add() serialises
    on an flock'ed lock file; get() polls with exponential backoff.

    The directory is created mode 0700; an existing one must belong to this user and be closed to others
    (else PycollError), and every file is created 0600, so other users can neither read the values (the unique
    id among them) nor plant their own. With ``secret`` (bytes, the same on every rank) each value is stored
    with an HMAC-SHA256 of its key and bytes, and a value that fails it raises pycoll.AuthenticationError:
    what another process with write access there (a shared filesystem's other hosts) writes is refused."""

    _LOCK_NAME = ".lock"
    _MAC_LABEL = b"pycoll-filestore"

    def __init__(self, path, timeout=300.0, *, secret=None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
        self.path = os.fspath(path)
        self.timeout = check_timeout("timeout", timeout)
        self._secret = secret or None
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        os.close(user_secret.open_private_directory(
            self.path, follow_symlinks=True, remedy="chmod 700 it, or name a new directory (FileStore creates it)"))

    def with_secret(self, secret):
        """This store authenticated with ``secret`` where it has none of its own (init's secret or PYCOLL_SECRET
        reaches a FileStore handed to init, as it reaches the TCP store)."""
        return self if self._secret is not None or secret is None else FileStore(self.path, self.timeout,
                                                                                 secret=secret)

    def _file(self, raw_key):
        return os.path.join(self.path, hashlib.sha256(raw_key).hexdigest())

    def _mac(self, raw_key, value):
        return hmac.new(self._secret, self._MAC_LABEL + U32.pack(len(raw_key)) + raw_key + value,
                        hashlib.sha256).digest()

    def _write(self, raw_key, value):
        target = self._file(raw_key)
        temporary = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write((self._mac(raw_key, value) if self._secret else b"") + value)
        os.replace(temporary, target)

    def _read(self, raw_key):
        try:
            fd = os.open(self._file(raw_key), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        if self._secret is None:
            return data
        mac, value = data[:hashlib.sha256().digest_size], data[hashlib.sha256().digest_size:]
        if not hmac.compare_digest(mac, self._mac(raw_key, value)):
            raise AuthenticationError(f"the FileStore value of key {raw_key.decode(errors='replace')!r} in "
                                      f"{self.path} fails the secret check: written with another secret "
                                      "(every rank needs the same one) or by another process")
        return value

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.path, self._LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def set(self, key, value):
        self._write(key_bytes(key), value_bytes(value))

    def get(self, key, timeout=None):
        wait = self.timeout if timeout is None else check_timeout("timeout", timeout)
        raw_key = key_bytes(key)
        deadline = time.monotonic() + wait
        delay = 0.001
        while True:
            value = self._read(raw_key)
            if value is not None:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"key {key!r} was not set within {wait:g} s")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    def add(self, key, n):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        raw_key = key_bytes(key)
        with self._locked():
            current = self._read(raw_key)
            try:
                total = int(current or b"0") + n
            except ValueError:
                raise PycollError(f"add: key {key!r} holds a value that is not an integer") from None
            self._write(raw_key, str(total).encode())
        return total

    def check(self, keys):
        return all(os.path.exists(self._file(key_bytes(k))) for k in key_list(keys))

    def close(self):
        """Nothing to release; present so both stores are used alike."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
