# cython: language_level=3
"""Thin wrappers over libpycoll's vendor bindings (native/include/pycoll/vendor.h): NCCL and HCCL
communicators. Pointers and streams arrive as integers; dtype and op as pycoll ids."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t

from pycoll._bindings.libpycoll cimport *

from pycoll._bindings.comm import error_for_status
from pycoll.errors import CommunicatorClosed

NCCL_UNIQUE_ID_BYTES = 128
HCCL_ROOT_INFO_BYTES = 4108

cdef enum:
    ERROR_LEN = 512


def raise_status(int status, str message):
    """Raise the exception for a pycoll_status_t from a vendor call."""
    if status == PYCOLL_ERR_CLOSED:
        message = f"communicator is broken by an earlier error: {message}"
    raise error_for_status(status, message)


cdef str _text(const char *s):
    return s.decode("utf-8", "replace")


ctypedef pycoll_status_t (*load_fn)(const char *path, char *error, size_t error_len) noexcept nogil


cdef object _load(load_fn loader, str path):
    cdef char error[ERROR_LEN]
    cdef bytes p = path.encode()
    cdef const char *cp = p
    cdef pycoll_status_t st
    error[0] = 0
    with nogil:
        st = loader(cp, error, ERROR_LEN)
    return None if st == PYCOLL_OK else _text(error)


def nccl_load(str path):
    """None when libnccl at path is loaded (or one already was), else why not."""
    return _load(pycoll_nccl_load, path)


def cudart_load(str path):
    return _load(pycoll_cudart_load, path)


def hccl_load(str path):
    return _load(pycoll_hccl_load, path)


def acl_load(str path):
    return _load(pycoll_acl_load, path)


def nccl_version():
    """NCCL_VERSION_CODE of the loaded NCCL (0 when none is loaded)."""
    return pycoll_nccl_version()


def nccl_unique_id():
    cdef uint8_t uid[128]
    cdef char error[ERROR_LEN]
    cdef pycoll_status_t st
    with nogil:
        st = pycoll_nccl_unique_id(uid, error, ERROR_LEN)
    if st != PYCOLL_OK:
        raise_status(st, _text(error))
    return bytes(uid[:128])


def hccl_root_info():
    cdef uint8_t info[4108]
    cdef char error[ERROR_LEN]
    cdef pycoll_status_t st
    with nogil:
        st = pycoll_hccl_root_info(info, error, ERROR_LEN)
    if st != PYCOLL_OK:
        raise_status(st, _text(error))
    return bytes(info[:4108])


cdef class NcclComm:
    """One NCCL communicator. Collectives block until done on the stream, or raise (Timeout aborts it)."""
    cdef pycoll_nccl_comm_t *comm

    def __cinit__(self, bytes unique_id, int32_t rank, int32_t size, double timeout):
        if len(unique_id) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"unique_id must be {NCCL_UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        cdef char error[ERROR_LEN]
        cdef pycoll_status_t st = PYCOLL_OK
        cdef const uint8_t *uid = unique_id
        error[0] = 0
        with nogil:
            self.comm = pycoll_nccl_comm_create(uid, rank, size, timeout, &st, error, ERROR_LEN)
        if self.comm == NULL:
            raise_status(st, _text(error))

    def __dealloc__(self):
        self.close()

    def close(self):
        cdef pycoll_nccl_comm_t *c = self.comm
        self.comm = NULL
        if c != NULL:
            with nogil:
                pycoll_nccl_comm_destroy(c)

    cdef pycoll_nccl_comm_t *_open(self) except NULL:
        if self.comm == NULL:
            raise CommunicatorClosed("nccl: communicator is closed")
        return self.comm

    cdef _check(self, pycoll_status_t st):
        if st != PYCOLL_OK:
            raise_status(st, _text(pycoll_nccl_comm_error(self.comm)))

    @property
    def device(self):
        return pycoll_nccl_comm_device(self._open())

    def all_reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_all_reduce(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype,
                                        <pycoll_op_t>op, <void *>stream)
        self._check(st)

    def reduce_scatter(self, uintptr_t send, uintptr_t recv, int64_t recv_count, int dtype, int op,
                       uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_reduce_scatter(c, <void *>send, <void *>recv, recv_count, <pycoll_dtype_t>dtype,
                                            <pycoll_op_t>op, <void *>stream)
        self._check(st)

    def all_gather(self, uintptr_t send, uintptr_t recv, int64_t send_count, int dtype, uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_all_gather(c, <void *>send, <void *>recv, send_count, <pycoll_dtype_t>dtype,
                                        <void *>stream)
        self._check(st)

    def broadcast(self, uintptr_t buf, int64_t count, int dtype, int32_t root, uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_broadcast(c, <void *>buf, count, <pycoll_dtype_t>dtype, root, <void *>stream)
        self._check(st)

    def reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, int32_t root,
               uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_reduce(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype, <pycoll_op_t>op,
                                    root, <void *>stream)
        self._check(st)

    def barrier(self, uintptr_t stream):
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_barrier(c, <void *>stream)
        self._check(st)

    def send_recv(self, uintptr_t send, int64_t send_count, int32_t send_peer, uintptr_t recv, int64_t recv_count,
                  int32_t recv_peer, int dtype, uintptr_t stream):
        """Send to send_peer and receive from recv_peer at once (a peer of -1: that half is skipped)."""
        cdef pycoll_nccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_nccl_send_recv(c, <void *>send, send_count, send_peer, <void *>recv, recv_count, recv_peer,
                                       <pycoll_dtype_t>dtype, <void *>stream)
        self._check(st)


cdef class HcclComm:
    """One HCCL communicator; the same contract as NcclComm. HCCL has no avg: pass sum and scale."""
    cdef pycoll_hccl_comm_t *comm

    def __cinit__(self, bytes root_info, int32_t rank, int32_t size, double timeout):
        if len(root_info) != HCCL_ROOT_INFO_BYTES:
            raise ValueError(f"root_info must be {HCCL_ROOT_INFO_BYTES} bytes, got {len(root_info)}")
        cdef char error[ERROR_LEN]
        cdef pycoll_status_t st = PYCOLL_OK
        cdef const uint8_t *info = root_info
        error[0] = 0
        with nogil:
            self.comm = pycoll_hccl_comm_create(info, rank, size, timeout, &st, error, ERROR_LEN)
        if self.comm == NULL:
            raise_status(st, _text(error))

    def __dealloc__(self):
        self.close()

    def close(self):
        cdef pycoll_hccl_comm_t *c = self.comm
        self.comm = NULL
        if c != NULL:
            with nogil:
                pycoll_hccl_comm_destroy(c)

    cdef pycoll_hccl_comm_t *_open(self) except NULL:
        if self.comm == NULL:
            raise CommunicatorClosed("hccl: communicator is closed")
        return self.comm

    cdef _check(self, pycoll_status_t st):
        if st != PYCOLL_OK:
            raise_status(st, _text(pycoll_hccl_comm_error(self.comm)))

    def all_reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_all_reduce(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype,
                                        <pycoll_op_t>op, <void *>stream)
        self._check(st)

    def reduce_scatter(self, uintptr_t send, uintptr_t recv, int64_t recv_count, int dtype, int op,
                       uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_reduce_scatter(c, <void *>send, <void *>recv, recv_count, <pycoll_dtype_t>dtype,
                                            <pycoll_op_t>op, <void *>stream)
        self._check(st)

    def all_gather(self, uintptr_t send, uintptr_t recv, int64_t send_count, int dtype, uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_all_gather(c, <void *>send, <void *>recv, send_count, <pycoll_dtype_t>dtype,
                                        <void *>stream)
        self._check(st)

    def broadcast(self, uintptr_t buf, int64_t count, int dtype, int32_t root, uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_broadcast(c, <void *>buf, count, <pycoll_dtype_t>dtype, root, <void *>stream)
        self._check(st)

    def reduce(self, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op, int32_t root,
               uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_reduce(c, <void *>send, <void *>recv, count, <pycoll_dtype_t>dtype, <pycoll_op_t>op,
                                    root, <void *>stream)
        self._check(st)

    def barrier(self, uintptr_t stream):
        cdef pycoll_hccl_comm_t *c = self._open()
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_hccl_barrier(c, <void *>stream)
        self._check(st)
