"""send and recv across islands: every message goes over `world` (pycoll's host transports, every rank) on a
host-staged copy, whichever islands the two ranks are in; a vendor's own send/recv would reach only its island.

A message is between two ranks, so there is no call description to agree on first: the receive checks the tag
and length as on the host backends. Sends and receives started with async_op=True are posted on world's
progress thread as they come, so an exchange (each rank sends to and receives from the other) cannot deadlock;
each one staged from device memory gets host memory of its own (not the communicator's scratch, which the next
call reuses), kept until it completes, and a receive into device memory is copied there when it is first seen
complete.
"""

from __future__ import annotations

import threading

import numpy as np

from pycoll.plugins import Call


def _own_host_copy(buf):
    """A host Buffer of buf's dtype and length, in host memory of its own."""
    arr = np.empty(max(buf.nbytes, 1), np.uint8)
    return buf._replace(ptr=arr.ctypes.data, memory="host", device_id=0, owner=arr)


class _CopiedOut:
    """The handle of an async receive into device memory: world's handle, and the copy of the host message into
    the caller's buffer once it has arrived (once, on the thread that first sees it done)."""

    def __init__(self, work, staged, buf, stage_out):
        self._work, self._staged, self._buf, self._stage_out = work, staged, buf, stage_out
        self._copied, self._lock = False, threading.Lock()
        self.algorithm = None

    def done(self):
        if not self._work.done():
            return False
        with self._lock:
            if not self._copied:
                self._copied = True
                if self._work.error() is None:
                    self._stage_out(self._staged, self._buf)
        return True

    def wait(self, timeout):
        return self._work.wait(timeout) and self.done()

    def error(self):
        return self._work.error()


class _Kept:
    """The handle of an async send from device memory: world's handle, keeping the host copy until it is done."""

    def __init__(self, work, staged):
        self._work, self._staged, self.algorithm = work, staged, None
        self.done, self.wait, self.error = work.done, work.wait, work.error


def run(ctx, call, async_op):
    """call (a send or a receive) over ctx.world: see the module's docstring."""
    send, recv = call.send, call.recv
    fields = dict(dest=call.dest, source=call.source, tag=call.tag)
    if send is not None:
        if send.memory == "host":
            return ctx.world.run(Call("send/recv", send=send, **fields), async_op)
        staged = _own_host_copy(send) if async_op else ctx.staging(send, "send")
        ctx.copy_in(staged, send)
        work = ctx.world.run(Call("send/recv", send=staged, **fields), async_op)
        return _Kept(work, staged) if async_op else work
    if recv.memory == "host":
        return ctx.world.run(Call("send/recv", recv=recv, **fields), async_op)
    staged = _own_host_copy(recv) if async_op else ctx.staging(recv, "recv")
    work = ctx.world.run(Call("send/recv", recv=staged, **fields), async_op)
    if async_op:
        return _CopiedOut(work, staged, recv, ctx.stage_out)
    ctx.stage_out(staged, recv)
    return work
