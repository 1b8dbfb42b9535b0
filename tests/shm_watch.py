"""The names created in /dev/shm as they appear, through inotify (ctypes): what a watcher on the host -- a test,
or another user attacking the segment names -- sees of a starting job's segments, however briefly they exist."""

import ctypes
import ctypes.util
import os
import select
import struct

SHM_DIR = "/dev/shm"
_IN_CREATE, _IN_MOVED_TO = 0x100, 0x80
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name (len bytes)

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class ShmWatch:
    """A watch on /dev/shm: names() gives the names created since the last call."""

    def __init__(self):
        self.fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if _libc.inotify_add_watch(self.fd, SHM_DIR.encode(), _IN_CREATE | _IN_MOVED_TO) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {SHM_DIR}")

    def names(self, timeout_s=0.0, also=()):
        """The names created since the last call, waiting up to timeout_s for the first one (or for one of the
        descriptors in `also` to become readable)."""
        ready, _, _ = select.select([self.fd, *also], [], [], timeout_s)
        if self.fd not in ready:
            return []
        out = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            at = 0
            while at < len(data):
                _, _, _, length = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0")
                out.append(name.decode(errors="replace"))
                at += _EVENT.size + length

    def close(self):
        os.close(self.fd)
