# NativeComm's C-level fields and methods, for the modules that build on it (testing.pyx); comm.pyx defines them.

from pycoll._bindings.libpycoll cimport pycoll_call_t, pycoll_comm_t, pycoll_status_t


cdef class NativeComm:
    cdef pycoll_comm_t *comm
    # Calls of this object now in C (their threads hold no GIL there): close waits for them. Threads take turns
    # in C (native/comm/progress.c): a call that finds another thread's running waits for it, never refused.
    cdef int active
    cdef bint closing
    cdef pycoll_comm_t *_open(self) except NULL
    cdef pycoll_comm_t *_enter(self) except NULL
    cdef int _leave(self, pycoll_status_t st) except -1
    cdef object _run(self, const pycoll_call_t *call, bint async_op)


cdef int _signal_raised(void *ctx) noexcept nogil
