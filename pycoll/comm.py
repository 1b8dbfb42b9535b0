"""The Communicator and pycoll.init(): the user-facing API (docs/api.md).

The Communicator turns the arguments into Buffers and checks what only Python sees (memory kind, dtypes, overlap);
the library checks the rest of each call (native/comm/call.c): in the host engines' own C call, and for every
other engine (vendor libraries, plugins) through pycoll_call_check before the engine is called.
"""

from __future__ import annotations

import atexit
import collections
import copy
import os
import sys
import time
import weakref

import numpy as np

from pycoll import flight_recorder, fused_norm, plugins, settings
from pycoll._bindings.comm import check_call
from pycoll.algorithms import (
    ACCURACIES,
    ACCURACY_ALIASES,
    ALGORITHMS,
    COLL_ALGORITHMS,
    accuracy_name,
    algorithm_name,
    default_algorithm,
)
from pycoll.buffers import as_buffer
from pycoll.dtypes import DTYPES as DTYPE_IDS, integer_argument, op_id
from pycoll.errors import CommunicatorClosed, PycollError, Timeout, check_process
from pycoll.plugins import Call
from pycoll.rendezvous import grow_store, launch_env
from pycoll.work import Work

DTYPE_NAMES = plugins.ALL_DTYPES  # index = pycoll dtype id
OP_NAMES = plugins.ALL_OPS        # index = pycoll op id
CLOSE_WAIT_S = 5.0  # the most close() waits in all for the other ranks (capped by the communicator's timeout)

_open_communicators: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


def _forget_at_fork():
    # A fork's child holds copies of the parent's communicators, whose connections and shared memory stay the
    # parent's: its exit must not close them (using one raises WrongProcess).
    _open_communicators.clear()


os.register_at_fork(after_in_child=_forget_at_fork)


@atexit.register
def _close_at_exit():
    # A clean close tells peers that this rank is done, so a rank that finishes first is not mistaken for
    # one that crashed by peers still completing their last collective.
    for comm in list(_open_communicators):
        try:
            comm.close()
        except Exception as exc:  # noqa: BLE001 -- too late to raise, but never silent
            sys.stderr.write(f"pycoll: rank {comm.rank}: closing the communicator at exit: "
                             f"{type(exc).__name__}: {exc}\n")


def check_no_overlap(a, name_a, b, name_b, what, in_place, own_block=None):
    """ValueError naming both when Buffers a and b share memory. Exact aliasing (the same start and the same
    bytes) passes where `in_place` says the call runs in place; so does `a` being exactly b's block at byte
    offset `own_block`, where the collective copies a into that block before it writes anything else (an
    all-gather in place, as NCCL and torch's FSDP use it). Any other overlap would have the collective read what
    it already overwrote (or the reverse), silently wrong. The one copy of this rule: every collective's
    arguments and GradientBuckets' arrays pass through it."""
    if a.memory != b.memory or a.device_id != b.device_id or not a.nbytes or not b.nbytes:
        return
    if not (a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes):
        return
    if in_place and a.ptr == b.ptr and a.nbytes == b.nbytes:
        return
    if own_block is not None and a.ptr == b.ptr + own_block:
        return  # a lies within b (it overlaps b and starts inside it), so its length is one block
    where = (f"{name_a} is bytes [{a.ptr:#x}, {a.ptr + a.nbytes:#x}), {name_b} is bytes "
             f"[{b.ptr:#x}, {b.ptr + b.nbytes:#x})")
    rule = ("only the very same memory (in place) may be shared" if in_place
            else f"{what} is not in place: pass separate memory")
    raise ValueError(f"{name_b} overlaps {name_a} in {what} ({where}); {rule}")


class Communicator:
    """A group of ranks that run collectives together. Create with pycoll.init()."""

    def __init__(self, engine=None, *, rank=None, size=None, backend=None, store=None, timeout=300.0, hosts=None,
                 ranks=None, accepted=None):
        if engine is None or backend is None or rank is None or size is None:
            raise TypeError("pycoll.Communicator is not created directly: call pycoll.init() (rank and world size "
                            "from the launcher or its arguments) or pycoll.init_rank(unique_id, rank, world_size)")
        self._engine = engine
        self._rank = rank
        self._size = size
        self._backend = backend
        self._store = store
        self._timeout = timeout
        self.last_algorithm = None
        self._failed = False
        self._failure = None  # the PycollError that broke it, raised again by GradientBuckets.ready()
        self._pid = os.getpid()  # its connections are this process's (not a fork's child's)
        self._default_algorithm = default_algorithm()
        if hosts is None:
            from pycoll.rendezvous.hosts import Hosts
            hosts = Hosts.from_identities([""] * size, rank)
        self._hosts = hosts
        self._ranks = tuple(range(size)) if ranks is None else tuple(ranks)
        self._children = weakref.WeakSet()  # splits of this communicator: closed with it
        # Works not yet seen complete, in call order (they complete in that order): they hold the arrays of
        # their collectives, which must outlive them even when the caller drops the Work.
        self._pending = collections.deque()
        # What the checks below accept: the same for every communicator of a backend (a split takes its parent's).
        self._accepted = accepted if accepted is not None else self._accepted_arguments()
        self._fast = engine.fast_path(self._accepted)
        _open_communicators.add(self)

    def _accepted_arguments(self):
        """Every op, algorithm and accuracy name and every NumPy dtype this communicator accepts, with its id,
        found by asking the checks below: what the engine's fast path takes is exactly what they allow."""
        def accepted(check, names, ids):
            table = {}
            for name in names:
                try:
                    table[name] = ids[check(name)]
                except (TypeError, ValueError):
                    pass
            return table
        dtypes = {}
        for name in self._backend.dtypes:
            try:
                dtypes[np.dtype(name).name] = DTYPE_IDS[name]
            except TypeError:  # a dtype NumPy does not know without ml_dtypes (bfloat16): the general path's
                pass
        # The fast path takes one table for all_reduce and reduce_scatter: a name both map to the same id ("auto"
        # differs where PYCOLL_ALGORITHM names an all-reduce-only algorithm: the general path handles it then).
        all_reduce, reduce_scatter = (accepted(lambda name, c=c: self._algorithm(name, c), ["auto", *ALGORITHMS],
                                               ALGORITHMS) for c in ("all_reduce", "reduce_scatter"))
        return {"ops": accepted(self._op, OP_NAMES, range(len(OP_NAMES))),
                "algorithms": {name: i for name, i in all_reduce.items() if reduce_scatter.get(name, i) == i},
                "accuracies": accepted(self._accuracy, [*ACCURACIES, *ACCURACY_ALIASES], ACCURACIES),
                "dtypes": dtypes}

    rank = property(lambda self: self._rank, doc="This process's rank, 0 <= rank < size.")
    size = property(lambda self: self._size, doc="The number of ranks.")
    backend = property(lambda self: self._backend.name, doc="The backend's name.")
    transport = property(lambda self: (self._engine and self._engine.transport) or self._backend.name,
                         doc='What the collectives run over: "shm", "tcp" or "shm+tcp" for the host backends '
                             '(the C bootstrap chose it, the same on every rank), else the backend\'s name.')
    hosts = property(lambda self: self._hosts.count, doc="The number of hosts the ranks are on (rendezvous: ranks "
                     "share a host when they share boot id, IPC and network namespace).")
    local_rank = property(lambda self: self._hosts.local_rank, doc="This rank's index among its host's ranks.")
    local_size = property(lambda self: self._hosts.local_size, doc="The number of ranks on this rank's host.")
    ranks = property(lambda self: list(self._ranks), doc="The members' ranks in the communicator this one was "
                     "split from (range(size) for one made by init).")

    def __repr__(self):
        state = "closed" if self._engine is None else "open"
        return f"<pycoll.Communicator rank={self._rank} size={self._size} backend={self.backend!r} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- argument checks shared by the collectives --------------------------------------------------------
    def _engine_or_raise(self):
        if self._pid != os.getpid():
            check_process(self._pid, "this communicator")
        if self._engine is None:
            raise CommunicatorClosed("communicator is closed")
        return self._engine

    def _buffer(self, x, name, writable):
        buf = as_buffer(x, name=name, writable=writable)
        backend = self._backend
        if buf.memory != backend.memory:
            raise TypeError(f"{name} is in {buf.memory} memory, but backend {backend.name!r} takes "
                            f"{backend.memory} memory")
        if DTYPE_NAMES[buf.dtype] not in backend.dtypes:
            raise TypeError(f"{name}: backend {backend.name!r} does not support dtype {DTYPE_NAMES[buf.dtype]}")
        return buf

    def _op(self, op):
        oid = op_id(op)
        if OP_NAMES[oid] not in self._backend.ops:
            raise ValueError(f"op: backend {self.backend!r} does not support {OP_NAMES[oid]!r}")
        return oid

    def _algorithm(self, algorithm, collective):
        # PYCOLL_ALGORITHM stands for "auto" only where the collective has it (e.g. recursive_doubling is an
        # all-reduce only); a name the caller passes is the caller's, refused by a collective without it.
        default = self._default_algorithm
        name = algorithm_name(algorithm, default if default in COLL_ALGORITHMS[collective] else "auto")
        if name not in self._backend.algorithms:
            raise ValueError(f"algorithm: backend {self.backend!r} does not support {name!r}; "
                             f"it has {', '.join(self._backend.algorithms)}")
        return name

    def _accuracy(self, accuracy):
        name = accuracy_name(accuracy)
        if name not in self._backend.accuracies:
            hint = ""
            if name == "reproducible":  # pycoll's schedules and kernels; vendor collectives are not its own
                hint = ("; reproducible sums run pycoll's own schedules, on host memory or CUDA memory: use backend "
                        "'nccl' with CUDA arrays, or 'cpu', 'shm' or 'tcp' with host arrays")
            raise ValueError(f"accuracy: backend {self.backend!r} does not support {name!r}{hint}")
        return name

    @staticmethod
    def _same_dtype(a, b, name_a, name_b):
        if a.dtype != b.dtype:
            raise TypeError(f"{name_b} has dtype {DTYPE_NAMES[b.dtype]} but {name_a} has {DTYPE_NAMES[a.dtype]}")

    def _result_buffer(self, send, out, what):
        """Where a reduction's result goes: x itself (in place) or out, of x's dtype (and x's memory exactly or
        none of it)."""
        if out is None:
            return send
        recv = self._buffer(out, "out", writable=True)
        self._same_dtype(send, recv, "x", "out")
        check_no_overlap(send, "x", recv, "out", what, in_place=True)
        return recv

    def _pair(self, x, out, what, own_block=None):
        """Buffers of x and out, one dtype, in separate memory, except that x may be out's block at byte offset
        own_block ("rank": this rank's block of x's length), which the collective copies x into first."""
        send = self._buffer(x, "x", writable=False)
        recv = self._buffer(out, "out", writable=True)
        self._same_dtype(send, recv, "x", "out")
        if own_block == "rank":
            own_block = self._rank * send.nbytes
        check_no_overlap(send, "x", recv, "out", what, in_place=False, own_block=own_block)
        return send, recv

    def _rank_argument(self, value, name):
        """An integer that a call's rank field holds (32 bits); the library checks that it is a rank here."""
        value = integer_argument(value, name)
        if not -2 ** 31 <= value < 2 ** 31:
            raise ValueError(f"{name} must be a rank in [0, {self._size}), got {value}")
        return value

    def _ran(self, algorithm):
        """After the fast path: True when it ran the collective (`algorithm` is what ran), False when it left
        the call to the general path (`algorithm` is None)."""
        if algorithm is None:
            return False
        self.last_algorithm = algorithm
        return True

    def _run(self, collective, *args):
        try:
            result = collective(*args)
        except BaseException as exc:  # a failure, or Ctrl-C mid-collective: the peers are not coming back
            self._mark_failed(exc)
            raise
        self._drop_completed()
        return result

    def _drop_completed(self):
        """Forget the Works seen complete, oldest first (they complete in call order), with their arrays. A
        vendor Work that wait() left to the device (Work.wait) is kept until its end event has passed: its arrays
        must outlive the collective even when the caller has dropped them."""
        pending = self._pending
        while pending and pending[0]._handle.done():
            pending.popleft()

    @staticmethod
    def _async(async_op):
        if async_op is not True and async_op is not False:
            raise TypeError(f"async_op must be True or False, got {async_op!r}")
        return async_op

    def _mark_failed(self, exc):
        self._failed = True
        # What broke it: an error of a collective that ran. Not a bad argument, nor a call that waited in vain
        # for another thread's turn (it sent nothing: the communicator goes on).
        if self._failure is None and isinstance(exc, PycollError) and getattr(exc, "sent", True) and \
                not isinstance(exc, CommunicatorClosed):
            self._failure = exc

    def _raise_failure(self):
        """Raise the error that broke this communicator (the one its collective raised: PeerFailure, Timeout,
        MismatchError, ...), or CommunicatorClosed once it is closed; nothing while it is usable."""
        if self._failure is not None:
            raise copy.copy(self._failure).with_traceback(None)  # a fresh one: no earlier call's traceback
        self._engine_or_raise()

    def _call(self, call, async_op, result, keep, *, records=True, checked=False):
        """Run a Call on the engine: blocking, return `result` (last_algorithm says what ran, where `records`);
        async_op, queue it and return its Work, which keeps `keep` (the caller's arrays) alive. The library's
        rules are checked first, here unless the engine's own C call checks them (or `checked`: a call the C
        rules do not describe, which the caller checked)."""
        engine = self._engine_or_raise()
        if not (engine.validates_calls or checked):
            check_call(call, self._rank, self._size)
        if not self._async(async_op):
            algorithm = self._run(engine.run, call)
            if records:
                self.last_algorithm = algorithm
            return result
        self._drop_completed()
        try:
            handle = engine.run(call, True)
        except BaseException as exc:
            self._mark_failed(exc)
            raise
        work = Work(handle, result, keep, on_error=self._mark_failed)
        self._pending.append(work)
        return work

    # -- collectives ----------------------------------------------------------------------------------------
    def all_reduce(self, x, op="sum", *, out=None, algorithm="auto", accuracy="fast", async_op=False):
        """Reduce x across ranks; every rank gets the result. In place when out is None. Returns the result;
        with async_op=True a pycoll.Work whose wait() returns it.

        op="avg" is the sum divided by the number of ranks; on integer dtypes the sum wraps on overflow as "sum"
        does and the division truncates toward zero (C division, as NCCL's avg): -3 and 0 on 2 ranks give -1.
        """
        fast = self._fast
        if fast is not None and async_op is False and \
                self._ran(self._run(fast.all_reduce, x, op, out, algorithm, accuracy)):
            return x if out is None else out
        self._engine_or_raise()
        send = self._buffer(x, "x", writable=out is None)
        recv = self._result_buffer(send, out, "all_reduce")
        call = Call("all_reduce", send, recv, op=self._op(op),
                    algorithm=self._algorithm(algorithm, "all_reduce"),
                    accuracy=self._accuracy(accuracy))
        return self._call(call, async_op, x if out is None else out, (x, out))

    def reduce_scatter(self, x, out, op="sum", *, counts=None, algorithm="auto", accuracy="fast", async_op=False):
        """x holds size * len(out) elements; rank r gets the reduction of block r in out. With counts (size
        non-negative ints, the same on every rank): x holds sum(counts), out counts[rank] (ring only)."""
        if counts is not None:
            return self._reduce_scatter_v(x, out, op, counts, algorithm, accuracy, async_op)
        fast = self._fast
        if fast is not None and async_op is False and \
                self._ran(self._run(fast.reduce_scatter, x, out, op, algorithm, accuracy)):
            return out
        self._engine_or_raise()
        send, recv = self._pair(x, out, "reduce_scatter")
        call = Call("reduce_scatter", send, recv, op=self._op(op),
                    algorithm=self._algorithm(algorithm, "reduce_scatter"),
                    accuracy=self._accuracy(accuracy))
        return self._call(call, async_op, out, (x, out))

    def all_gather(self, x, out, *, counts=None, async_op=False):
        """out holds size * len(x) elements; block r comes from rank r. With counts (size non-negative ints, the
        same on every rank): x holds counts[rank] elements, out sum(counts), rank r's from counts[0] + ... +
        counts[r-1] on."""
        if counts is not None:
            return self._all_gather_v(x, out, counts, async_op)
        fast = self._fast
        if fast is not None and async_op is False and self._ran(self._run(fast.all_gather, x, out)):
            return out
        self._engine_or_raise()
        send, recv = self._pair(x, out, "all_gather", own_block="rank")
        return self._call(Call("all_gather", send, recv), async_op, out, (x, out))

    def broadcast(self, x, root=0, *, async_op=False):
        """Copy root's x to every rank, in place."""
        fast = self._fast
        if fast is not None and async_op is False and self._ran(self._run(fast.broadcast, x, root)):
            return x
        self._engine_or_raise()
        buf = self._buffer(x, "x", writable=True)
        return self._call(Call("broadcast", recv=buf, root=self._rank_argument(root, "root")), async_op, x, (x,))

    def reduce(self, x, root=0, op="sum", *, out=None, accuracy="fast", async_op=False):
        """Reduce x onto root: into out there (x itself when out is None). Other ranks' buffers are unchanged."""
        fast = self._fast
        if fast is not None and async_op is False and self._ran(self._run(fast.reduce, x, root, op, out, accuracy)):
            return x if out is None else out
        self._engine_or_raise()
        root = self._rank_argument(root, "root")
        send = self._buffer(x, "x", writable=out is None and self._rank == root)
        recv = self._result_buffer(send, out, "reduce") if self._rank == root else None
        call = Call("reduce", send, recv, op=self._op(op), root=root, accuracy=self._accuracy(accuracy))
        return self._call(call, async_op, x if out is None else out, (x, out))

    def barrier(self, *, async_op=False):
        """Return once every rank has entered the barrier (with async_op=True: a Work that completes then)."""
        fast = self._fast
        if fast is not None and async_op is False:
            self.last_algorithm = self._run(fast.barrier)
            return None
        return self._call(Call("barrier"), async_op, None, None)

    # -- point to point ---------------------------------------------------------------------------------------
    @staticmethod
    def _tag(tag):
        tag = integer_argument(tag, "tag")
        if not 0 <= tag < 2 ** 32:
            raise ValueError(f"tag must be in [0, 2**32), got {tag}")
        return tag

    def send(self, x, dst, tag=0, *, async_op=False):
        """Send x to rank dst. Messages from one rank to another arrive in the order they were sent; the
        receive must name the same tag and length (else MismatchError naming both). Blocking: returns once x
        may be reused. Sends and receives started with async_op=True one after another are posted together,
        so an exchange (each rank sends to and receives from the other) cannot deadlock."""
        if self._fast is not None and async_op is False and self._run(self._fast.send, x, dst, tag):
            return None
        message = dict(send=self._buffer(x, "x", writable=False), dest=self._rank_argument(dst, "dst"))
        return self._call(Call("send/recv", tag=self._tag(tag), **message), async_op, None, (x,), records=False)

    def recv(self, x, src, tag=0, *, async_op=False):
        """Receive into x the next message from rank src, which must have this tag and x's length in bytes.
        Returns x (with async_op=True, a Work whose wait() returns it)."""
        if self._fast is not None and async_op is False and self._run(self._fast.recv, x, src, tag):
            return x
        message = dict(recv=self._buffer(x, "x", writable=True), source=self._rank_argument(src, "src"))
        return self._call(Call("send/recv", tag=self._tag(tag), **message), async_op, x, (x,), records=False)

    # -- subgroups -------------------------------------------------------------------------------------------
    def split(self, color, key=0):
        """A new communicator of the ranks that pass the same color (an int >= 0), numbered by key, then by rank
        here; None where color is None. Every rank of this communicator calls it (one small all-gather). The
        new one runs over this one's connections -- no new sockets, segments or rendezvous -- and is a full
        Communicator (`ranks` lists its members' ranks here). Ranks that share several communicators of one
        family (this one and its splits) must call collectives on them in the same order; an error in one
        breaks them all. Closing this communicator closes its splits."""
        if color is not None:
            color = integer_argument(color, "color")
            if not 0 <= color < 2 ** 31:
                raise ValueError(f"color must be None or in [0, 2**31), got {color}")
        key = integer_argument(key, "key")
        if not -2 ** 31 <= key < 2 ** 31:
            raise ValueError(f"key must fit in 32 bits, got {key}")
        engine = self._engine_or_raise()
        child = self._run(engine.split, -1 if color is None else color, key)
        if child is None:
            return None
        ranks = child.parent_ranks
        from pycoll.rendezvous.hosts import Hosts
        hosts = Hosts.from_identities([self._hosts.host_of[r] for r in ranks], child.rank)
        comm = Communicator(child, rank=child.rank, size=len(ranks), backend=self._backend, timeout=self._timeout,
                            hosts=hosts, ranks=ranks, accepted=self._accepted)
        comm._parent = self  # its connections are the root's: the parent must outlive it (mesh = init().mesh())
        self._children.add(comm)
        return comm

    # -- surviving a lost rank (docs/fault_tolerance.md) --------------------------------------------------------
    def revoke(self):
        """From any thread, without waiting: every rank's pending and later collectives on this communicator's
        family (it, the one it was split from, its splits) raise CommunicatorRevoked; shrink() goes on."""
        self._engine_or_raise().revoke()
        self._failed = True

    def agree(self, flag, *, timeout=None):
        """Fault-tolerant agreement: the bitwise AND of `flag` (an int) over the live ranks, the same on every
        rank that returns, also after a PeerFailure, a Timeout or a revoke, and when ranks die during it (they
        are left out: failed_ranks). Every live rank calls it."""
        flag = integer_argument(flag, "flag")
        if not -2 ** 63 <= flag < 2 ** 63:
            raise ValueError(f"flag must fit in 64 bits, got {flag}")
        engine = self._engine_or_raise()
        try:
            return engine.agree(flag, self._wait_s(timeout))
        except BaseException:
            self._failed = True
            raise

    def _other_rank(self, peer, name):
        """Another rank of this communicator (shrink's exclude: no call of the library's describes it)."""
        peer = integer_argument(peer, name)
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"{name} must be another rank in [0, {self._size}), got {peer} (this rank is "
                             f"{self._rank})")
        return peer

    def shrink(self, exclude=(), *, timeout=None):
        """A communicator of the ranks still alive, numbered in their order here (``ranks``: their ranks
        here), over this one's connections, after a PeerFailure, a Timeout or a revoke, or to leave out the
        healthy ranks in `exclude` (every survivor passes the same). Collective over the survivors: the dead and
        the excluded never answer. This communicator then refuses collectives (it may still agree and shrink)
        and must stay open while the new one is used (closing it closes the new one, as a split)."""
        exclude = sorted({self._other_rank(r, "exclude") for r in exclude})
        engine = self._engine_or_raise()
        try:
            child = engine.shrink(exclude, self._wait_s(timeout))
        except BaseException:
            self._failed = True
            raise
        self._failed = True
        self._pending.clear()  # its Works failed or will: nothing of them runs any more
        ranks = child.parent_ranks
        from pycoll.rendezvous.hosts import Hosts
        hosts = Hosts.from_identities([self._hosts.host_of[r] for r in ranks], child.rank)
        # Of this one's class: a shrunk backend="auto" communicator still says which islands it has.
        comm = type(self)(child, rank=child.rank, size=len(ranks), backend=self._backend, timeout=self._timeout,
                          hosts=hosts, ranks=ranks, accepted=self._accepted)
        comm._parent = self  # its connections are this one's root's
        self._children.add(comm)
        return comm

    def grow(self, world_size, *, unique_id=None, timeout=None):
        """A communicator of world_size ranks: this one's members keep their ranks, the new processes (each
        calling pycoll.join) are ranks size..world_size-1. Collective over this communicator's members; a fresh
        bootstrap of the larger job (new connections), so this one may be closed afterwards. unique_id: rank 0's
        is used (pycoll.get_unique_id() made on a member; the program hands it to the new processes); None:
        rank 0 makes one and publishes it in the job's rendezvous store for pycoll.join() with no arguments
        (docs/fault_tolerance.md). timeout: set-up's and the new communicator's (default: this one's)."""
        world_size = integer_argument(world_size, "world_size")
        if world_size <= self._size:
            raise ValueError(f"world_size must be larger than this communicator's size {self._size} to grow, "
                             f"got {world_size}")
        if unique_id is not None:
            unique_id = _unique_id_bytes(unique_id)
        timeout = self._timeout if timeout is None else self._wait_s(timeout)
        engine = self._engine_or_raise()
        if not hasattr(self._backend, "grow"):
            raise PycollError(f"backend {self.backend!r} cannot grow: a job grows over the host backends "
                              "(cpu, shm, tcp)")
        published = None
        if unique_id is None and self._rank == 0:
            try:
                unique_id = grow_store.publish(self._rendezvous_store(), timeout)
            except PycollError as exc:  # the members still meet in the grow, to refuse it together
                published = exc
        try:
            grown = self._backend.grow(engine, unique_id, world_size, timeout=float(timeout))
        except Exception as exc:
            if published is None:
                raise
            raise published from exc  # why rank 0 had no id: the members' refusal follows from it
        return Communicator(grown, rank=self._rank, size=world_size, backend=self._backend, timeout=timeout,
                            hosts=grown.hosts, accepted=self._accepted)

    def _rendezvous_store(self):
        """The store of the init() this communicator comes from (a split's or a shrink's: its root's), or None."""
        comm = self
        while comm._store is None and getattr(comm, "_parent", None) is not None:
            comm = comm._parent
        return comm._store

    @property
    def failed_ranks(self):
        """The ranks of this communicator that agree() or shrink() found lost (or excluded), in order."""
        engine = self._engine_or_raise()
        return list(engine.failed_ranks)

    def _wait_s(self, timeout):
        if timeout is None:
            return 0.0  # the communicator's own
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        return float(timeout)

    def split_by_host(self):
        """The communicator of this host's ranks (a split with the host as color)."""
        return self.split(self._hosts.host_of[self._rank], key=self._rank)

    def mesh(self, **dims):
        """This communicator's ranks on a mesh of named dimensions, the last varying fastest: mesh(pp=2, dp=2,
        tp=2) puts ranks 0 and 1 in one tp group, 0 and 2 in one dp group, 0 and 4 in one pp group. Returns a
        pycoll.Mesh: mesh["tp"] is this rank's communicator along tp, mesh.coords its coordinates. One split
        per dimension, every rank alike."""
        from pycoll.mesh import Mesh, check_shape
        return Mesh(self, check_shape(dims, self._size))

    # -- all_to_all, gather, scatter, uneven all_gather / reduce_scatter, objects ------------------------------
    def _counts(self, counts):
        """counts as the C-contiguous int64 array of `size` integers the C call takes (which checks their values
        against the buffers: native/comm/call.c)."""
        if isinstance(counts, (str, bytes)):
            raise TypeError(f"counts must be a sequence of {self._size} integers, got {type(counts).__name__}")
        try:
            entries = list(counts)
        except TypeError:
            raise TypeError(f"counts must be a sequence of {self._size} integers, "
                            f"got {type(counts).__name__}") from None
        if len(entries) != self._size:
            raise ValueError(f"counts must have one entry per rank ({self._size}), got {len(entries)}")
        entries = [integer_argument(c, f"counts[{i}]") for i, c in enumerate(entries)]
        if not all(-2 ** 63 <= c < 2 ** 63 for c in entries):
            raise ValueError(f"counts must fit in 64 bits, got {entries}")
        return np.array(entries, dtype=np.int64)

    def _all_gather_v(self, x, out, counts, async_op, own_block=None):
        # own_block: the byte offset of this rank's block in out, where x may be that block (the C schedule
        # copies it first); the public all_gather passes none.
        self._engine_or_raise()
        counts = self._counts(counts)
        send, recv = self._pair(x, out, "all_gather with counts", own_block)
        return self._call(Call("all_gather_v", send, recv, counts=counts), async_op, out, (x, out, counts))

    def _reduce_scatter_v(self, x, out, op, counts, algorithm, accuracy, async_op):
        self._engine_or_raise()
        counts = self._counts(counts)
        send, recv = self._pair(x, out, "reduce_scatter with counts")
        call = Call("reduce_scatter_v", send, recv, op=self._op(op),
                    algorithm=self._algorithm(algorithm, "reduce_scatter_v"), accuracy=self._accuracy(accuracy),
                    counts=counts)
        return self._call(call, async_op, out, (x, out, counts))

    def all_reduce_layernorm(self, x, weight, bias, *, eps=1e-5, out=None, residual=None, algorithm="auto",
                             accuracy="fast"):
        """LayerNorm of (the sum of x over ranks + residual) * weight + bias, row by row, on every rank.

        x: (rows, hidden) float16, bfloat16, float32 or float64; weight and bias: (hidden,); residual: x's shape,
        the same on every rank, or None. Each rank normalises only its rows (statistics in float32, float64 for
        float64) and the all-gather copies them, so every rank's output is bitwise identical. Returns out, a new
        array when out is None. Rows that do not divide evenly between the ranks run the ring."""
        return fused_norm.run(self, "layernorm", x, weight, bias, eps=eps, out=out, residual=residual,
                              algorithm=algorithm, accuracy=accuracy, gather=True)

    def all_reduce_rmsnorm(self, x, weight, *, eps=1e-6, out=None, residual=None, algorithm="auto",
                           accuracy="fast"):
        """RMSNorm of (the sum of x over ranks + residual) * weight, row by row, on every rank; as
        all_reduce_layernorm otherwise."""
        return fused_norm.run(self, "rmsnorm", x, weight, None, eps=eps, out=out, residual=residual,
                              algorithm=algorithm, accuracy=accuracy, gather=True)

    def reduce_scatter_layernorm(self, x, weight, bias, *, eps=1e-5, out=None, residual=None, algorithm="auto",
                                 accuracy="fast"):
        """The sequence-parallel all_reduce_layernorm: this rank gets only its rows, (count, hidden) with rank r
        taking rows // size rows, one more where r < rows % size, from row r * (rows // size) + min(r, rows %
        size) on. residual, where given, is this rank's rows of the residual stream (out's shape)."""
        return fused_norm.run(self, "layernorm", x, weight, bias, eps=eps, out=out, residual=residual,
                              algorithm=algorithm, accuracy=accuracy, gather=False)

    def reduce_scatter_rmsnorm(self, x, weight, *, eps=1e-6, out=None, residual=None, algorithm="auto",
                               accuracy="fast"):
        """The sequence-parallel all_reduce_rmsnorm: this rank's rows only, as reduce_scatter_layernorm."""
        return fused_norm.run(self, "rmsnorm", x, weight, None, eps=eps, out=out, residual=residual,
                              algorithm=algorithm, accuracy=accuracy, gather=False)

    def all_to_all(self, x, out, *, async_op=False):
        """x and out hold size * k elements each (separate memory): block j of x goes to rank j, and block i of
        out comes from rank i. Returns out (with async_op=True a pycoll.Work whose wait() returns it)."""
        fast = self._fast
        if fast is not None and async_op is False and self._ran(self._run(fast.all_to_all, x, out)):
            return out
        self._engine_or_raise()
        send, recv = self._pair(x, out, "all_to_all")
        return self._call(Call("all_to_all", send, recv), async_op, out, (x, out))

    def _all_to_all_v(self, x, send_counts, out, recv_counts, *, async_op=False):
        """Uneven all-to-all for the torch backend on device engines (engine.uneven_all_to_all): send_counts[r]
        elements of flat x to rank r, recv_counts[r] of flat out from rank r, blocks consecutive in rank order.
        The caller has checked that the ranks' counts pair up; the counts are checked here, as the C rules have no
        uneven all_to_all (pycoll's schedules run none)."""
        engine = self._engine_or_raise()
        if not getattr(engine, "uneven_all_to_all", False):
            raise NotImplementedError(f"uneven all_to_all: backend {self.backend} has none here (the torch "
                                      f"backend runs it over send/recv)")
        send, recv = self._pair(x, out, "all_to_all")
        for counts, buf, name in ((send_counts, send, "x"), (recv_counts, recv, "out")):
            if len(counts) != self._size or any(c < 0 for c in counts) or sum(counts) != buf.count:
                raise ValueError(f"{name}: {self._size} counts >= 0 adding up to its {buf.count} elements expected, "
                                 f"got {list(counts)}")
        counts = np.asarray([*send_counts, *recv_counts], dtype=np.int64)
        return self._call(Call("all_to_all", send, recv, counts=counts), async_op, out, (x, out), checked=True)

    def gather(self, x, out, root=0, *, async_op=False):
        """Rank r's x goes to block r of out on root, which holds size * len(x) elements; out may be None on
        the other ranks (and is not touched there). Returns out."""
        self._engine_or_raise()
        root = self._rank_argument(root, "root")
        send = self._buffer(x, "x", writable=False)
        recv = self._root_blocks(root, out, "out", send, "x", "gather")
        return self._call(Call("gather", send, recv, root=root), async_op, out, (x, out))

    def scatter(self, x, out, root=0, *, async_op=False):
        """Block r of root's x (size * len(out) elements) goes to rank r's out; x may be None on the other
        ranks (and is not read there). Returns out."""
        self._engine_or_raise()
        root = self._rank_argument(root, "root")
        recv = self._buffer(out, "out", writable=True)
        send = self._root_blocks(root, x, "x", recv, "out", "scatter")
        return self._call(Call("scatter", send, recv, root=root), async_op, out, (x, out))

    def _root_blocks(self, root, blocks, name, one, one_name, what):
        """The root's buffer of size blocks of one's length (gather's out, scatter's x; the library checks the
        length), of one's dtype and apart from it; None off the root, where the argument is neither read nor
        written."""
        if self._rank != root:
            return None
        if blocks is None:
            raise ValueError(f"{name}: the root (rank {root}) needs a buffer of size * len({one_name}) elements")
        buf = self._buffer(blocks, name, writable=name == "out")
        x, out = (one, buf) if name == "out" else (buf, one)
        self._same_dtype(x, out, "x", "out")
        check_no_overlap(x, "x", out, "out", what, in_place=False)
        return buf

    def broadcast_object(self, obj, root=0):
        """Root's obj (any picklable object), returned on every rank (root gets obj itself). Pickle: only
        between ranks that trust each other, as the job's ranks do."""
        from pycoll.objects import broadcast_object
        return broadcast_object(self, obj, self._rank_argument(root, "root"))

    def all_gather_object(self, obj):
        """Every rank's obj (picklable), as a list in rank order, on every rank."""
        from pycoll.objects import all_gather_object
        return all_gather_object(self, obj)

    def trace_records(self):
        """This rank's flight record of its recent calls on this communicator, oldest first: dicts with the keys
        of a dump's "calls" (docs/api.md)."""
        return flight_recorder.records(self._engine_or_raise())

    def dump_trace(self, path=None):
        """Write the flight record to `path` (a file, or a directory; None: PYCOLL_TRACE_DIR, ValueError when
        it is unset) whole or not at all, and return the file written."""
        return flight_recorder.dump(self._engine_or_raise(), path)

    def close(self):
        """Release the connections. Idempotent. Waits briefly (at most min(timeout, 5 s) in all, whether or not
        the other ranks ever close) for the other ranks to close too, and raises MismatchError if they called
        different collectives without it being noticed before (ranks that disagreed on a root, for one); the
        communicator is closed either way. Works still queued fail with CommunicatorClosed; the one running gets
        the same brief wait to finish, then fails with it too."""
        check_process(self._pid, "this communicator")  # a fork's child: the parent's, not to close here
        self._close_by(time.monotonic() + min(self._timeout, CLOSE_WAIT_S))

    def _close_by(self, deadline):
        """close(), every wait in it (splits, the engine's, the store's) ending by ``deadline``."""
        for child in list(self._children):
            child._close_by(deadline)
        engine, self._engine, self._fast = self._engine, None, None
        _open_communicators.discard(self)
        try:
            if engine is not None:
                if engine.close_linger is not None:  # its wait for the peers' goodbyes
                    engine.close_linger = min(engine.close_linger, max(deadline - time.monotonic(), 0.0))
                engine.close()  # fails queued Works with CommunicatorClosed (native/comm/progress.c)
            self._pending.clear()
        except BaseException:
            self._failed = True
            raise
        finally:
            store, self._store = self._store, None
            if store is not None:
                # Rank 0's store waits for the others to disconnect, within what is left; after a failure
                # peers may never come back to release it: don't wait for them.
                store.close(linger=0.0 if self._failed else max(deadline - time.monotonic(), 0.0))


def backends():
    """Every backend: whether it is usable here and, if not, why (pycoll.plugins.BackendStatus)."""
    return plugins.statuses()


def default_backend():
    """The backend init() uses when given none: PYCOLL_BACKEND, else "cpu"."""
    return settings.get("PYCOLL_BACKEND")


def _secret_bytes(secret):
    if secret is None:
        return launch_env.job_secret()
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, (bytes, bytearray)):
        raise TypeError(f"secret must be str or bytes, got {type(secret).__name__}")
    return bytes(secret) or None


def _checked_backend(backend, timeout):
    """The plugin of backend `backend`, after checking it and `timeout` (init and init_rank alike)."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string, got {type(backend).__name__}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return plugins.get(backend)


def init(backend=None, *, rank=None, world_size=None, master_addr=None, master_port=None, timeout=300.0,
         store=None, secret=None, ifname=None, job_id=None, device=None):
    """Join a job and return its Communicator.

    With no rank/world_size, they come from the launcher's environment (pycoll run, torchrun, mpirun, srun).
    The rendezvous is a TCP store hosted by rank 0 at MASTER_ADDR:MASTER_PORT, or `store` (e.g. a FileStore).
    device: with backend="auto" only, the memory this rank's arrays are in ("host", "cuda", "npu"; default
    PYCOLL_DEVICE): ranks of one kind on one host form an island (docs/heterogeneous.md).
    """
    from pycoll.rendezvous import hosts as host_detection
    from pycoll.rendezvous.store import rendezvous

    if backend is None:
        backend = default_backend()
    plugin = _checked_backend(backend, timeout)
    if device is not None and plugin.name != "auto":
        raise ValueError(f"device: only backend 'auto' takes each rank's memory kind; backend {backend!r} takes "
                         f"{plugin.memory} memory")
    env = launch_env.resolve(rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port)
    launch_env.warn_if_single_rank(env, rank, world_size)
    secret = _secret_bytes(secret)
    own_store, store = rendezvous(env, store, timeout=timeout, secret=secret)  # keys scoped to this init
    job_id = job_id or launch_env.job_id() or f"{env.master_addr}:{env.master_port}"
    try:
        options = {"master_addr": env.master_addr, "ifname": ifname, "secret": secret, "job_id": job_id,
                   "local_rank": env.local_rank, "device": device}
        if plugin.finds_hosts:  # the C bootstrap finds them (pycoll.bootstrap)
            engine = plugin.create(rank=env.rank, world_size=env.world_size, store=store, timeout=float(timeout),
                                   options=options)
            hosts = engine.hosts
        else:
            hosts = host_detection.exchange(store, env.rank, env.world_size, float(timeout))
            engine = plugin.create(rank=env.rank, world_size=env.world_size, store=store, timeout=float(timeout),
                                   options=dict(options, hosts=hosts))
    except BaseException:
        if own_store is not None:
            own_store.close()
        raise
    return (plugin.communicator_class or Communicator)(engine, rank=env.rank, size=env.world_size, backend=plugin,
                                                      store=own_store, timeout=timeout, hosts=hosts)


def init_rank(unique_id, rank, world_size, *, backend="cpu", timeout=300.0, ifname=None):
    """Join a job without a launcher or a store, NCCL-style: one process makes ``pycoll.get_unique_id()``,
    the program passes those bytes to every rank by its own means (Ray, MPI, a file), and every rank -- the one
    that made the id included -- calls this with them. backend: "cpu" (shared memory within a host, TCP between
    hosts), "shm" or "tcp". The same C calls as a C program's pycoll_comm_init_rank."""
    return _by_unique_id("init_rank", unique_id, rank, world_size, backend, timeout, ifname, first_rank=0)


def join(unique_id=None, rank=None, world_size=None, *, backend=None, timeout=300.0, ifname=None):
    """Join a job that grows (its members call comm.grow(world_size)) as the new rank `rank`, one of
    size..world_size-1 after the members'. unique_id: the one rank 0 of the members grows with, handed over by
    any means. With no arguments (a launcher's relaunch): rank and world_size from the launcher's variables, as
    init() reads them, and the id from the job's rendezvous store at MASTER_ADDR:MASTER_PORT, published there by
    the members' grow without an id (the PYCOLL_GROW_GENERATION-th of the job). backend: the members' (default
    PYCOLL_BACKEND, as init). timeout: set-up's, the wait for the id included, and the new communicator's."""
    if backend is None:
        backend = default_backend()
    if unique_id is None:
        env = launch_env.resolve(rank=rank, world_size=world_size)
        rank, world_size = env.rank, env.world_size
        _checked_backend(backend, timeout)
        unique_id = grow_store.fetch(env, timeout, _secret_bytes(None))
    if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(world_size, int) or \
            isinstance(world_size, bool):
        raise TypeError("rank and world_size must be ints (the new rank, the grown job's size)")
    try:
        return _by_unique_id("join", unique_id, rank, world_size, backend, timeout, ifname, first_rank=1)
    except Timeout as exc:
        raise Timeout(f"pycoll.join as rank {rank} of {world_size}: {exc}; the members must call "
                      f"comm.grow({world_size}) with this unique id on their rank 0") from None


def _unique_id_bytes(unique_id):
    from pycoll.bootstrap import UNIQUE_ID_BYTES

    if not isinstance(unique_id, (bytes, bytearray)):
        raise TypeError(f"unique_id must be bytes (pycoll.get_unique_id()), got {type(unique_id).__name__}")
    if len(unique_id) != UNIQUE_ID_BYTES:
        raise ValueError(f"unique_id must be {UNIQUE_ID_BYTES} bytes (pycoll.get_unique_id()), got {len(unique_id)}")
    return bytes(unique_id)


def _by_unique_id(caller, unique_id, rank, world_size, backend, timeout, ifname, first_rank):
    """init_rank's and join's communicator: the bootstrap from unique_id alone, as rank >= first_rank."""
    plugin = _checked_backend(backend, timeout)
    unique_id = _unique_id_bytes(unique_id)
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not first_rank <= rank < world_size:
        why = " (rank 0 is always a member: a new process joins after the members)" if first_rank else ""
        raise ValueError(f"rank must be in [{first_rank}, world_size={world_size}), got {rank}{why}")
    if not plugin.finds_hosts:
        raise ValueError(f"{caller} creates host-memory communicators (backend cpu, shm or tcp); backend "
                         f"{backend!r} needs pycoll.init()")
    engine = plugin.create(rank=rank, world_size=world_size, store=None, timeout=float(timeout),
                           options={"unique_id": unique_id, "ifname": ifname})
    return Communicator(engine, rank=rank, size=world_size, backend=plugin, store=None, timeout=timeout,
                        hosts=engine.hosts)
