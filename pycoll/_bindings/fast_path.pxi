# The common case of a small collective in one C-level call (included by comm.pyx, beside NativeComm).
#
# A small all_reduce is a few microseconds of transfer, so the Python around it matters: the general path
# (pycoll.comm.Communicator) turns each argument into a Buffer and checks each name in Python, as long again
# as the transfer itself. FastPath takes the case nearly every call is -- C-contiguous NumPy arrays of a dtype the backend
# takes, with argument names the communicator has already accepted once -- and does the lookups on C data.
# Anything else (another array type, an unknown name, a read-only or strided array, an out= of another dtype or
# overlapping x) it declines by returning None, and the general path runs, checks and explains: the two paths never
# disagree about what is valid, because the tables here are built by asking the general path's own checks. What
# the C call sees for itself -- counts that do not fit the collective, a root or peer out of range -- it leaves to
# the library, which refuses it on either path with the same sentence (native/comm/call.c).

from cpython.buffer cimport PyBUF_STRIDES, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_GetBuffer

import numpy as _np

cdef object _NDARRAY = _np.ndarray


cdef struct host_array:
    uintptr_t ptr
    int64_t count
    int64_t nbytes
    int dtype      # pycoll dtype id
    bint writable


cdef inline bint _shares_memory(const host_array *a, const host_array *b) noexcept:
    """Whether a and b overlap other than as exactly the same memory: the general path's check_no_overlap
    (pycoll.comm) then explains. Exact aliasing is left to the caller (in place for some collectives only)."""
    if a.nbytes == 0 or b.nbytes == 0:
        return False
    return a.ptr < b.ptr + <uintptr_t>b.nbytes and b.ptr < a.ptr + <uintptr_t>a.nbytes


cdef inline void _describe(pycoll_call_t *call, pycoll_coll_t collective, const host_array *send,
                           const host_array *recv) noexcept:
    """call: `collective` over send and recv (NULL: a buffer this rank does not use)."""
    pycoll_call_init(call, collective)
    if send != NULL:
        call.sendbuf, call.send_count, call.dtype = <const void *>send.ptr, send.count, <pycoll_dtype_t>send.dtype
    if recv != NULL:
        call.recvbuf, call.recv_count, call.dtype = <void *>recv.ptr, recv.count, <pycoll_dtype_t>recv.dtype


cdef class FastPath:
    """Collectives on C-contiguous NumPy arrays with pre-accepted names, taking the arguments as the
    Communicator's methods do; each returns the algorithm that ran, or None when the call is not such a case
    (nothing was done; the general path takes it)."""
    cdef NativeComm native
    cdef dict ops, algorithms, accuracies  # accepted argument -> id, from the communicator's own checks
    cdef int dtype_of_format[256]          # single-character buffer format -> pycoll dtype id, or -1
    cdef tuple algorithm_names             # by id, so the result needs no decoding

    def __cinit__(self, NativeComm native, dict ops, dict algorithms, dict accuracies, dtypes,
                  tuple algorithm_names):
        """dtypes: {numpy dtype name: pycoll id} of the dtypes the backend takes (those NumPy knows)."""
        self.native = native
        self.ops, self.algorithms, self.accuracies = ops, algorithms, accuracies
        self.algorithm_names = algorithm_names
        for i in range(256):
            self.dtype_of_format[i] = -1
        for name, ident in dtypes.items():
            # The format NumPy itself exports for the dtype ("f", "l", "e", ...): asked, not assumed.
            try:
                fmt = memoryview(_np.zeros(1, _np.dtype(name))).format.encode()
            except (TypeError, ValueError):  # a dtype the buffer protocol cannot describe: general path
                continue
            if len(fmt) == 1:
                self.dtype_of_format[fmt[0]] = ident

    cdef bint _view(self, object x, host_array *out) except -1:
        """x's memory when x is a C-contiguous ndarray of an accepted dtype; False otherwise."""
        cdef Py_buffer view
        if type(x) is not _NDARRAY:
            return False
        try:
            PyObject_GetBuffer(x, &view, PyBUF_STRIDES | 0x0004)  # 0x0004: PyBUF_FORMAT
        except (ValueError, BufferError):  # a dtype the buffer protocol cannot describe (ml_dtypes' bfloat16)
            return False
        try:
            if view.format == NULL or view.format[0] == 0 or view.format[1] != 0 or view.itemsize <= 0:
                return False
            if not PyBuffer_IsContiguous(&view, b'C'):
                return False
            out.dtype = self.dtype_of_format[<unsigned char>view.format[0]]
            out.ptr = <uintptr_t>view.buf
            out.count = view.len // view.itemsize
            out.nbytes = view.len
            out.writable = not view.readonly
            return out.dtype >= 0
        finally:
            PyBuffer_Release(&view)  # x stays alive for the call: the caller holds it

    cdef object _name(self):
        return self.algorithm_names[<int>pycoll_comm_last_algorithm(self.native.comm)]

    cdef bint _names(self, op, algorithm, accuracy, int *ids) except -1:
        """ids[0..2] = the op, algorithm and accuracy ids, when all three are accepted names."""
        o = self.ops.get(op) if type(op) is str else None
        a = self.algorithms.get(algorithm) if type(algorithm) is str else None
        m = self.accuracies.get(accuracy) if type(accuracy) is str else None
        if o is None or a is None or m is None:
            return False
        ids[0], ids[1], ids[2] = o, a, m
        return True

    cdef object _reduction(self, pycoll_call_t *call, const int *ids):
        """Run call with the op, algorithm and accuracy ids of _names."""
        call.op, call.algorithm, call.accuracy = <pycoll_op_t>ids[0], <pycoll_algorithm_t>ids[1], \
            <pycoll_accuracy_t>ids[2]
        self.native._run(call, False)
        return self._name()

    cdef bint _rank(self, value, int *out) except -1:
        """value an exact int that a pycoll_call_t's rank field holds (the library checks it is a rank): bool is an
        int subclass but no rank, so True goes to the general path's TypeError, as does a numpy integer."""
        if type(value) is not int or not -2147483648 <= value < 2147483648:
            return False
        out[0] = value
        return True

    cdef bint _pair(self, x, out, host_array *send, host_array *recv) except -1:
        """x and out of one dtype, out writable, in separate memory."""
        return self._view(x, send) and self._view(out, recv) and recv.writable and recv.dtype == send.dtype \
            and not _shares_memory(send, recv)

    cdef bint _result(self, out, const host_array *send, host_array *recv) except -1:
        """out: writable, of send's dtype, and either exactly send's memory or apart from it."""
        return self._view(out, recv) and recv.writable and recv.dtype == send.dtype \
            and ((recv.ptr == send.ptr and recv.nbytes == send.nbytes) or not _shares_memory(send, recv))

    def all_reduce(self, x, op, out, algorithm, accuracy):
        cdef host_array send, recv
        cdef pycoll_call_t call
        cdef int ids[3]
        if not self._names(op, algorithm, accuracy, ids) or not self._view(x, &send):
            return None
        if out is None:
            recv = send
            if not recv.writable:
                return None
        elif not self._result(out, &send, &recv):
            return None
        _describe(&call, PYCOLL_COLL_ALL_REDUCE, &send, &recv)
        return self._reduction(&call, ids)

    def broadcast(self, x, root):
        cdef host_array buf
        cdef pycoll_call_t call
        cdef int r
        if not self._rank(root, &r) or not self._view(x, &buf) or not buf.writable:
            return None
        _describe(&call, PYCOLL_COLL_BROADCAST, NULL, &buf)
        call.root = r
        self.native._run(&call, False)
        return self._name()

    def barrier(self):
        cdef pycoll_call_t call
        _describe(&call, PYCOLL_COLL_BARRIER, NULL, NULL)
        self.native._run(&call, False)
        return self._name()

    def reduce_scatter(self, x, out, op, algorithm, accuracy):
        cdef host_array send, recv
        cdef pycoll_call_t call
        cdef int ids[3]
        if not self._names(op, algorithm, accuracy, ids) or not self._pair(x, out, &send, &recv):
            return None
        _describe(&call, PYCOLL_COLL_REDUCE_SCATTER, &send, &recv)
        return self._reduction(&call, ids)

    def all_gather(self, x, out):
        cdef host_array send, recv
        cdef pycoll_call_t call
        if not self._pair(x, out, &send, &recv):
            return None
        _describe(&call, PYCOLL_COLL_ALL_GATHER, &send, &recv)
        self.native._run(&call, False)
        return self._name()

    def reduce(self, x, root, op, out, accuracy):
        """On the root the result goes into out (x itself when out is None: then x must be writable); elsewhere
        x is only read, and out is not used (as on the general path)."""
        cdef host_array send, recv
        cdef pycoll_call_t call
        cdef int ids[3]
        cdef int r
        if not self._names(op, "auto", accuracy, ids) or not self._rank(root, &r) or not self._view(x, &send):
            return None
        is_root = r == pycoll_comm_rank(self.native.comm)
        if not is_root:
            _describe(&call, PYCOLL_COLL_REDUCE, &send, NULL)
        elif out is None:
            if not send.writable:
                return None
            _describe(&call, PYCOLL_COLL_REDUCE, &send, &send)
        elif self._result(out, &send, &recv):
            _describe(&call, PYCOLL_COLL_REDUCE, &send, &recv)
        else:
            return None
        call.root = r
        return self._reduction(&call, ids)

    def all_to_all(self, x, out):
        cdef host_array send, recv
        cdef pycoll_call_t call
        if not self._pair(x, out, &send, &recv):
            return None
        _describe(&call, PYCOLL_COLL_ALL_TO_ALL, &send, &recv)
        self.native._run(&call, False)
        return self._name()

    cdef bint _peer_tag(self, peer, tag, int *p, uint32_t *t) except -1:
        """peer and tag exact ints that the call's fields hold, tag in [0, 2**32) (the general path explains the
        rest; the library checks that peer is another rank)."""
        if not self._rank(peer, p) or type(tag) is not int or not 0 <= tag < 4294967296:
            return False
        t[0] = tag
        return True

    def send(self, x, peer, tag):
        """True once sent, None to decline."""
        cdef host_array buf
        cdef pycoll_call_t call
        cdef int p
        cdef uint32_t t
        if not self._peer_tag(peer, tag, &p, &t) or not self._view(x, &buf):
            return None
        _describe(&call, PYCOLL_COLL_SEND_RECV, &buf, NULL)
        call.dest, call.tag = p, t
        self.native._run(&call, False)
        return True

    def recv(self, x, peer, tag):
        """True once received into x, None to decline."""
        cdef host_array buf
        cdef pycoll_call_t call
        cdef int p
        cdef uint32_t t
        if not self._peer_tag(peer, tag, &p, &t) or not self._view(x, &buf) or not buf.writable:
            return None
        _describe(&call, PYCOLL_COLL_SEND_RECV, NULL, &buf)
        call.source, call.tag = p, t
        self.native._run(&call, False)
        return True
