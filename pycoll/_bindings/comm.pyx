# cython: language_level=3, boundscheck=False, wraparound=False
"""The native communicator (native/comm) behind the host-memory backends. Thin: it takes pointers that
pycoll.buffers has already checked, releases the GIL for the whole collective and maps status codes to
pycoll's exceptions."""

from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from posix.unistd cimport usleep

from cpython.exc cimport PyErr_Occurred

from pycoll._bindings.libpycoll cimport *

include "cost_model.pxi"

from pycoll._bindings.abi import (ACCURACIES as _ACCURACIES, ALGORITHMS as _ALGORITHMS,
                                  COLLECTIVES as _COLLECTIVES)
from pycoll.errors import CommunicatorClosed, error_for_status_name


def error_for_status(int status, str message, int failed_rank=-1):
    """The exception for a pycoll_status_t: the one place status codes become Python errors (native
    communicators, vendor bindings and the simulator all use it), through pycoll.errors.STATUS_CLASSES.
    Timeout and PeerFailure carry the rank that failed (None: unknown)."""
    return error_for_status_name(pycoll_status_name(<pycoll_status_t>status).decode(), message,
                                 failed_rank if failed_rank >= 0 else None)


cdef extern from "Python.h":
    # Declared without an exception clause on purpose: the exception a handler raises must stay pending.
    int check_signals_keep_exception "PyErr_CheckSignals" ()


cdef int _signal_raised(void *ctx) noexcept nogil:
    # Runs the Python signal handlers (this is how Ctrl-C reaches a rank blocked in a collective); an
    # exception they raise stays pending and is re-raised when the collective returns.
    with gil:
        return check_signals_keep_exception() != 0


cdef int _reraise_pending() except -1:
    # Returning -1 from an `except -1` function makes Cython raise the exception already set.
    return -1 if PyErr_Occurred() else 0


def shm_segment_bytes(int size, int64_t ring_bytes):
    """The bytes of one rank's shared-memory segment (its incoming rings) for a job of `size` local ranks."""
    return pycoll_shm_segment_bytes(size, ring_bytes)


cdef int _tag_this_thread() except -1:
    """Tag the calling thread's collectives with a hash of its name, once per thread (pycoll_set_thread_tag):
    threads named alike on every rank correspond, so ranks whose threads take turns in different orders meet
    as a MismatchError instead of combining the wrong buffers. The name also goes to C for messages (a call
    that waits past the timeout for another thread's names it)."""
    import threading
    import zlib
    name = threading.current_thread().name.encode(errors="replace")
    pycoll_set_thread_tag(zlib.crc32(name) & 0xffffff)
    pycoll_set_thread_name(name)
    return 0


cdef class NativeComm:
    """One pycoll_comm_t (its fields: comm.pxd). Collectives take one pycoll.plugins.Call each."""

    @staticmethod
    def init_rank(unique_id, rank, size, *, str transport="auto", double timeout=300.0, ifname=None,
                  int64_t ring_bytes=0, int64_t segment_bytes=0, double spin_us=-1.0, watch=None):
        """A communicator from the C bootstrap (pycoll_comm_init_rank_config): every rank calls this with the
        same unique id (unique_id_create's bytes). transport: "auto" (shared memory within a host, TCP between
        hosts), "tcp" or "shm"; spin_us < 0: the library's choice from how many ranks share this host's cores.
        size (the world size) is at most MAX_WORLD_SIZE."""
        _check_world(rank, size)
        return _init_rank(unique_id, rank, size, transport, timeout, ifname, ring_bytes, segment_bytes, spin_us,
                          watch)

    @property
    def transport(self):
        """"shm", "tcp" or "shm+tcp" for a communicator made by init_rank; None for others."""
        cdef const char *name = pycoll_comm_transport(self._open())
        return name.decode() if name != NULL else None

    @property
    def host_of(self):
        """The host map in force (host_of[r]: rank r's host number), or None when every rank is on one host
        by default (no map)."""
        cdef int32_t size = pycoll_comm_size(self._open())
        cdef int32_t *ids = <int32_t *>malloc(max(size, 1) * sizeof(int32_t))
        if ids == NULL:
            raise MemoryError()
        try:
            if pycoll_comm_get_hosts(self.comm, ids) != PYCOLL_OK:
                return None
            return tuple(ids[r] for r in range(size))
        finally:
            free(ids)

    def __dealloc__(self):
        if self.comm != NULL:
            pycoll_comm_destroy(self.comm)
            self.comm = NULL

    cdef pycoll_comm_t *_open(self) except NULL:
        if self.comm == NULL or self.closing:
            raise CommunicatorClosed("communicator is closed")
        return self.comm

    cdef pycoll_comm_t *_enter(self) except NULL:
        """The communicator for a call into C, counted until _leave."""
        cdef int tagged
        cdef pycoll_comm_t *c = self._open()
        pycoll_thread_tag(&tagged)
        if not tagged:
            _tag_this_thread()
        self.active += 1
        return c

    cdef int _leave(self, pycoll_status_t st) except -1:
        self.active -= 1
        if st == PYCOLL_ERR_INTERRUPTED:
            _reraise_pending()
        if st != PYCOLL_OK:
            error = error_for_status(st, pycoll_comm_error(self.comm).decode(errors="replace"),
                                     pycoll_comm_failed_rank(self.comm))
            if st == PYCOLL_ERR_TIMEOUT and "waited" in str(error) and "nothing was sent" in str(error):
                error.sent = False  # it timed out waiting for another thread's turn: the communicator goes on
            raise error
        return 0

    @property
    def options(self):
        """This communicator's options (pycoll_comm_options_t) as a dict: timeout_s, segment_bytes, spin_ns."""
        if self.comm == NULL:
            raise CommunicatorClosed("communicator is closed")
        cdef pycoll_comm_options_t o
        pycoll_comm_get_options(self.comm, &o)
        return {"timeout_s": o.timeout_s, "segment_bytes": o.segment_bytes, "spin_ns": o.spin_ns}

    @property
    def last_algorithm(self):
        return pycoll_algorithm_name(pycoll_comm_last_algorithm(self.comm)).decode()

    def set_cost_model(self, values):
        """values: pycoll.cost_model.CostModel.as_array()'s layout (cost_model.pxi)."""
        cdef pycoll_cost_model_t model
        fill_cost_model(&model, values)
        cdef pycoll_comm_t *c = self._enter()
        with nogil:  # waits for queued collectives, which run without the GIL
            pycoll_comm_set_cost_model(c, &model)
        self._leave(PYCOLL_OK)

    def run(self, call, bint async_op=False):
        """One pycoll.plugins.Call, packed once into a pycoll_call_t (call.py's fields mean what call.h's do):
        the library checks it (native/comm/call.c). The caller keeps its buffers and counts alive until the call
        completes. Blocking: None once done on this rank; async_op: the NativeWork of the call queued on the
        progress thread."""
        cdef pycoll_call_t c
        _pack(&c, call)
        return self._run(&c, async_op)

    cdef object _run(self, const pycoll_call_t *call, bint async_op):
        """The one way a call reaches C (run() and the fast path): blocking, None; else its NativeWork."""
        cdef pycoll_comm_t *c = self._enter()
        cdef pycoll_work_t *work = NULL
        cdef pycoll_work_t **out = &work if async_op else NULL
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_comm_run(c, call, out)
        if async_op:
            return _started(self, st, work)
        self._leave(st)
        return None

    def broadcast_internal(self, uintptr_t buf, int64_t count, int dtype, int root):
        """broadcast for pycoll's own use (init's cost model): errors call it internal, and the user's first
        collective stays #1."""
        cdef pycoll_call_t call
        pycoll_call_init(&call, PYCOLL_COLL_BROADCAST)
        call.recvbuf, call.recv_count, call.dtype, call.root = <void *>buf, count, <pycoll_dtype_t>dtype, root
        pycoll_comm_set_internal(self._open(), 1)
        try:
            self._run(&call, False)
        finally:
            pycoll_comm_set_internal(self.comm, 0)

    def split(self, int color, int key):
        """pycoll_comm_split: a NativeComm over this one's connections for the ranks that pass the same color
        (None where color is PYCOLL_SPLIT_NONE). Collective over this communicator."""
        cdef pycoll_comm_t *c = self._enter()
        cdef pycoll_comm_t *child = NULL
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_comm_split(c, color, key, &child)
        self._leave(st)
        if child == NULL:
            return None
        cdef NativeComm native = NativeComm.__new__(NativeComm)
        native.comm = child
        return native

    def revoke(self):
        """pycoll_comm_revoke: from any thread, never waits (no busy check: the C call takes no turn it cannot
        get at once)."""
        if self.comm == NULL:
            raise CommunicatorClosed("communicator is closed")
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_comm_revoke(self.comm)
        if st != PYCOLL_OK:
            raise error_for_status(st, "communicator is closed")

    def agree(self, int64_t flag, double timeout=0.0):
        """pycoll_comm_agree: the AND of the live members' flags."""
        cdef pycoll_comm_t *c = self._enter()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_comm_agree(c, &flag, timeout)
        self._leave(st)
        return flag

    def shrink(self, exclude=(), double timeout=0.0):
        """pycoll_comm_shrink: a NativeComm of the survivors (exclude: ranks here to leave out alive)."""
        cdef int32_t n = len(exclude)
        cdef int32_t *ids = <int32_t *>malloc(max(n, 1) * sizeof(int32_t))
        cdef pycoll_comm_t *child = NULL
        cdef pycoll_status_t st
        if ids == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                ids[i] = exclude[i]
            c = self._enter()
            with nogil:
                st = pycoll_comm_shrink(c, ids, n, timeout, &child)
            self._leave(st)
        finally:
            free(ids)
        cdef NativeComm native = NativeComm.__new__(NativeComm)
        native.comm = child
        return native

    def grow(self, unique_id, int world_size, *, str transport="auto", double timeout=300.0, ifname=None,
             int64_t ring_bytes=0, int64_t segment_bytes=0, double spin_us=-1.0, watch=None):
        """pycoll_comm_grow_config: a NativeComm of world_size ranks, this one's members first (unique_id: rank
        0's is used, the others may pass None); the other arguments as init_rank's."""
        if world_size > PYCOLL_MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be at most {PYCOLL_MAX_WORLD_SIZE} (PYCOLL_MAX_WORLD_SIZE), "
                             f"got {world_size}")
        cdef pycoll_unique_id_t id
        cdef const pycoll_unique_id_t *given = NULL
        if unique_id is not None:
            id = _id_from_bytes(unique_id)
            given = &id
        cdef _SetupConfig setup = _SetupConfig(transport, timeout, ifname, ring_bytes, segment_bytes, spin_us,
                                               watch)
        cdef pycoll_comm_t *grown = NULL
        cdef pycoll_status_t st
        cdef pycoll_comm_t *c = self._enter()
        with nogil:
            st = pycoll_comm_grow_config(c, world_size, given, &setup.config, &grown)
        self.active -= 1
        return setup.finish(st, grown)

    @property
    def failed_ranks(self):
        """pycoll_comm_failed_ranks: this communicator's ranks that agreements found lost."""
        if self.comm == NULL:
            raise CommunicatorClosed("communicator is closed")
        cdef int32_t n = pycoll_comm_failed_ranks(self.comm, NULL, 0)
        cdef int32_t *ids = <int32_t *>malloc(max(n, 1) * sizeof(int32_t))
        if ids == NULL:
            raise MemoryError()
        try:
            n = pycoll_comm_failed_ranks(self.comm, ids, n)
            return [ids[i] for i in range(n)]
        finally:
            free(ids)

    @property
    def parent_ranks(self):
        """Each member's rank in the communicator this one was split from (range(size) for a root)."""
        if self.comm == NULL:
            raise CommunicatorClosed("communicator is closed")
        return [pycoll_comm_parent_rank(self.comm, r) for r in range(pycoll_comm_size(self.comm))]

    @property
    def rank(self):
        if self.comm == NULL:
            raise CommunicatorClosed("communicator is closed")
        return pycoll_comm_rank(self.comm)

    def close(self, double linger=0.0):
        """Idempotent. A clean close tells the peers, so they do not mistake it for a crash, and waits up to
        ``linger`` seconds for theirs: ranks that disagreed about a collective without noticing (a rooted
        collective with different roots) raise MismatchError here at the latest. Closed either way.
        Non-blocking collectives still queued fail with CommunicatorClosed; the one in flight gets ``linger``
        seconds to finish, then is interrupted (native/comm/progress.c)."""
        if self.comm == NULL:
            return
        cdef pycoll_status_t st
        self.closing = True  # no new call from here on
        while self.active:  # other threads' calls, each bounded by its deadline: then nothing uses it
            with nogil:
                usleep(1000)
        with nogil:
            st = pycoll_comm_finalize(self.comm, linger)
        error = None
        if st != PYCOLL_OK:
            error = error_for_status(st, pycoll_comm_error(self.comm).decode(errors="replace"),
                                     pycoll_comm_failed_rank(self.comm))
        with nogil:
            pycoll_comm_destroy(self.comm)
        self.comm = NULL
        _reraise_pending()  # Ctrl-C while lingering
        if error is not None:
            raise error

    @property
    def handle(self):
        """This communicator's id (pycoll_comm_id; 0 once closed), for C code that keeps it as a number, such as
        pycoll.jax's XLA custom calls: pycoll_comm_acquire(id) gives the communicator while it exists (NULL
        after close, never another one), and close waits for a call that holds it."""
        return pycoll_comm_id(self.comm) if self.comm != NULL else 0


def check_call(call, int32_t rank, int32_t size):
    """Refuse a pycoll.plugins.Call for rank `rank` of `size` by the library's own rules (pycoll_call_check,
    native/comm/call.c) with the exception and sentence pycoll_comm_run would give: for engines whose calls never
    reach a libpycoll communicator (vendor libraries, third-party plugins)."""
    cdef pycoll_call_t c
    cdef char why[512]
    _pack(&c, call)
    cdef pycoll_status_t st = pycoll_call_check(&c, rank, size, why, sizeof(why))
    if st != PYCOLL_OK:
        raise error_for_status(st, why.decode(errors="replace"))


cdef int _pack(pycoll_call_t *c, call) except -1:
    """c: the pycoll_call_t of a pycoll.plugins.Call (its names as ids, its Buffers as addresses and counts)."""
    pycoll_call_init(c, <pycoll_coll_t>_COLLECTIVES[call.collective])
    recv, send = call.recv, call.send
    if recv is not None:
        c.recvbuf, c.recv_count, c.dtype = <void *><uintptr_t>recv.ptr, recv.count, <pycoll_dtype_t>recv.dtype
    if send is not None:
        c.sendbuf, c.send_count, c.dtype = <const void *><uintptr_t>send.ptr, send.count, <pycoll_dtype_t>send.dtype
    if call.counts is not None:
        c.counts = <const int64_t *><uintptr_t>call.counts.ctypes.data
    c.op = <pycoll_op_t>call.op
    c.algorithm = <pycoll_algorithm_t>_ALGORITHMS[call.algorithm]
    c.accuracy = <pycoll_accuracy_t>_ACCURACIES[call.accuracy]
    c.root, c.dest, c.source, c.tag = call.root, call.dest, call.source, call.tag
    return 0


include "fast_path.pxi"
include "work.pxi"
include "bootstrap.pxi"
include "trace.pxi"
