"""A torch.distributed ProcessGroup over a pycoll Communicator (CPU tensors).

Collectives that DDP and the torch.distributed functions use start as pycoll non-blocking collectives, so they
run in call order on pycoll's progress thread; each returns a c10d Work made from a torch Future. The progress
thread runs no Python, so the futures are completed by one Python thread per group ("completer"), which waits
on the pycoll Works in call order (they complete in that order) and sets each future's result -- or its
exception: the pycoll error a blocking call would raise. Callbacks chained on those futures (DDP's) run there.
"""

from __future__ import annotations

import queue
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import pycoll
from pycoll.torch.store import TorchStore

BACKEND_NAME = "pycoll"

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}


def _op_name(reduce_op):
    for op, name in _OPS.items():
        if reduce_op == op:
            return name
    raise ValueError(f"reduceOp: pycoll has no {reduce_op} (it has sum, product, min, max, avg)")


def _host(t, name):
    if t.device.type != "cpu":
        raise TypeError(f"{name}: the pycoll torch backend takes CPU tensors, got one on {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t.detach()


def _single(tensors, name):
    if len(tensors) != 1:
        raise ValueError(f"{name}: one tensor per call, got {len(tensors)}")
    return _host(tensors[0], name)


class _Completer:
    """The thread that completes the torch futures of a group's pycoll Works, in call order."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="pycoll-torch-completer", daemon=True)
        self._thread.start()

    def add(self, work, future, value):
        self._queue.put((work, future, value))

    def _run(self):
        # Idle until the next Work or the stop sentinel (stop() sends it); each wait is bounded by the
        # collective's own deadline, and closing the communicator fails whatever is pending.
        while (item := self._queue.get()) is not None:
            work, future, value = item
            try:
                work.wait()
            except Exception as exc:  # noqa: BLE001 -- handed to the future's waiters, as c10d does
                future.set_exception(exc)
            else:
                future.set_result(value)

    def stop(self, timeout):
        self._queue.put(None)
        self._thread.join(timeout)


class PycollProcessGroup(dist.ProcessGroup):
    def __init__(self, comm, rank, size):
        super().__init__(rank, size)
        self.comm = comm
        self._completer = _Completer()

    def getBackendName(self):
        return BACKEND_NAME

    def _work(self, pycoll_work, value):
        future = torch.futures.Future()
        self._completer.add(pycoll_work, future, value)
        return _create_work_from_future(future)

    @staticmethod
    def _done(value):
        future = torch.futures.Future()
        future.set_result(value)
        return _create_work_from_future(future)

    def allreduce(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        t = _single(tensors, "allreduce")
        return self._work(self.comm.all_reduce(t, op, async_op=True), tensors)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        return self._work(self.comm.broadcast(_single(tensors, "broadcast"), root, async_op=True), tensors)

    def barrier(self, opts=None):
        return self._work(self.comm.barrier(async_op=True), [])

    def _allgather_base(self, output, input, opts=None):
        self.comm.all_gather(_host(input, "input"), _host(output, "output"))
        return self._done([output])

    def allgather(self, output_lists, inputs, opts=None):
        x = _single(inputs, "allgather")
        if len(output_lists) != 1 or len(output_lists[0]) != self.size():
            raise ValueError(f"allgather: one list of {self.size()} output tensors expected")
        flat = torch.empty((self.size(), *x.shape), dtype=x.dtype)
        self.comm.all_gather(x, flat.view(-1))
        for out, block in zip(output_lists[0], flat):
            out.copy_(block)
        return self._done(output_lists)

    def shutdown(self):
        self.comm.close()  # fails pending Works, which completes their futures
        self._completer.stop(timeout=10.0)


def create_process_group(store, rank, size, timeout):
    """torch.distributed's backend creator: a pycoll communicator that meets through torch's store."""
    seconds = timeout.total_seconds()
    comm = pycoll.init(rank=rank, world_size=size, store=TorchStore(store, seconds), timeout=seconds)
    return PycollProcessGroup(comm, rank, size)
