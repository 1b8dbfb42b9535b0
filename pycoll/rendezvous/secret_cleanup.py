"""Removal of stale per-port secret files (pycoll.rendezvous.user_secret) by the next job that opens the directory:
one file per port ever used would pile up otherwise.

A file is stale when no store holds it (each holds its file under a shared flock for its life, so an exclusive
one is refused while any does) and nobody has read it for STALE_AFTER_S (every read sets its mtime). Both
matter: between the stores of a job that re-initialises on the port nobody holds the file, and removing it
then would give the ranks that read it before and after different secrets; they read it seconds apart, not an
hour. A reader takes its shared lock before it reads and, should the file have been unlinked meanwhile (link
count 0), publishes a new one: a removal and a read never interleave. The cost is bounded (at most
MAX_SCANNED names looked at and MAX_REMOVALS files removed a call), only in this user's private directory,
through its descriptor, never following a link."""

import fcntl
import os
import re
import stat
import time

from pycoll.errors import Timeout

STALE_AFTER_S = 3600.0
MAX_SCANNED = 1024
MAX_REMOVALS = 8
LOCK_WAIT_S = 5.0  # a cleanup holds its exclusive lock only while it checks and unlinks one file

# store-<port>.secret, and the temporary a publisher that died left (.store-<port>.secret.<pid>.<hex>)
_NAME = re.compile(r"\.?store-[0-9]+\.secret(\.[0-9]+\.[0-9a-f]+)?")


def remove_stale(dir_fd, *, keep):
    """Removes from directory ``dir_fd`` (this user's private one) up to MAX_REMOVALS stale secret files, oldest
    first, never ``keep`` (the name the caller is about to read); returns the names removed."""
    cutoff = time.time() - STALE_AFTER_S
    candidates = []
    with os.scandir(dir_fd) as entries:
        for scanned, entry in enumerate(entries):
            if scanned >= MAX_SCANNED:
                break
            if entry.name == keep or not _NAME.fullmatch(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if _unused_since(info, cutoff):
                candidates.append((info.st_mtime, entry.name))
    return [name for _, name in sorted(candidates)[:MAX_REMOVALS] if _remove_if_stale(dir_fd, name, cutoff)]


def lock_shared(fd, path):
    """A shared flock on ``fd`` (the secret file ``path``), waiting at most LOCK_WAIT_S for a cleanup's."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise Timeout(f"{path} stayed locked for {LOCK_WAIT_S:g} s: another process of this user holds "
                              "it exclusively") from None
            time.sleep(0.001)


def _unused_since(info, cutoff):
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mtime < cutoff


def _remove_if_stale(dir_fd, name, cutoff):
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # refused while a store holds it
        info = os.fstat(fd)
        if not _unused_since(info, cutoff) or info.st_nlink == 0:
            return False
        # Still the file under that name: only this user's processes write in the directory, and a publisher
        # never replaces an existing name.
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:  # BlockingIOError among them: in use
        return False
    finally:
        os.close(fd)
