# The C bootstrap (native/bootstrap, pycoll/bootstrap.h) for Python (included by comm.pyx): pycoll.init() and
# pycoll.init_rank() create their communicators through exactly the calls a C program makes.

from libc.string cimport memcpy

UNIQUE_ID_BYTES = PYCOLL_UNIQUE_ID_BYTES
MAX_WORLD_SIZE = PYCOLL_MAX_WORLD_SIZE
TRANSPORTS = {"auto": PYCOLL_TRANSPORT_AUTO, "tcp": PYCOLL_TRANSPORT_TCP, "shm": PYCOLL_TRANSPORT_SHM}


cdef _bootstrap_failed(pycoll_status_t st):
    return error_for_status(st, pycoll_bootstrap_error().decode(errors="replace"))


cdef _check_world(rank, world_size):
    # Before any conversion to the C ints: a value beyond them is a ValueError naming the argument and the limit,
    # not an OverflowError naming nothing.
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= world_size <= PYCOLL_MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be in [1, {PYCOLL_MAX_WORLD_SIZE}] (PYCOLL_MAX_WORLD_SIZE), "
                         f"got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")


cdef pycoll_unique_id_t _id_from_bytes(unique_id) except *:
    cdef pycoll_unique_id_t id
    cdef const unsigned char[:] view
    if not isinstance(unique_id, (bytes, bytearray, memoryview)):
        raise TypeError(f"unique_id must be bytes, got {type(unique_id).__name__}")
    view = bytes(unique_id)
    if view.shape[0] != PYCOLL_UNIQUE_ID_BYTES:
        raise ValueError(f"unique_id must be {PYCOLL_UNIQUE_ID_BYTES} bytes, got {view.shape[0]}")
    memcpy(id.internal, &view[0], PYCOLL_UNIQUE_ID_BYTES)
    return id


def unique_id_create(ifname=None, toward=None):
    """A new unique id's bytes (pycoll_unique_id_create): listening on interface `ifname`'s address, else on
    the local address routed to host `toward`, else as pycoll_get_unique_id."""
    cdef pycoll_unique_id_t id
    cdef bytes b_ifname = ifname.encode() if ifname else b""
    cdef bytes b_toward = toward.encode() if toward else b""
    cdef const char *c_ifname = NULL
    cdef const char *c_toward = NULL
    if b_ifname:
        c_ifname = b_ifname
    if b_toward:
        c_toward = b_toward
    cdef pycoll_status_t st = pycoll_unique_id_create(&id, c_ifname, c_toward)
    if st != PYCOLL_OK:
        raise _bootstrap_failed(st)
    return id.internal[:PYCOLL_UNIQUE_ID_BYTES]


def unique_id_address(unique_id):
    """The "host:port" a unique id names."""
    cdef pycoll_unique_id_t id = _id_from_bytes(unique_id)
    cdef char text[96]
    cdef pycoll_status_t st = pycoll_unique_id_address(&id, text, sizeof(text))
    if st != PYCOLL_OK:
        raise _bootstrap_failed(st)
    return text.decode()


def host_identity():
    """This process's host as the bootstrap compares them (pycoll_host_identity)."""
    cdef char text[256]
    pycoll_host_identity(text, sizeof(text))
    return text.decode(errors="replace")


def _force_segment_draws(str suffix, int32_t n):
    """For tests only: the next n segment names this process draws end in suffix (32 lowercase hex digits)
    instead of fresh random bits (pycoll_test_force_segment_draws)."""
    if len(suffix) != 32 or any(c not in "0123456789abcdef" for c in suffix):
        raise ValueError(f"suffix must be 32 lowercase hex digits, got {suffix!r}")
    pycoll_test_force_segment_draws(suffix.encode(), n)


cdef int _stop_setup(void *ctx) noexcept nogil:
    # While the bootstrap waits: Ctrl-C (its exception stays pending), or the caller's watch() raising (kept in
    # ctx's holder, a list [watch, exception]) -- e.g. a failure the rendezvous store recorded for the job.
    with gil:
        if check_signals_keep_exception() != 0:
            return 1
        holder = <list>ctx
        try:
            holder[0]()
        except BaseException as exc:
            holder[1] = exc
            return 1
        return 0


cdef class _SetupConfig:
    """A pycoll_init_config_t and what it points to (the interface's name, the watch's holder), alive while the
    bootstrap runs; finish() turns its status into the communicator or the error."""
    cdef pycoll_init_config_t config
    cdef bytes ifname
    cdef list holder

    def __init__(self, str transport, double timeout, ifname, int64_t ring_bytes, int64_t segment_bytes,
                 double spin_us, watch):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        pycoll_init_config_init(&self.config)
        self.config.transport = TRANSPORTS[transport]
        self.config.timeout_s = timeout
        self.ifname = ifname.encode() if ifname else b""
        if self.ifname:
            self.config.ifname = self.ifname
        self.config.shm_ring_bytes = ring_bytes
        self.config.segment_bytes = segment_bytes
        self.config.spin_ns = -1 if spin_us < 0 else <int64_t>(spin_us * 1000)
        self.config.check_interrupt = _signal_raised
        self.holder = [watch if watch is not None else (lambda: None), None]
        self.config.should_stop = _stop_setup
        self.config.stop_ctx = <void *>self.holder

    cdef NativeComm finish(self, pycoll_status_t st, pycoll_comm_t *comm):
        holder = self.holder
        if st in (PYCOLL_ERR_PEER_FAILURE, PYCOLL_ERR_TIMEOUT) and holder[1] is None:
            _stop_setup(<void *>holder)  # a failure recorded for the job explains this one: it is the real reason
        if st != PYCOLL_OK and holder[1] is not None:
            raise holder[1]  # the watch's verdict: why the job failed, whatever the wait ended with
        if st == PYCOLL_ERR_INTERRUPTED:
            _reraise_pending()
        if st != PYCOLL_OK:
            raise _bootstrap_failed(st)
        cdef NativeComm native = NativeComm.__new__(NativeComm)
        native.comm = comm
        return native


cdef NativeComm _init_rank(unique_id, int rank, int size, str transport, double timeout, ifname,
                           int64_t ring_bytes, int64_t segment_bytes, double spin_us, watch):
    cdef pycoll_unique_id_t id = _id_from_bytes(unique_id)
    cdef _SetupConfig setup = _SetupConfig(transport, timeout, ifname, ring_bytes, segment_bytes, spin_us, watch)
    cdef pycoll_comm_t *comm = NULL
    cdef pycoll_status_t st
    with nogil:
        st = pycoll_comm_init_rank_config(&comm, size, &id, rank, &setup.config)
    return setup.finish(st, comm)
include "store_listener.pxi"
