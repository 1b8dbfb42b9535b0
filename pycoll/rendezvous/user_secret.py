"""A secret that only this user's processes on this host can read: the store's secret for a job whose ranks all
run here and that has no PYCOLL_SECRET.

Without it, whoever can connect to the rendezvous port -- any local user, on loopback -- could read the job's
unique id from the store and join as a rank. With it, the store authenticates every connection (mutual
HMAC, pycoll.rendezvous.handshake) with a key kept in a file only this user can open:

    $XDG_RUNTIME_DIR/pycoll-<uid>/store-<port>.secret   (else the same under the temporary directory)

The directory is mode 0700 and owned by this user, the file 0600; both are checked (owner, mode, no symbolic
link) before use, so another user who creates the directory first stops the job with an error naming it
instead of learning the secret. Every rank reads the file, or creates it when it is missing: the first one
publishes it complete and atomically (link() of a finished temporary file fails if another rank won), so no
rank waits for another and all read the same bytes. The file is kept for the next job on the port: it never
leaves the directory, so reusing it is as private as a new one, and deleting it while a rank of a job
re-initialising on the port is about to read it would give that rank a different secret. So a store holds its
file open under a shared flock for its life, every read marks the file used (its mtime), and the next job
removes only the files of other ports that no store holds and nobody has read for an hour
(pycoll.rendezvous.secret_cleanup).
"""

import errno
import os
import secrets
import stat
import tempfile
import weakref

from pycoll.errors import PycollError
from pycoll.rendezvous import secret_cleanup

SECRET_HEX_CHARS = 64  # 32 random bytes, hex


def directory():
    """This user's private directory's path (not created): under $XDG_RUNTIME_DIR when that is this user's
    (sudo may pass on another user's), else under the temporary directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    try:
        base = runtime if runtime and os.stat(runtime).st_uid == os.geteuid() else tempfile.gettempdir()
    except OSError:
        base = tempfile.gettempdir()
    return os.path.join(base, f"pycoll-{os.geteuid()}")


def secret_path(port):
    return os.path.join(directory(), f"store-{port}.secret")


_REMEDY = "remove it, or set PYCOLL_SECRET to the same value on every rank"


def check_private(st, path, what, remedy=_REMEDY):
    """Raises PycollError unless ``st`` (an os.stat_result of ``path``) is this user's and other users have no
    access to it; the message ends with ``remedy``."""
    if st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    elif st.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o}: other users can reach it"
    else:
        return
    raise PycollError(f"{what} {path} {problem}; pycoll keeps a job's secrets only where no other user can reach "
                      f"them (this user's, mode 0700 for a directory, 0600 for a file): {remedy}")


def open_private_directory(path, *, follow_symlinks, remedy=_REMEDY):
    """A file descriptor of directory ``path``, made mode 0700 if missing, after check_private. Without
    ``follow_symlinks`` a symbolic link in its place is refused (one in a shared /tmp may be a stranger's); with
    it, only one of another user's is (_check_link). Use the descriptor (dir_fd=), never ``path`` again: what
    ``path`` leads to may change after the check."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise PycollError(f"cannot create the private directory {path}: {exc.strerror}") from None
    flags = os.O_RDONLY | os.O_DIRECTORY | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        if follow_symlinks:
            _refuse_foreign_link(path, os.lstat(path))
        fd = os.open(path, flags)
    except OSError as exc:
        what = ("it is a symbolic link or not a directory" if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                else exc.strerror)
        raise PycollError(f"cannot use {path} as a private directory: {what}; {remedy}") from None
    try:
        info = os.fstat(fd)
        if follow_symlinks:
            _check_link(path, info, remedy)
        check_private(info, path, "directory", remedy)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_link(path, opened, remedy):
    """Raises PycollError when ``path`` is now a symbolic link of another user's (_refuse_foreign_link) or no
    longer leads to ``opened`` (the os.stat_result of the directory just opened through it): it was swapped
    meanwhile."""
    try:
        link = os.lstat(path)
        now = os.stat(path)
    except OSError as exc:
        raise PycollError(f"cannot use {path} as a private directory: it changed while it was opened "
                          f"({exc.strerror}); {remedy}") from None
    _refuse_foreign_link(path, link)
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        raise PycollError(f"cannot use {path} as a private directory: it was replaced while it was opened; "
                          f"{remedy}")


def _refuse_foreign_link(path, link):
    """Raises PycollError when ``link`` (the os.lstat of ``path``) is a symbolic link that neither this user nor
    root made: its owner could point it anywhere, and re-point it at will."""
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.geteuid(), 0):
        raise PycollError(f"{path} is a symbolic link owned by uid {link.st_uid}, not by this user (uid "
                          f"{os.geteuid()}) or root: another user could re-point it; name the directory itself, "
                          "or a link of your own")


def read_or_create(port):
    """The secret (bytes) for the store on ``port``, from this user's file, created if missing."""
    held = hold(port)
    held.close()
    return held.value


class HeldSecret:
    """The secret of one port (``value``, bytes, read from ``path``) with its file kept open under a shared
    flock until close(): secret_cleanup never removes a file that a store holds."""

    def __init__(self, value, path, fd):
        self.value, self.path = value, path
        self.close = weakref.finalize(self, os.close, fd)


def hold(port):
    """The secret for the store on ``port`` (created if missing), held (HeldSecret) for the store's life. Stale
    secret files of other ports are removed on the way (secret_cleanup)."""
    path = secret_path(port)
    name = os.path.basename(path)
    dir_fd = open_private_directory(directory(), follow_symlinks=False)
    try:
        secret_cleanup.remove_stale(dir_fd, keep=name)
        for _ in range(3):
            held = _open_held(dir_fd, name, path)
            if held is not None:
                return held
            _publish(dir_fd, name)
        raise PycollError(f"{path} was removed each time it was about to be read: another process of this user "
                          "deletes it; set PYCOLL_SECRET to the same value on every rank")
    finally:
        os.close(dir_fd)


def _open_held(dir_fd, name, path):
    """A HeldSecret of file ``name``, or None when there is none (any more)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PycollError(f"{path} is not a regular file; remove it")
        check_private(st, path, "file")
        secret_cleanup.lock_shared(fd, path)
        if os.fstat(fd).st_nlink == 0:  # a cleanup removed it before this lock: publish a new one
            os.close(fd)
            return None
        os.utime(fd)  # in use now: the cleanup leaves it alone for its age limit
        secret = os.pread(fd, SECRET_HEX_CHARS + 1, 0)
    except BaseException:
        os.close(fd)
        raise
    if len(secret) != SECRET_HEX_CHARS:
        os.close(fd)
        raise PycollError(f"{path} holds {len(secret)} bytes, not a pycoll secret of {SECRET_HEX_CHARS}; remove it")
    return HeldSecret(secret, path, fd)


def _publish(dir_fd, name):
    temporary = f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(SECRET_HEX_CHARS // 2).encode())
        try:
            os.link(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileExistsError:
            pass  # another rank published first: everyone uses that one
    finally:
        os.unlink(temporary, dir_fd=dir_fd)
