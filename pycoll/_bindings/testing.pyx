# cython: language_level=3, boundscheck=False, wraparound=False
"""For tests only: native communicators over transports a test wires itself -- connected sockets, or the routed
transport of memfd segments and sockets -- and a host map set by hand. pycoll's own communicators come from
the C bootstrap (NativeComm.init_rank), which does all of this; these drive the same C calls (the transports'
create functions, pycoll_comm_create, pycoll_comm_set_hosts) without it."""

from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc

from pycoll._bindings.comm cimport NativeComm, _signal_raised
from pycoll._bindings.libpycoll cimport *

include "routed_transport.pxi"

from pycoll._bindings.comm import error_for_status
from pycoll.errors import PycollError


def over_tcp(int rank, int size, fds, double timeout, double spin_us=0.0, int64_t segment_bytes=0):
    """A NativeComm over connected sockets (fds[r] to rank r; fds[rank] ignored). Takes ownership of the file
    descriptors. Its options: timeout (seconds per collective), spin_us (how long a wait polls before it
    sleeps), segment_bytes (ring segment; 0: the default)."""
    cdef char err[512]
    cdef int *cfds = <int *>malloc(max(size, 1) * sizeof(int))
    cdef pycoll_p2p_t *p2p
    if cfds == NULL:
        raise MemoryError()
    try:
        for r in range(size):
            cfds[r] = -1 if fds[r] is None else int(fds[r])
        err[0] = 0
        p2p = pycoll_tcp_transport_create(rank, size, cfds, err, sizeof(err))
    finally:
        free(cfds)
    return _over(p2p, err, timeout, spin_us, segment_bytes)


def over_routed(int rank, int size, fds, segment_fds, pids, int64_t ring_bytes, double timeout,
                double spin_us=0.0, int64_t segment_bytes=0):
    """Per-pair transports (routed_transport.pxi): shared memory with the ranks whose segment_fds[r] is given
    (this host's), TCP with the others over fds[r]; segment_fds[r] is rank r's segment of
    shm_segment_bytes(size, ring_bytes) bytes (the caller keeps the descriptors), pids[r] its process id or 0 if
    unknown; the other arguments as over_tcp."""
    cdef char err[512]
    err[0] = 0
    return _over(_routed_p2p(rank, size, fds, segment_fds, pids, ring_bytes, err), err, timeout, spin_us,
                 segment_bytes)


def set_hosts(NativeComm native, host_of):
    """host_of[r]: rank r's host number, every rank alike (the bootstrap finds it); it shapes the hierarchical
    all-reduce."""
    cdef int32_t size = pycoll_comm_size(native._open())
    if len(host_of) != size:
        raise ValueError(f"hosts: {len(host_of)} entries for {size} ranks")
    cdef int32_t *ids = <int32_t *>malloc(max(size, 1) * sizeof(int32_t))
    if ids == NULL:
        raise MemoryError()
    try:
        for r in range(size):
            ids[r] = host_of[r]
        native._leave(pycoll_comm_set_hosts(native._enter(), ids))
    finally:
        free(ids)


cdef NativeComm _over(pycoll_p2p_t *p2p, char *err, double timeout, double spin_us, int64_t segment_bytes):
    """A NativeComm over a transport just created (NULL: err says why), with the communicator's options."""
    cdef pycoll_comm_options_t options
    cdef pycoll_status_t st
    if p2p == NULL:
        raise PycollError(err.decode(errors="replace"))
    p2p.check_interrupt = _signal_raised
    cdef NativeComm native = NativeComm.__new__(NativeComm)
    pycoll_comm_options_init(&options)
    options.timeout_s = timeout
    options.spin_ns = <int64_t>(spin_us * 1000)
    options.segment_bytes = segment_bytes
    st = pycoll_comm_create(&native.comm, p2p, &options, err, 512)
    if st != PYCOLL_OK:
        p2p.ops.destroy(p2p)
        raise error_for_status(st, err.decode(errors="replace"))
    return native
