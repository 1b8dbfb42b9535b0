# cython: language_level=3
"""Thin wrappers over libpycoll's vendor family (native/include/pycoll/vendor.h): a Vendor (NCCL, HCCL, ...)
found by name, and its communicators. Pointers and streams arrive as integers; dtype and op as pycoll ids."""

from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport free, malloc

from pycoll._bindings.libpycoll cimport *

from pycoll._bindings.abi import ACCURACIES, ALGORITHMS, DTYPE_TABLE as _DTYPE_TABLE
from pycoll._bindings.comm import error_for_status
from pycoll.errors import BackendUnavailable, CommunicatorClosed

cdef extern from "pycoll/vendor.h" nogil:
    const char *pycoll_vendor_name(const pycoll_vendor_t *vendor)
    int64_t pycoll_vendor_unique_id_bytes(const pycoll_vendor_t *vendor)
    const char *pycoll_vendor_device_name(const pycoll_vendor_t *vendor)
    ctypedef struct pycoll_vendor_work_t:
        pass
    void pycoll_vendor_comm_set_async(pycoll_vendor_comm_t *comm, int on)
    pycoll_vendor_work_t *pycoll_vendor_comm_take_work(pycoll_vendor_comm_t *comm)
    int pycoll_vendor_work_wait(pycoll_vendor_work_t *work, double timeout_s)
    pycoll_status_t pycoll_vendor_work_status(pycoll_vendor_work_t *work, char *error, size_t error_len)
    pycoll_status_t pycoll_vendor_work_order_stream(pycoll_vendor_work_t *work, void *stream)
    void pycoll_vendor_work_release(pycoll_vendor_work_t *work)
    int32_t pycoll_vendor_fault_tolerance(const pycoll_vendor_t *vendor)
    pycoll_status_t pycoll_vendor_exchange(pycoll_vendor_comm_t *comm, const void *sendbuf,
                                           const int64_t *send_counts, void *recvbuf, const int64_t *recv_counts,
                                           int32_t ncounts, pycoll_dtype_t dtype, void *stream)
    void pycoll_vendor_comm_revoke(pycoll_vendor_comm_t *comm)
    pycoll_vendor_comm_t *pycoll_vendor_comm_shrink(pycoll_vendor_comm_t *comm, const int32_t *exclude, int32_t n,
                                                    pycoll_status_t *status, char *error, size_t error_len)
    enum:
        PYCOLL_VENDOR_HAS_SHRINK
        PYCOLL_VENDOR_HAS_REVOKE
        PYCOLL_VENDOR_HAS_GROW

# A test hook, declared here only: no installed header has it (backends/common/vendor_common.h).
cdef extern from *:
    """
    #include "pycoll/types.h"
    struct pycoll_memory_kernels;
    PYCOLL_API void vendor_set_test_device_kernels(const struct pycoll_memory_kernels *table);
    """
    void vendor_set_test_device_kernels(const void *table) nogil

cdef enum:
    ERROR_LEN = 512

# pycoll's ids the vendor engine needs, bound from the C headers.
SUM = PYCOLL_SUM
AVG = PYCOLL_AVG
FLOAT_DTYPES = frozenset(row["id"] for row in _DTYPE_TABLE if row["float"])
ERR_UNSUPPORTED = PYCOLL_ERR_UNSUPPORTED


def raise_status(int status, str message):
    """Raise the exception for a pycoll_status_t from a vendor call."""
    if status == PYCOLL_ERR_CLOSED:
        message = f"communicator is broken by an earlier error: {message}"
    raise error_for_status(status, message)


# pycoll_vendor_all_reduce and pycoll_vendor_reduce_scatter (whose count is per rank): one signature, one wrapper.
ctypedef pycoll_status_t (*_reduction_call)(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                            void *stream) noexcept nogil


cdef str _text(const char *s):
    return s.decode("utf-8", "replace")


cdef _load(pycoll_vendor_t *vendor, int32_t library, str path):
    """None when library `library` of vendor (NULL: pycoll's CUDA kernels) loads from path, else why not."""
    cdef char error[ERROR_LEN]
    cdef bytes p = path.encode()
    cdef const char *cp = p
    cdef pycoll_status_t st
    error[0] = 0
    with nogil:
        if vendor == NULL:
            st = pycoll_cuda_kernels_load(library, cp, error, ERROR_LEN)
        else:
            st = pycoll_vendor_load(vendor, library, cp, error, ERROR_LEN)
    return None if st == PYCOLL_OK else _text(error)


def cuda_kernels_load(int32_t library, str path):
    """None when library `library` of pycoll's CUDA kernels (0: NVRTC, 1: the CUDA driver) loads from path (or
    one already did), else why not."""
    return _load(NULL, library, path)


def cuda_kernel_source(int dtype):
    """The CUDA C source of pycoll's device kernels for a dtype id (None for a dtype with none)."""
    cdef int64_t n = pycoll_cuda_kernel_source(<pycoll_dtype_t>dtype, NULL, 0)
    if n < 0:
        return None
    cdef bytearray out = bytearray(n + 1)
    pycoll_cuda_kernel_source(<pycoll_dtype_t>dtype, <char *>out, n + 1)
    return out[:n].decode()


def cuda_kernels_compile(int dtype, int32_t sm, bint ptx=False):
    """Compile the kernels of a dtype id with the loaded NVRTC for compute capability sm (e.g. 80), as a launch on
    such a device would, without one: (target, image), target "sm_XY" for a CUBIN or "compute_XY" for PTX (ptx=True
    asks for PTX, to read it). Raises BackendUnavailable where NVRTC is not loaded or has no such architecture."""
    cdef char error[ERROR_LEN]
    cdef char target[32]
    cdef void *image = NULL
    cdef int64_t size = 0
    cdef pycoll_status_t st
    cdef int32_t flags = PYCOLL_CUDA_COMPILE_PTX if ptx else 0
    error[0] = 0
    target[0] = 0
    with nogil:
        st = pycoll_cuda_kernels_compile(<pycoll_dtype_t>dtype, sm, flags, &image, &size, target, 32, error,
                                         ERROR_LEN)
    if st == PYCOLL_ERR_UNSUPPORTED:
        raise BackendUnavailable(_text(error))
    if st != PYCOLL_OK:
        raise_status(st, _text(error))
    try:
        return _text(target), (<char *>image)[:size]
    finally:
        pycoll_cuda_kernels_free(image)


def cuda_pointer_device(uintptr_t ptr):
    """The CUDA device ordinal the driver says ptr is on; None where the driver is not loaded or does not know
    ptr (memory it did not allocate or register)."""
    cdef char error[ERROR_LEN]
    cdef int32_t device = -1
    cdef pycoll_status_t st
    with nogil:
        st = pycoll_cuda_pointer_device(<const void *>ptr, &device, error, ERROR_LEN)
    return device if st == PYCOLL_OK else None


def cuda_kernels_scale(uintptr_t ptr, int64_t count, int dtype, int64_t divisor, uintptr_t stream=0):
    """ptr[i] /= divisor for count elements of CUDA memory of a dtype id, with pycoll's scale_avg kernel on
    `stream`, in the primary context of the buffer's device: one launch through pycoll's whole device path."""
    cdef char error[ERROR_LEN]
    cdef pycoll_status_t st
    error[0] = 0
    with nogil:
        st = pycoll_cuda_kernels_scale(<void *>ptr, count, <pycoll_dtype_t>dtype, divisor, <void *>stream, error,
                                       ERROR_LEN)
    if st == PYCOLL_ERR_UNSUPPORTED:
        raise BackendUnavailable(_text(error))
    if st != PYCOLL_OK:
        raise_status(st, _text(error))


cdef int64_t *_counts_copy(counts, int32_t n) except? NULL:
    """n counts as a C array the caller frees (NULL for None: that side moves nothing)."""
    if counts is None:
        return NULL
    cdef int64_t *out = <int64_t *>malloc(n * sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    cdef int32_t i
    for i in range(n):
        out[i] = counts[i]
    return out


def _set_test_device_kernels(uintptr_t table):
    """For tests only: the memory table at address `table` (0: none) serves every vendor's device memory in this
    process, in place of the vendor's own (a test double of a device table over the fake libraries, whose
    "device" memory is host memory)."""
    vendor_set_test_device_kernels(<const void *>table)


cdef class Vendor:
    """A vendor built into libpycoll, by name ("nccl", "hccl"): its libraries are loaded once per process."""
    cdef pycoll_vendor_t *vendor

    def __cinit__(self, str name):
        cdef bytes b = name.encode()
        self.vendor = pycoll_vendor_find(b)
        if self.vendor == NULL:
            raise ValueError(f"libpycoll has no vendor named {name!r}")

    @property
    def name(self):
        return _text(pycoll_vendor_name(self.vendor))

    @property
    def unique_id_bytes(self):
        return pycoll_vendor_unique_id_bytes(self.vendor)

    def load(self, int32_t library, str path):
        """None when library `library` (0: the collectives, 1: the runtime) loads from path (or one already
        did), else why not."""
        return _load(self.vendor, library, path)

    def library_version(self):
        """The loaded library's version code (NCCL_VERSION_CODE, 0 when none is loaded or known)."""
        return pycoll_vendor_library_version(self.vendor)

    def device_name(self):
        """The current device's model as the vendor's runtime names it ("Ascend910B1"); "" where unknown."""
        return _text(pycoll_vendor_device_name(self.vendor))

    def unique_id(self):
        cdef char error[ERROR_LEN]
        cdef bytearray uid = bytearray(pycoll_vendor_unique_id_bytes(self.vendor))
        cdef char *p = uid
        cdef int64_t n = len(uid)
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_unique_id(self.vendor, p, n, error, ERROR_LEN)
        if st != PYCOLL_OK:
            raise_status(st, _text(error))
        return bytes(uid)

    def comm(self, bytes unique_id, int32_t rank, int32_t size, double timeout):
        return VendorComm(self, unique_id, rank, size, timeout)

    def fault_tolerance(self):
        """What the loaded library has of "shrink", "revoke" and "grow" (none before loading)."""
        cdef int32_t bits = pycoll_vendor_fault_tolerance(self.vendor)
        return frozenset(name for name, bit in (("shrink", PYCOLL_VENDOR_HAS_SHRINK),
                                                ("revoke", PYCOLL_VENDOR_HAS_REVOKE),
                                                ("grow", PYCOLL_VENDOR_HAS_GROW)) if bits & bit)


cdef class VendorComm:
    """One vendor communicator. Collectives block until done (the host saw their end), or raise (Timeout aborts
    it). The compensated_* calls run pycoll's own algorithms (a pycoll communicator over the vendor's send/recv)."""
    cdef pycoll_vendor_comm_t *comm
    cdef pycoll_comm_t *native
    cdef double timeout
    cdef readonly str name

    def __cinit__(self, Vendor vendor, bytes unique_id, int32_t rank, int32_t size, double timeout):
        if vendor is None:  # shrink()'s: it sets the communicator itself
            return
        if len(unique_id) != vendor.unique_id_bytes:
            raise ValueError(f"unique_id must be {vendor.unique_id_bytes} bytes, got {len(unique_id)}")
        cdef char error[ERROR_LEN]
        cdef pycoll_status_t st = PYCOLL_OK
        cdef const char *uid = unique_id
        cdef int64_t n = len(unique_id)
        error[0] = 0
        self.name = vendor.name
        self.timeout = timeout
        with nogil:
            self.comm = pycoll_vendor_comm_create(vendor.vendor, uid, n, rank, size, timeout, &st, error, ERROR_LEN)
        if self.comm == NULL:
            raise_status(st, _text(error))

    def __dealloc__(self):
        self.close()

    def close(self):
        cdef pycoll_vendor_comm_t *c = self.comm
        cdef pycoll_comm_t *native = self.native
        self.comm = NULL
        self.native = NULL
        with nogil:
            if native != NULL:  # first: it runs over c
                pycoll_comm_destroy(native)
            if c != NULL:
                pycoll_vendor_comm_destroy(c)

    cdef pycoll_vendor_comm_t *_open(self) except NULL:
        if self.comm == NULL:
            raise CommunicatorClosed(f"{self.name}: communicator is closed")
        return self.comm

    cdef _check(self, pycoll_status_t st):
        if st != PYCOLL_OK:
            raise_status(st, _text(pycoll_vendor_comm_error(self.comm)))

    def request_abort(self, int32_t failed_rank, str reason):
        """From any thread: the call waiting on this communicator (else the next one) fails with PeerFailure
        naming `failed_rank` (-1: none) and saying `reason`, and the communicator is aborted; nothing once it is
        closed. Called with the GIL held, so close() cannot free the communicator under it."""
        cdef bytes text = reason.encode("utf-8", "replace")
        if self.comm != NULL:
            pycoll_vendor_comm_request_abort(self.comm, failed_rank, text)

    def revoke(self):
        """From any thread, as request_abort, but the call fails with CommunicatorRevoked; the vendor's work in
        flight is stopped, by its revoke where it has one (the communicator stays the parent of a shrink)."""
        if self.comm != NULL:
            pycoll_vendor_comm_revoke(self.comm)

    def shrink(self, exclude, double timeout):
        """A VendorComm of this one's ranks but `exclude` (ascending), through the vendor's shrink: every rank
        that remains calls it. A PycollError where the vendor cannot (the loaded library has no shrink, or this
        communicator was aborted): re-create it then."""
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef int32_t n = len(exclude)
        cdef int32_t *ids = <int32_t *>malloc(max(n, 1) * sizeof(int32_t))
        cdef char error[ERROR_LEN]
        cdef pycoll_status_t st = PYCOLL_OK
        cdef pycoll_vendor_comm_t *child = NULL
        cdef VendorComm new
        if ids == NULL:
            raise MemoryError()
        try:
            for i, rank in enumerate(exclude):
                ids[i] = rank
            error[0] = 0
            with nogil:
                child = pycoll_vendor_comm_shrink(c, ids, n, &st, error, ERROR_LEN)
        finally:
            free(ids)
        if child == NULL:
            raise_status(st, _text(error))
        new = VendorComm.__new__(VendorComm, None, None, 0, 0, 0.0)
        new.comm, new.name, new.timeout = child, self.name, self.timeout
        return new

    @property
    def device(self):
        """The device the communicator runs on (-1 where the vendor does not say)."""
        return pycoll_vendor_comm_device(self._open())

    cdef _reduction(self, _reduction_call call, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op,
                    uintptr_t stream):
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = call(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype, <pycoll_op_t>op, <void *>stream)
        self._check(st)

    def all_reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, uintptr_t stream):
        self._reduction(pycoll_vendor_all_reduce, send, recv, count, dtype, op, stream)

    def reduce_scatter(self, uintptr_t send, uintptr_t recv, int64_t recv_count, int dtype, int op,
                       uintptr_t stream):
        self._reduction(pycoll_vendor_reduce_scatter, send, recv, recv_count, dtype, op, stream)

    def all_gather(self, uintptr_t send, uintptr_t recv, int64_t send_count, int dtype, uintptr_t stream):
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_all_gather(c, <void *>send, <void *>recv, send_count, <pycoll_dtype_t>dtype,
                                          <void *>stream)
        self._check(st)

    def broadcast(self, uintptr_t buf, int64_t count, int dtype, int32_t root, uintptr_t stream):
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_broadcast(c, <void *>buf, count, <pycoll_dtype_t>dtype, root, <void *>stream)
        self._check(st)

    def reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, int32_t root,
               uintptr_t stream):
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_reduce(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype, <pycoll_op_t>op,
                                      root, <void *>stream)
        self._check(st)

    def barrier(self, uintptr_t stream):
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_barrier(c, <void *>stream)
        self._check(st)

    def send_recv(self, uintptr_t send, int64_t send_count, int32_t send_peer, uintptr_t recv, int64_t recv_count,
                  int32_t recv_peer, int dtype, uintptr_t stream):
        """Send to send_peer and receive from recv_peer at once (a peer of -1: that half is skipped)."""
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_send_recv(c, <void *>send, send_count, send_peer, <void *>recv, recv_count,
                                         recv_peer, <pycoll_dtype_t>dtype, <void *>stream)
        self._check(st)

    def exchange(self, uintptr_t send, send_counts, uintptr_t recv, recv_counts, int dtype, uintptr_t stream):
        """One vendor group: send_counts[r] elements of send to rank r, recv_counts[r] from rank r into recv
        (blocks consecutive in rank order; None: nothing sent / received), this rank's own block copied."""
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef int32_t n = len(send_counts if send_counts is not None else recv_counts or ())
        cdef int64_t *sc = NULL
        cdef int64_t *rc = NULL
        cdef pycoll_status_t st
        for counts, what in ((send_counts, "send_counts"), (recv_counts, "recv_counts")):
            if counts is not None and len(counts) != n:
                raise ValueError(f"{what}: {n} counts expected (as many as the other side's), got {len(counts)}")
        try:
            sc = _counts_copy(send_counts, n)
            rc = _counts_copy(recv_counts, n)
            with nogil:
                st = pycoll_vendor_exchange(c, <void *>send, sc, <void *>recv, rc, n, <pycoll_dtype_t>dtype,
                                            <void *>stream)
        finally:
            free(sc)
            free(rc)
        self._check(st)

    cdef pycoll_comm_t *_native(self, uintptr_t stream, uintptr_t buf) except NULL:
        """The pycoll communicator over this one, its transport set to the stream; refused for memory the
        host cannot reach (pycoll_vendor_comm_p2p says why)."""
        cdef pycoll_vendor_comm_t *c = self._open()
        cdef pycoll_p2p_t *p2p = pycoll_vendor_comm_p2p(c, <void *>stream, <const void *>buf)
        if p2p == NULL:
            raise BackendUnavailable(_text(pycoll_vendor_comm_error(c)))
        cdef pycoll_comm_options_t options
        cdef char err[512]
        cdef pycoll_status_t st
        if self.native == NULL:
            pycoll_comm_options_init(&options)
            options.timeout_s = self.timeout
            err[0] = 0
            st = pycoll_comm_create(&self.native, p2p, &options, err, sizeof(err))
            if st != PYCOLL_OK:
                raise error_for_status(st, f"{self.name}: {_text(err)}")
        return self.native

    def compensated(self, str kind, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op,
                    int32_t root, uintptr_t stream):
        """pycoll's compensated all_reduce, reduce_scatter (count: per rank) or reduce (native/algorithms) over
        the vendor's send/recv; returns the algorithm that ran. Where there is a choice it is the ring, the
        schedule verified over the vendor transport (the compensated result does not depend on it)."""
        return self.own(kind, send, recv, count, dtype, op, root, stream, "ring", "compensated")

    def own(self, str kind, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, int32_t root,
            uintptr_t stream, str algorithm, str accuracy):
        """pycoll's own all_reduce, reduce_scatter (count: per rank) or reduce (native/algorithms) with
        `algorithm` and `accuracy` over the vendor's send/recv: for what the vendor cannot run itself. Returns
        the algorithm that ran."""
        cdef int k = ("all_reduce", "reduce_scatter", "reduce").index(kind)
        cdef pycoll_algorithm_t algo = <pycoll_algorithm_t>ALGORITHMS[algorithm]
        cdef pycoll_accuracy_t acc = <pycoll_accuracy_t>ACCURACIES[accuracy]
        self._native(stream, send)
        cdef pycoll_comm_t *n = self._native(stream, recv)
        cdef pycoll_status_t st
        with nogil:
            if k == 0:
                st = pycoll_comm_all_reduce(n, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype,
                                            <pycoll_op_t>op, algo, acc)
            elif k == 1:
                st = pycoll_comm_reduce_scatter(n, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype,
                                                <pycoll_op_t>op, algo, acc)
            else:
                st = pycoll_comm_reduce(n, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype,
                                        <pycoll_op_t>op, root, acc)
        if st != PYCOLL_OK:
            raise_status(st, _text(pycoll_comm_error(n)))
        cdef pycoll_vendor_comm_t *c = self._open()
        with nogil:
            st = pycoll_vendor_comm_sync(c, <void *>stream)  # the last kernels follow the last vendor group
        if st != PYCOLL_OK:
            raise_status(st, _text(pycoll_vendor_comm_error(c)))
        return pycoll_algorithm_name(pycoll_comm_last_algorithm(n)).decode()


cdef class VendorWork:
    """A vendor collective enqueued in async mode (VendorComm.take_work): the handle pycoll.Work wraps. Its
    communicator's watchdog finishes it -- completed, or failed with the communicator's first error.
    `current_stream()` (set by the engine) is the stream its array's framework queues work on at the time asked."""
    cdef pycoll_vendor_work_t *work
    cdef readonly object algorithm
    cdef public object current_stream

    def order_stream(self):
        """Order the later work of the framework's current stream after the collective, without a host wait
        (ProcessGroupNCCL's Work.wait()): True; False where only a host wait serves (host memory, no stream
        wait in the runtime, no current stream known)."""
        if self.current_stream is None:
            return False
        cdef uintptr_t stream = self.current_stream()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_vendor_work_order_stream(self.work, <void *>stream)
        return st == PYCOLL_OK

    def __dealloc__(self):
        if self.work != NULL:
            pycoll_vendor_work_release(self.work)
            self.work = NULL

    def wait(self, timeout):
        """True once finished; waits at most timeout seconds (None: until then)."""
        cdef double t = -1.0 if timeout is None else float(timeout)
        cdef int finished
        with nogil:
            finished = pycoll_vendor_work_wait(self.work, t)
        return bool(finished)

    def done(self):
        return bool(pycoll_vendor_work_wait(self.work, 0.0))

    def error(self):
        """The exception the collective failed with, None while pending or once completed."""
        cdef char error[ERROR_LEN]
        cdef pycoll_status_t st = pycoll_vendor_work_status(self.work, error, ERROR_LEN)
        if st == PYCOLL_OK or st == PYCOLL_ERR_BUSY:
            return None
        return error_for_status(st, _text(error))


def set_async(VendorComm comm, bint on):
    """While on (and the vendor has events), the communicator's own collectives return once enqueued."""
    pycoll_vendor_comm_set_async(comm._open(), on)


def take_work(VendorComm comm, algorithm):
    """The work of the last collective enqueued in async mode, or None when it completed before returning."""
    cdef pycoll_vendor_work_t *w = pycoll_vendor_comm_take_work(comm._open())
    if w == NULL:
        return None
    cdef VendorWork work = VendorWork.__new__(VendorWork)
    work.work = w
    work.algorithm = algorithm
    return work
