"""pycoll's compensated ring (native/algorithms/ring.c) over a vendor communicator's send/recv, the arithmetic
on the device with an array module (pycoll.plugins.device_twosum): CuPy on a GPU, numpy on host memory (what the fake
vendor libraries in tests/fakes hand out as "device" memory).

The schedule and guarantees are the C ring's. The count is split into N blocks (the first count % N one
longer). Reduce-scatter: in step s rank r sends its partial of block r-s-1 to r+1 and receives block r-s-2 from
r-1, adding its own values to it; the partials travel as (sum, comp) pairs (float16/bfloat16 in float32
pairs), so nothing is lost on the way. After N-1 steps rank r holds all of block r and rounds it once (avg:
divides it once). All-gather ships the rounded values, so every rank ends with the same bits.

`comm` is a pycoll._bindings.vendor.NcclComm (anything with send_recv(send, send_count, send_peer, recv, recv_count,
recv_peer, dtype, stream) that blocks until both halves are done); buffers are pycoll Buffers.
"""

from __future__ import annotations

import contextlib

import numpy as np

from pycoll.plugins.device_twosum import ACCUMULATOR, PairMath

__all__ = ["COMPENSATED_DTYPES", "array_module", "ring_all_reduce", "ring_reduce_scatter", "ring_reduce"]

COMPENSATED_DTYPES = frozenset(ACCUMULATOR)
_ACC_IDS = {np.dtype(np.float32): 6, np.dtype(np.float64): 7}  # pycoll dtype ids of the pair types
_AVG = 4
_math = {}


def array_module(ptr: int):
    """cupy when ptr is CUDA device (or managed) memory and CuPy is installed, else numpy (host memory)."""
    try:
        import cupy
        kind = cupy.cuda.runtime.pointerGetAttributes(ptr).type
    except Exception:  # no CuPy, no CUDA driver, or not a pointer CUDA knows: host memory
        return np
    return cupy if kind in (2, 3) else np  # cudaMemoryTypeDevice, cudaMemoryTypeManaged


def _wrap(xp, ptr, count, dtype, owner):
    """An xp array of `count` elements over memory at ptr (no copy), owner keeping it alive."""
    dt = np.dtype(dtype)
    nbytes = count * dt.itemsize
    if xp is np:
        if nbytes == 0:
            return np.empty(0, dt)
        import ctypes
        return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dt)
    memory = xp.cuda.UnownedMemory(ptr, nbytes, owner)
    return xp.ndarray((count,), dt, xp.cuda.MemoryPointer(memory, 0))


def _ptr(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr


class _Ring:
    """One collective's state: the communicator, this rank's place in the ring, the math, the stream."""

    def __init__(self, comm, rank, size, stream, buf):
        self.comm, self.rank, self.size, self.stream = comm, rank, size, stream
        self.xp = array_module(buf.ptr)
        if self.xp not in _math:
            _math[self.xp] = PairMath(self.xp)
        self.math = _math[self.xp]
        self.dtype = buf.dtype
        self.plain = ACCUMULATOR[buf.dtype][0]
        self.acc_id = _ACC_IDS[np.dtype(ACCUMULATOR[buf.dtype][1])]

    def array(self, buf, count=None):
        return _wrap(self.xp, buf.ptr, buf.count if count is None else count, self.plain, buf.owner)

    def on_stream(self):
        """CuPy's kernels go on the collective's stream, ordered with NCCL's sends and receives."""
        if self.xp is np:
            return contextlib.nullcontext()
        return self.xp.cuda.ExternalStream(self.stream)

    def exchange(self, outgoing, to, incoming, source, dtype):
        """Send outgoing to rank `to` while receiving incoming from `source`; empty halves are skipped (both
        sides agree on every block's length)."""
        self.comm.send_recv(_ptr(outgoing), outgoing.size, to if outgoing.size else -1,
                            _ptr(incoming), incoming.size, source if incoming.size else -1, dtype, self.stream)

    def reduce_scatter(self, src, starts):
        """The (sum, comp) pair of this rank's block, summed over every rank (src: this rank's values)."""
        r, n_ranks = self.rank, self.size
        right, left = (r + 1) % n_ranks, (r - 1) % n_ranks

        def block(b):
            return src[starts[b]:starts[b + 1]]

        outgoing = self.math.load(block(left), self.dtype)
        for step in range(n_ranks - 1):
            b = (r - step - 2) % n_ranks
            incoming = self.xp.empty(2 * (starts[b + 1] - starts[b]), outgoing.dtype)
            self.exchange(outgoing, right, incoming, left, self.acc_id)
            outgoing = self.math.load(block(b), self.dtype)
            self.math.combine(outgoing, incoming)
        return outgoing

    def all_gather(self, out, starts):
        """Block r of out travels round the ring: rounded values, so every rank gets the same bits."""
        r, n_ranks = self.rank, self.size
        right, left = (r + 1) % n_ranks, (r - 1) % n_ranks
        for step in range(n_ranks - 1):
            b_send, b_recv = (r - step) % n_ranks, (r - step - 1) % n_ranks
            self.exchange(out[starts[b_send]:starts[b_send + 1]], right, out[starts[b_recv]:starts[b_recv + 1]],
                          left, self.dtype)


def _even_split(count, size):
    base, extra = divmod(count, size)
    return [b * base + min(b, extra) for b in range(size + 1)]


def _divisor(op, size):
    return size if op == _AVG else 1


def _finish(ring):
    """Return only once the stream's work is done, as the vendor calls do."""
    if ring.xp is not np:
        ring.xp.cuda.ExternalStream(ring.stream).synchronize()


def ring_all_reduce(comm, send, recv, op, rank, size, stream):
    """recv = sum (op 0) or average (op 4) of every rank's send, compensated; send may be recv."""
    ring = _Ring(comm, rank, size, stream, recv)
    starts = _even_split(recv.count, size)
    with ring.on_stream():
        src, out = ring.array(send), ring.array(recv)
        pair = ring.reduce_scatter(src, starts)
        ring.math.store(out[starts[rank]:starts[rank + 1]], pair, ring.dtype, _divisor(op, size))
        ring.all_gather(out, starts)
        _finish(ring)


def ring_reduce_scatter(comm, send, recv, op, rank, size, stream):
    """recv (m elements) = block `rank` of the sum (or average) of every rank's send (size * m elements)."""
    ring = _Ring(comm, rank, size, stream, recv)
    starts = [b * recv.count for b in range(size + 1)]
    with ring.on_stream():
        src, out = ring.array(send, size * recv.count), ring.array(recv)
        ring.math.store(out, ring.reduce_scatter(src, starts), ring.dtype, _divisor(op, size))
        _finish(ring)


def ring_reduce(comm, send, recv, op, root, rank, size, stream):
    """The ring reduce-scatter, then every rank's rounded block to root, into recv (used on root only)."""
    ring = _Ring(comm, rank, size, stream, send)
    starts = _even_split(send.count, size)
    with ring.on_stream():
        src = ring.array(send)
        out = ring.array(recv) if rank == root else ring.xp.empty(send.count, ring.plain)
        mine = out[starts[rank]:starts[rank + 1]]
        ring.math.store(mine, ring.reduce_scatter(src, starts), ring.dtype, _divisor(op, size))
        none = out[:0]
        for peer in range(size):
            if peer == root:
                continue
            if rank == root:
                ring.exchange(none, -1, out[starts[peer]:starts[peer + 1]], peer, ring.dtype)
            elif rank == peer:
                ring.exchange(mine, root, none, -1, ring.dtype)
        _finish(ring)
