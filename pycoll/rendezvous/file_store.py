"""FileStore: a rendezvous store in a directory every rank can see (mode 0700, files 0600, values HMAC'd with a
secret), used only through the descriptor of the directory that was checked."""

import contextlib
import fcntl
import hashlib
import hmac
import os
import threading
import time
import weakref

from pycoll.errors import AuthenticationError, PycollError, Timeout
from pycoll.rendezvous import user_secret
from pycoll.rendezvous.store_protocol import U32, check_timeout, key_bytes, key_list, value_bytes

_REMEDY = "chmod 700 it, or name a new directory (FileStore creates it)"


class FileStore:
    """A rendezvous store in a directory every rank can see. One file per key (named by the key's SHA-256),
    written to a temporary name and renamed into place so readers never see half a value; add() serialises
    on an flock'ed lock file; get() polls with exponential backoff.

    The directory is created mode 0700; an existing one must belong to this user and be closed to others
    (else PycollError), and every file is created 0600, so other users can neither read the values (the unique
    id among them) nor plant their own. ``path`` may be a symbolic link of this user's (or root's) to such a
    directory; a link of another user's is refused. The directory is opened once and every later operation
    goes through that descriptor, never through ``path`` again: a link or directory swapped in afterwards is
    never used. close() releases the descriptor; a pickled store reopens ``path`` and must find the same
    directory. With ``secret`` (bytes, the same on every rank) each value is stored with an HMAC-SHA256 of its
    key and bytes, and a value that fails it raises pycoll.AuthenticationError: what another process with
    write access there (a shared filesystem's other hosts) writes is refused."""

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
        self._hold(user_secret.open_private_directory(self.path, follow_symlinks=True, remedy=_REMEDY))

    def _hold(self, fd):
        """Keeps ``fd`` (the checked directory) for this store's life; it is closed by close() or, for a store
        dropped unclosed (the copy with_secret hands to a rendezvous), when the store is collected."""
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)
        self._fd = fd
        self._release = weakref.finalize(self, os.close, fd)

    def _dir_fd(self):
        if not self._release.alive:
            raise PycollError(f"the FileStore at {self.path} is closed")
        return self._fd

    def with_secret(self, secret):
        """This store authenticated with ``secret`` where it has none of its own (init's secret or PYCOLL_SECRET
        reaches a FileStore handed to init, as it reaches the TCP store). The copy uses the same directory,
        through a duplicate of this store's descriptor."""
        if self._secret is not None or secret is None:
            return self
        if not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
        copy = object.__new__(FileStore)
        copy.path, copy.timeout, copy._secret = self.path, self.timeout, secret
        copy._hold(os.dup(self._dir_fd()))
        return copy

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout, "secret": self._secret, "identity": self._identity}

    def __setstate__(self, state):
        # A descriptor cannot be pickled: the path is opened and checked again, and must lead to the very
        # directory the original store checked.
        self.path, self.timeout, self._secret = state["path"], state["timeout"], state["secret"]
        fd = user_secret.open_private_directory(self.path, follow_symlinks=True, remedy=_REMEDY)
        self._hold(fd)
        if self._identity != state["identity"]:
            self.close()
            raise PycollError(f"the FileStore directory {self.path} is no longer the directory the store was made "
                              "with (it, or a link on its path, was replaced): make a new FileStore there")

    def _name(self, raw_key):
        return hashlib.sha256(raw_key).hexdigest()

    def _mac(self, raw_key, value):
        return hmac.new(self._secret, self._MAC_LABEL + U32.pack(len(raw_key)) + raw_key + value,
                        hashlib.sha256).digest()

    def _write(self, raw_key, value):
        dir_fd, target = self._dir_fd(), self._name(raw_key)
        temporary = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write((self._mac(raw_key, value) if self._secret else b"") + value)
        os.replace(temporary, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def _read(self, raw_key):
        try:
            fd = os.open(self._name(raw_key), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self._dir_fd())
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
        fd = os.open(self._LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=self._dir_fd())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _exists(self, raw_key):
        try:
            os.stat(self._name(raw_key), dir_fd=self._dir_fd(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

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
        return all(self._exists(key_bytes(k)) for k in key_list(keys))

    def close(self):
        """Releases the directory's descriptor; later operations raise PycollError. Idempotent."""
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
