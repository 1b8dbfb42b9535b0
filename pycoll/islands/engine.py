"""The engine behind a backend="auto" communicator: at init it builds every communicator a collective across
islands needs and agrees with every rank on what was formed; per call it checks that every rank called the same
thing, refuses what some island cannot run, and runs the collective's schedule (schedules.py).

Built at init, in this order, each step collective over the whole job:
1. `world`: every rank over pycoll's host transports (the cpu backend: shared memory on a host, TCP between).
2. Every rank's memory kind, island backend, host and whether that backend is usable here, all-gathered: the
   islands (formation.py), or BackendUnavailable on every rank naming each rank that cannot run its backend;
   and each rank's PYCOLL_ISLANDS_CROSSING, which must agree (ValueError on every rank where it does not).
3. The leaders' communicator (on leaders), then each island's: pycoll's host transports for a host island, the
   vendor's for a device island, each bootstrapped afresh through the job's store under a prefix of its own
   (not splits of `world`: a fresh host communicator on one host runs the shared-memory transport's own
   collectives), and each leader's probe of its staging copies (crossing.py); every rank then learns whether
   every island came up, and every probe, so every rank builds the same crossing model.
4. What each island's vendor refuses (dtype, op, device generation), all-gathered: refused everywhere.

A job of host memory only (no vendor anywhere, no crossing forced) skips all of the per-call work: each call,
split and fast path is `world`'s, as backend="cpu" would run it (`host_only`).
"""

from __future__ import annotations

import zlib

import numpy as np

from pycoll import plugins, settings
from pycoll.dtypes import OPS, dtype_id
from pycoll.errors import BackendUnavailable, MismatchError, PeerFailure, PycollError, SettingError, Timeout
from pycoll.islands import crossing, messages, schedules
from pycoll.islands.failures import IslandWatch
from pycoll.islands.formation import Islands, form, island_key
from pycoll.islands.kinds import ISLAND_BACKENDS, memory_kind
from pycoll.islands.staging import HostRuntime, Scratch, host_buffer, runtime_for
from pycoll.islands.store import IslandStore
from pycoll.objects import all_gather_object
from pycoll.plugins import ALL_DTYPES, ALL_OPS, Call, Engine, vendor
from pycoll.plugins.engine import run_now
from pycoll.plugins.vendor_capabilities import REDUCTIONS

_COLLECTIVE_IDS = {name: i for i, name in enumerate(schedules.SCHEDULES)}
_ACCURACY_IDS = {name: i for i, name in enumerate(("fast", "compensated", "reproducible"))}
# The call's description every rank exchanges first: collective, dtype, elements, op, root, accuracy, and a
# checksum of the counts of the counts= forms (a whole array, which every rank must pass alike).
_DESCRIPTION = ("collective", "dtype", "count", "op", "root", "accuracy", "counts")
# The collectives whose send buffer has the length every rank passes alike (their recv's differs by rank, or is
# the root's only).
_COUNTED_BY_SEND = ("all_gather", "reduce", "gather", "reduce_scatter_v")
_REDUCING = REDUCTIONS + ("reduce_scatter_v",)
_FIELDS = len(_DESCRIPTION)
# Where each island's communicator and the leaders' exchange their ids in the job's store: a prefix each, as a
# vendor or host engine names its keys the same in every communicator it makes.
ISLAND_PREFIX, LEADERS_PREFIX = "pycoll/islands/", "pycoll/islands/leaders/"


class _HostCalls:
    """The two collectives pycoll.objects needs, over an engine of host memory."""

    def __init__(self, engine, size):
        self._engine, self.size = engine, size

    def all_gather(self, x, out, counts=None):
        kind = "all_gather" if counts is None else "all_gather_v"
        send, recv = host_buffer(x, dtype_id(x.dtype)), host_buffer(out, dtype_id(out.dtype))
        self._engine.run(Call(kind, send, recv, counts=None if counts is None else np.asarray(counts, np.int64)))
        return out


def _host_engine(store, prefix, rank, size, timeout, options):
    """A communicator of pycoll's host transports among `size` ranks, bootstrapped afresh through the job's store
    under `prefix`, as init(backend="cpu") makes one: on one host it runs the shared-memory transport's own
    collectives, where a split of `world` would run pycoll's generic schedules over a view of world's ranks."""
    return plugins.get("cpu").create(rank=rank, world_size=size, store=IslandStore(store, prefix), timeout=timeout,
                                     options=options)


def _crossing_setting():
    """PYCOLL_ISLANDS_CROSSING on this rank, or what is wrong with it (raised on every rank, not just here)."""
    try:
        return settings.get("PYCOLL_ISLANDS_CROSSING"), None
    except SettingError as exc:
        return None, str(exc)


def _agreed_crossing(seen):
    """The crossing every rank set (each rank's (value, error)), or ValueError on every rank: ranks deciding
    differently would run different schedules and hang."""
    errors = [f"rank {r}: {error}" for r, (_, error) in enumerate(seen) if error]
    if errors:
        raise ValueError("backend 'auto': " + "; ".join(errors))
    values = [value for value, _ in seen]
    other = next((r for r, value in enumerate(values) if value != values[0]), None)
    if other is not None:
        raise ValueError(f"backend 'auto': PYCOLL_ISLANDS_CROSSING must be the same on every rank: rank 0 has "
                         f"{values[0]!r}, rank {other} {values[other]!r}")
    return values[0]


def _refusals(plugin, engine):
    """What `plugin`'s vendor refuses on this rank's device: {(collective, dtype, op): why}."""
    if not hasattr(plugin, "refusal"):
        return {}
    device = engine.vendor.device_name()
    return {(kind, dtype, op): why
            for kind in REDUCTIONS for d, dtype in enumerate(ALL_DTYPES) for o, op in enumerate(ALL_OPS)
            if (why := plugin.refusal(kind, d, o, device))}


def _describe(row):
    collective, dtype, count, op, root, accuracy, counts = (int(v) for v in row)
    names = list(schedules.SCHEDULES)
    parts = [f"{ALL_DTYPES[dtype]}" if dtype >= 0 else "", f"{count} elements" if dtype >= 0 else "",
             f"op {ALL_OPS[op]}" if op >= 0 else "", f"root {root}" if root >= 0 else "",
             f"accuracy {list(_ACCURACY_IDS)[accuracy]}" if accuracy > 0 else "",
             f"counts #{counts:08x}" if counts >= 0 else ""]
    return f"{names[collective]}({', '.join(p for p in parts if p)})"


class IslandsEngine(Engine):
    """See the module's docstring. After init: `islands`, what was formed; `memory`, this rank's memory kind;
    `dtypes` and `ops`, the names every island declares (the communicator accepts only those)."""

    host_only = False  # until assemble() has seen the islands

    def __init__(self, *, rank, world_size, store, timeout, options):
        self.rank, self.size, self.timeout = rank, world_size, float(timeout)
        self.inner = self.leaders = self._watch = self._island_host = None
        self._scratch = self._host_scratch = None
        self._broken = False
        memory = memory_kind(options.get("device"))
        backend_name = ISLAND_BACKENDS[memory]
        self.world = plugins.get("cpu").create(rank=rank, world_size=world_size, store=store, timeout=timeout,
                                               options=options)
        try:
            self._build(memory, backend_name, store, options)
        except BaseException:
            self.close()
            raise

    def _build(self, memory, backend_name, store, options):
        self.hosts = self.world.hosts
        self.transport = self.world.transport
        self.close_linger = self.world.close_linger
        calls = _HostCalls(self.world, self.size)
        try:
            plugin, why = plugins.get(backend_name), None
        except BackendUnavailable as exc:
            plugin, why = None, str(exc)
        declared = (tuple(plugin.dtypes), tuple(plugin.ops), tuple(plugin.accuracies)) if plugin else ((), (), ())
        records = all_gather_object(calls, (memory, backend_name, self.hosts.host_of[self.rank], why, declared,
                                            _crossing_setting()))
        unusable = [f"rank {r} ({rec[0]} memory): {rec[3]}" for r, rec in enumerate(records) if rec[3]]
        if unusable:
            raise BackendUnavailable("backend 'auto': some ranks cannot run their island's backend: "
                                     + "; ".join(unusable))
        forced = _agreed_crossing([rec[5] for rec in records])
        formed = form([rec[:3] for rec in records])
        self.island = formed.of(self.rank)
        self.island_rank = self.island.ranks.index(self.rank)
        self.is_leader = self.island_rank == 0
        refused, failure, probed = {}, None, None
        watched = memory != "host" and self.island.size > 1
        self._watch = IslandWatch(self.rank) if watched else None
        try:
            # Leaders first, on every leader: a member waits for its leader only in its island's set-up below.
            if self.is_leader:
                self.leaders = _host_engine(store, LEADERS_PREFIX, self.island.index, len(formed.islands),
                                            self.timeout, options)
            prefix = f"{ISLAND_PREFIX}{self.island.index}/"
            if memory == "host":
                self.inner = _host_engine(store, prefix, self.island_rank, self.island.size, self.timeout, options)
            else:
                self.inner = plugin.create(rank=self.island_rank, world_size=self.island.size,
                                           store=IslandStore(store, prefix), timeout=self.timeout, options={})
                refused = _refusals(plugin, self.inner) if self.is_leader else {}
            self._runtime = runtime_for(memory, plugin)
            probed = crossing.probe(self._runtime) if self.is_leader else None
        except Exception as exc:  # noqa: BLE001 -- every rank learns of it below
            failure = f"rank {self.rank} ({backend_name}): {type(exc).__name__}: {exc}"
        outcomes = all_gather_object(calls, (failure, refused, self._watch.identity if watched else None, probed))
        failures = [f for f, _, _, _ in outcomes if f]
        if failures:
            raise BackendUnavailable("backend 'auto': an island's communicator could not be created: "
                                     + "; ".join(failures))
        every = {}
        for _, island_refused, _, _ in outcomes:
            every.update(island_refused)
        if watched:
            self._watch.start([outcomes[r][2] for r in self.island.ranks if r != self.rank], self._peer_failed)
        # What a shrink rebuilds the islands from: each rank's record, each island's probe (by what it is).
        self.records = [rec[:3] for rec in records]
        self.probes = {island_key(island): outcomes[island.ranks[0]][3] for island in formed.islands}
        self.forced = forced
        # What every island declares: the dtypes and ops the communicator accepts.
        self.dtypes = tuple(name for name in ALL_DTYPES if all(name in rec[4][0] for rec in records))
        self.ops = tuple(name for name in ALL_OPS if all(name in rec[4][1] for rec in records))
        self.memory = memory
        self.assemble(formed, every)

    def assemble(self, formed, refused):
        """What every call reads, from the islands formed (init's, or the survivors' after a shrink) and what
        their vendors refuse: the same on every rank, as are the leaders' probes the crossing model is made
        from, so every rank decides each call alike."""
        self.islands = Islands(formed.islands, refused)
        probes = [self.probes[island_key(island)] for island in formed.islands]
        self.crossing = crossing.CrossingModel(
            tuple((island.size, island.memory, copy) for island, (copy, _) in zip(formed.islands, probes)),
            min(host for _, host in probes), schedules.STAGING_SEGMENT_BYTES, self.forced)
        # No vendor anywhere (every island is host memory) and no crossing forced: the job's host communicator is
        # the whole job -- shared memory within each host, TCP between, its own host-aware schedules, and every
        # message checked against the call (a mismatch is its MismatchError) -- so each call runs there, as
        # backend="cpu" runs it, without the islands' steps and their per-call agreement on what was called.
        self.host_only = all(island.memory == "host" for island in formed.islands) and self.forced == "auto"
        self._scratch = Scratch(self._runtime)
        self._host_scratch = Scratch(HostRuntime())
        # The description every call exchanges first, beside its negation: made once, reused by every call.
        self._description = np.empty(2 * _FIELDS, dtype=np.int64)
        described = host_buffer(self._description, dtype_id("int64"))
        self._agreement = Call("all_reduce", described, described, op=OPS["max"])

    # -- what schedules.py uses -------------------------------------------------------------------------------
    def staging(self, buf, name):
        """Where buf is staged in host memory, not yet copied: buf itself where it is host memory, else host
        scratch `name`."""
        return buf if buf.memory == "host" else self._host_scratch.buffer(name, buf, buf.count)

    def stage_in(self, buf, name):
        """buf's contents in host memory: buf itself where it is host memory, else host scratch `name`."""
        staged = self.staging(buf, name)
        self.copy_in(staged, buf)
        return staged

    def _after_caller(self, buf):
        """The copies below are the runtime's synchronous ones, on its default stream: first the work the caller
        queued on its current stream (which may be a non-blocking one) must be done (staging.py)."""
        self._runtime.wait_stream(vendor.current_stream(buf.owner), self.timeout)

    def copy_in(self, staged, buf):
        """buf into host Buffer `staged` (nothing where they are one memory)."""
        if staged.ptr != buf.ptr:
            self._after_caller(buf)
            self._runtime.to_host(staged.ptr, buf.ptr, buf.nbytes)

    def stage_out(self, staged, buf):
        """Host Buffer `staged` into buf (nothing where they are one memory)."""
        if staged.ptr != buf.ptr:
            self._after_caller(buf)
            self._runtime.to_device(buf.ptr, staged.ptr, buf.nbytes)

    def copy(self, dst, src, nbytes, like):
        """nbytes from src to dst, both in this rank's memory; like: the Buffer dst is in (its stream)."""
        if dst != src:
            self._after_caller(like)
            self._runtime.copy(dst, src, nbytes)

    def scratch(self, name, like, count):
        return self._scratch.buffer(name, like, count)

    def host_scratch(self, name, like, count):
        return self._host_scratch.buffer(name, like, count)

    # -- the Engine -------------------------------------------------------------------------------------------
    @property
    def validates_calls(self):
        """A host-only job's calls all run on `world`, whose C call checks each one itself."""
        return self.host_only

    def fast_path(self, accepted):
        return self.world.fast_path(accepted) if self.host_only else None

    def run(self, call, async_op=False):
        if self.host_only:  # send/recv too; async_op=True queues it on world's progress thread
            return self.world.run(call, True) if async_op else self._reporting(self.world.run, call)
        if call.collective == "send/recv":
            return self._reporting(messages.run, self, call, async_op)
        schedule = schedules.SCHEDULES[call.collective]
        self._reporting(self._check_same_call, call)
        self._check_offered(call)
        if async_op:  # run now: the handle is complete (the steps block on host and device alike)
            return run_now(self._reporting, schedule, self, call)
        return self._reporting(schedule, self, call)

    # -- failures ---------------------------------------------------------------------------------------------
    def _reporting(self, step, *args):
        """step(*args); a job-wide failure out of it (PeerFailure, Timeout) is passed on before it is raised."""
        try:
            return step(*args)
        except (PeerFailure, Timeout) as exc:
            self._break(exc)
            raise

    def _break(self, exc):
        """This rank leaves the collective on `exc`: the ranks still waiting on it learn of it now, not at their
        deadline. Its island peers waiting inside their vendor's collective get the watch's notice (failures.py)
        and abort theirs; ranks waiting on it in a step between islands or in its host island see it close those
        communicators (without lingering: they raise PeerFailure naming it), and ranks waiting in the job's host
        communicator see it revoked (CommunicatorRevoked). Its own vendor communicator is marked failed (and
        stopped, by the vendor's revoke where it has one). The communicator is unusable afterwards, as after any
        PeerFailure, but the job's connections stay: the survivors shrink it."""
        if self._broken:
            return
        self._broken = True
        reason = f"rank {self.rank} left the collective on {type(exc).__name__}: {exc}"
        if self._watch is not None:
            self._watch.notify(-1, reason)
        if self.inner is not None:
            self.inner.request_abort(-1, reason)
        # The step communicators are closed (their peers raise PeerFailure naming this rank; a shrink makes new
        # ones), the job's is revoked: its connections are what the survivors shrink over.
        for engine in (self.leaders, self.inner, self._island_host, self.world):
            if engine is not None:
                try:
                    engine.revoke() if engine is self.world else engine.abort()
                except PycollError:  # what a broken communicator reports at close: the failure is raised already
                    pass

    def _peer_failed(self, rank, reason):
        """The watch's thread: an island peer died or failed out of a step; the vendor call waiting on it (or the
        next) raises PeerFailure saying `reason`."""
        self.inner.request_abort(self.island.ranks.index(rank) if rank in self.island.ranks else -1, reason)

    def _check_same_call(self, call):
        """Whether every rank called the same thing: MismatchError on every rank where two differ (an island's
        vendor would otherwise hang or reduce garbage), PeerFailure where a rank is gone. One all-reduce (max) of
        each rank's description beside its negation -- a fixed 112 bytes whatever the job's size -- says whether
        all agree (the max of the description equals minus the max of its negation); only when they do not is
        every rank's description all-gathered, to name one that differs."""
        some = call.send if call.send is not None else call.recv
        count = (call.send.count if call.collective in _COUNTED_BY_SEND
                 else call.recv.count if call.recv is not None else 0)
        desc = self._description
        desc[:_FIELDS] = (_COLLECTIVE_IDS[call.collective], some.dtype if some is not None else -1, count,
                          call.op if some is not None and call.collective in _REDUCING else -1, call.root,
                          _ACCURACY_IDS.get(call.accuracy, 0),
                          zlib.crc32(call.counts.tobytes()) if call.counts is not None else -1)
        mine = desc[:_FIELDS].copy()
        np.negative(mine, out=desc[_FIELDS:])
        self.world.run(self._agreement)
        if np.array_equal(desc[:_FIELDS], -desc[_FIELDS:]):
            return
        every = np.empty((self.size, _FIELDS), dtype=np.int64)
        _HostCalls(self.world, self.size).all_gather(mine, every.reshape(-1))
        other = int(np.flatnonzero((every != every[0]).any(axis=1))[0])
        raise MismatchError(f"backend 'auto': rank 0 called {_describe(every[0])} but rank {other} called "
                            f"{_describe(every[other])}")

    def _check_offered(self, call):
        """TypeError, on every rank alike, for a reduction some island's vendor refuses (its schedule would
        reduce there); host-staged flat reductions only copy through the vendors and are not refused."""
        if call.collective not in REDUCTIONS or call.accuracy != "fast":
            return
        some = call.send if call.send is not None else call.recv
        refused = self.islands.refused
        why = next((refused[key] for kind in REDUCTIONS
                    if (key := (kind, ALL_DTYPES[some.dtype], ALL_OPS[call.op])) in refused), None)
        if why:
            raise TypeError(f"backend 'auto': {why}; refused on every rank of the job (accuracy='compensated' "
                            f"runs it host-staged)")

    def split(self, color, key):
        if self.host_only:  # of host ranks only: a split of the job's host communicator, as backend="cpu" makes
            return self.world.split(color, key)
        raise NotImplementedError("split: backend 'auto' has no sub-communicators across islands yet")

    # -- surviving a lost rank (docs/fault_tolerance.md) --------------------------------------------------------
    def revoke(self):
        """Every communicator this rank's calls wait in is revoked (the host ones: their peers' waits end too),
        its island peers hear of it through the watch, and its vendor communicator's work in flight stops."""
        if self._watch is not None:
            self._watch.notify(-1, f"rank {self.rank} revoked the communicator")
        if self.inner is not None:
            self.inner.revoke()
        for engine in (self.leaders, self._island_host, self.world):
            if engine is not None:
                engine.revoke()

    def agree(self, flag, timeout):
        return self.world.agree(flag, timeout)

    def shrink(self, exclude, timeout):
        from pycoll.islands.shrink import shrink
        return shrink(self, exclude, timeout)

    @property
    def failed_ranks(self):
        return self.world.failed_ranks

    def close(self):
        if self._watch is not None:  # first: its goodbye tells the peers that this rank's exit is no failure
            self._watch.close()
        for scratch in (self._scratch, self._host_scratch):
            if scratch is not None:
                scratch.close()
        for engine in (self.inner, self.leaders, self._island_host, self.world):
            if engine is not None:
                if engine.close_linger is not None and self.close_linger is not None:  # the communicator's bound
                    engine.close_linger = min(engine.close_linger, self.close_linger)
                try:
                    engine.close()
                except PycollError:
                    if not self._broken:
                        raise  # after a failure (raised already), what the ranks left unfinished is no news
        self.inner = self.leaders = self._island_host = None
