"""Each collective across islands, as steps over three kinds of engine (pycoll.plugins.Engine, run with one
Call each): `inner`, this rank's island (its vendor's collectives, or pycoll's on host memory); `leaders`, the
islands' leaders over pycoll's host transports (on leaders only; its rank is the island's index); `world`, every
rank over pycoll's host transports.

Hierarchical (accuracy "fast"): inside each island, then between the leaders on host-staged copies, then inside
each island again. Every rank ends with the leaders' one result, so every rank's result is bitwise identical.
Host-staged flat (compensated and reproducible; in fast mode where the crossing model picks it for the call's
bytes, and the collectives with no hierarchical schedule): every rank's input is copied to the host and the
whole collective runs as pycoll's schedule over `world`, so its accuracy holds across vendors (vendors sum in
their own order).
A job of one island runs the island's own collective (vendor-only).

`ctx` (engine.IslandsEngine) gives: islands, island, island_rank, is_leader, size, inner, leaders, world, stage_in /
stage_out (this rank's memory <-> host), staging (the host Buffer a buffer is staged in) and copy_in (a copy into
it), copy (within this rank's memory; its last argument, the destination's Buffer, names the stream it follows),
scratch(name, like, count) (this rank's memory), host_scratch(name, like, count), and crossing
(crossing.CrossingModel, the same on every rank).
"""

from __future__ import annotations

import collections

import numpy as np

from pycoll import kernels
from pycoll.dtypes import FLOAT_DTYPES, OPS, float_dtype
from pycoll.islands.staging import host_array
from pycoll.plugins import ALL_DTYPES, Call

SUM, AVG = OPS["sum"], OPS["avg"]
# The leaders' all-reduce of more bytes than this runs in segments of this size, pipelined with the staging
# copies (_leader_result): large enough that a segment's fixed cost (a host collective's latency, a copy call)
# stays small beside its transfer, small enough that a large buffer has several segments to overlap.
STAGING_SEGMENT_BYTES = 4 << 20


def _run(engine, collective, send=None, recv=None, **fields):
    return engine.run(Call(collective, send, recv, **fields))


def _bytes(buf):
    return host_array(buf, np.uint8)


# -- steps inside this rank's island ---------------------------------------------------------------------------
def island_reduce(ctx, send, recv, op):
    """The island's reduction of send onto its leader's recv (recv: the leader's only)."""
    if ctx.island.size == 1:
        ctx.copy(recv.ptr, send.ptr, send.nbytes, recv)
    else:
        _run(ctx.inner, "reduce", send, recv if ctx.is_leader else None, op=op, root=0)


def island_broadcast(ctx, buf, root=0):
    if ctx.island.size > 1:
        _run(ctx.inner, "broadcast", recv=buf, root=root)


def island_all_gather(ctx, send, recv):
    if ctx.island.size == 1:
        ctx.copy(recv.ptr, send.ptr, send.nbytes, recv)
    else:
        _run(ctx.inner, "all_gather", send, recv)


def _divide(buf, size):
    """The end of an average: host Buffer buf /= size, integers truncating toward zero."""
    name = ALL_DTYPES[buf.dtype]
    kernels.scale_avg(host_array(buf, float_dtype(name) if name in FLOAT_DTYPES else np.dtype(name)), size)


def _segments(buf, segment_bytes):
    """(first element, elements) of each segment of at most segment_bytes covering buf, in order."""
    per = max(1, segment_bytes // buf.itemsize)
    return [(first, min(per, buf.count - first)) for first in range(0, buf.count, per)] or [(0, 0)]


def _part(buf, first, count):
    return buf._replace(ptr=buf.ptr + first * buf.itemsize, count=count)


def _leader_result(ctx, buf, op):
    """The leaders' all-reduce of the leader's island result in buf (this rank's memory), in place; avg is summed
    everywhere and divided once here, by the job's size (integers truncating toward zero).

    Past one segment (STAGING_SEGMENT_BYTES, the same on every leader, so every leader runs the same
    all-reduces), each segment's all-reduce is started on the leaders' communicator's progress thread as soon as
    the segment is on the host, and the segment before it is copied back while it runs: the copies to and from
    the device overlap the step between islands. Every leader segments alike, host leaders (no copies) too."""
    staged = ctx.staging(buf, "result")
    host_op = SUM if op == AVG else op
    segments = _segments(buf, STAGING_SEGMENT_BYTES)
    if len(ctx.islands) == 1 or len(segments) == 1:
        ctx.copy_in(staged, buf)
        if len(ctx.islands) > 1:
            _run(ctx.leaders, "all_reduce", staged, staged, op=host_op)
        _finish_segment(ctx, staged, buf, op)
        return
    running = collections.deque()
    try:
        for first, count in segments:
            part, staged_part = _part(buf, first, count), _part(staged, first, count)
            ctx.copy_in(staged_part, part)
            work = ctx.leaders.run(Call("all_reduce", staged_part, staged_part, op=host_op), async_op=True)
            running.append((staged_part, part, work))
            if len(running) > 1:
                _finish_running(ctx, running.popleft(), op)
        while running:
            _finish_running(ctx, running.popleft(), op)
    finally:
        for _, _, work in running:  # after a failure: the host buffers stay in use until each started one ends
            work.wait(None)


def _finish_running(ctx, segment, op):
    staged, buf, work = segment
    work.wait(None)
    error = work.error()
    if error is not None:
        raise error
    _finish_segment(ctx, staged, buf, op)


def _finish_segment(ctx, staged, buf, op):
    if op == AVG:
        _divide(staged, ctx.size)
    ctx.stage_out(staged, buf)


# -- the collectives -------------------------------------------------------------------------------------------
def _host_staged(ctx, call):
    """Whether a reduction runs host-staged flat: always for compensated and reproducible; in fast mode across
    islands, where the crossing model (crossing.py, the same on every rank) picks it for the call's bytes."""
    if call.accuracy != "fast":
        return True
    return len(ctx.islands) > 1 and ctx.crossing.choose(call.send.nbytes) == "host-staged"


def _without_crossing(ctx, call):
    """What a reduction runs as when it crosses no island -- host-staged flat where _host_staged picks it, the
    island's own collective in a one-island job (avg aside: it divides by the whole job's size) -- or None."""
    if _host_staged(ctx, call):
        return flat(ctx, call)
    if len(ctx.islands) == 1 and call.op != AVG:
        return _run(ctx.inner, call.collective, call.send, call.recv, op=call.op)
    return None


def all_reduce(ctx, call):
    ran = _without_crossing(ctx, call)
    if ran is not None:
        return ran
    send, recv, op = call.send, call.recv, call.op
    island_reduce(ctx, send, recv, SUM if op == AVG else op)
    if ctx.is_leader:
        _leader_result(ctx, recv, op)
    island_broadcast(ctx, recv)
    return "hierarchical"


def reduce(ctx, call):
    """Hierarchical: an all-reduce whose result only the root keeps (the other ranks' go to scratch)."""
    if _host_staged(ctx, call):
        return flat(ctx, call)
    recv = call.recv if call.recv is not None else ctx.scratch("reduce", call.send, call.send.count)
    return all_reduce(ctx, Call("all_reduce", call.send, recv, op=call.op, accuracy=call.accuracy))


def broadcast(ctx, call):
    buf, root = call.recv, call.root
    root_island = ctx.islands.of(root)
    at_root = ctx.island.index == root_island.index
    if at_root:
        island_broadcast(ctx, buf, root_island.ranks.index(root))
    if ctx.is_leader and len(ctx.islands) > 1:
        staged = ctx.stage_in(buf, "result") if at_root else ctx.host_scratch("result", buf, buf.count)
        _run(ctx.leaders, "broadcast", recv=staged, root=root_island.index)
        if not at_root:
            ctx.stage_out(staged, buf)
    if not at_root:
        island_broadcast(ctx, buf)
    return "hierarchical"


def _block_places(ctx, block):
    """(island-major offset, rank-major offset) of each rank's block of `block` bytes: island-major is islands
    in index order, each island's ranks in its order (what the leaders' _v collectives carry); rank-major is
    the job's rank order (what the caller's buffer holds)."""
    at = 0
    for island in ctx.islands:
        for rank in island.ranks:
            yield at, rank * block
            at += block


def all_gather(ctx, call):
    send, recv = call.send, call.recv
    if len(ctx.islands) == 1:
        return _run(ctx.inner, "all_gather", send, recv)
    count, size = send.count, ctx.size
    gathered = ctx.scratch("gather", send, ctx.island.size * count)
    island_all_gather(ctx, send, gathered)
    if ctx.is_leader:
        staged = ctx.stage_in(gathered, "gather")
        every = ctx.host_scratch("every", send, size * count)
        counts = np.array([island.size * count for island in ctx.islands], dtype=np.int64)
        _run(ctx.leaders, "all_gather_v", staged, every, counts=counts)
        ordered = ctx.host_scratch("result", send, size * count) if recv.memory != "host" else recv
        src, dst, block = _bytes(every), _bytes(ordered), count * send.itemsize
        for island_major, rank_major in _block_places(ctx, block):
            dst[rank_major:rank_major + block] = src[island_major:island_major + block]
        ctx.stage_out(ordered, recv)
    island_broadcast(ctx, recv)
    return "hierarchical"


def reduce_scatter(ctx, call):
    ran = _without_crossing(ctx, call)
    if ran is not None:
        return ran
    send, recv, op = call.send, call.recv, call.op
    count, itemsize = recv.count, recv.itemsize
    block = count * itemsize
    mine = ctx.scratch("island", recv, ctx.island.size * count)
    if ctx.is_leader:
        whole = ctx.scratch("whole", send, send.count)
        island_reduce(ctx, send, whole, SUM if op == AVG else op)
        staged = _bytes(ctx.stage_in(whole, "whole"))
        by_island = ctx.host_scratch("by_island", send, send.count)
        dst = _bytes(by_island)
        for island_major, rank_major in _block_places(ctx, block):
            dst[island_major:island_major + block] = staged[rank_major:rank_major + block]
        reduced = ctx.host_scratch("result", recv, ctx.island.size * count)
        counts = np.array([island.size * count for island in ctx.islands], dtype=np.int64)
        _run(ctx.leaders, "reduce_scatter_v", by_island, reduced, op=SUM if op == AVG else op, counts=counts)
        if op == AVG:
            _divide(reduced, ctx.size)
        ctx.stage_out(reduced, mine)
    else:
        island_reduce(ctx, send, None, SUM if op == AVG else op)
    island_broadcast(ctx, mine)
    ctx.copy(recv.ptr, mine.ptr + ctx.island_rank * block, block, recv)
    return "hierarchical"


def barrier(ctx, call):
    """The call's description exchange, which every call starts with, already waited for every rank."""
    return "host"


def flat(ctx, call):
    """Host-staged flat: every rank's input copied to the host, pycoll's schedule over every rank, the result
    copied back. What a rank has no buffer for (reduce's and gather's result off the root, scatter's input off
    the root) is neither staged nor copied."""
    send, recv = call.send, call.recv
    staged_send = ctx.stage_in(send, "send") if send is not None else None
    staged_recv = None
    if recv is not None:
        staged_recv = staged_send if recv is send else ctx.staging(recv, "recv")
    _run(ctx.world, call.collective, staged_send, staged_recv, op=call.op, accuracy=call.accuracy, root=call.root,
         counts=call.counts)
    if recv is not None:
        ctx.stage_out(staged_recv, recv)
    return "host-staged"


# Every collective across islands; those with no schedule of their own run host-staged flat (they move data
# without reducing it, or reduce on uneven blocks, so no island's vendor step would shorten them much).
SCHEDULES = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather,
             "broadcast": broadcast, "reduce": reduce, "barrier": barrier, "all_to_all": flat, "gather": flat,
             "scatter": flat, "all_gather_v": flat, "reduce_scatter_v": flat}
