# Non-blocking collectives (included by comm.pyx, beside NativeComm): the handle of one queued collective.
#
# The collective runs on the communicator's progress thread in C (native/comm/progress.c), which never takes
# the GIL. Waiting happens here, in the thread that asks: in 100 ms slices with the GIL released, running the
# signal handlers between slices, so Ctrl-C interrupts the wait (the collective keeps running).

from cpython.exc cimport PyErr_CheckSignals

import time as _time

cdef double WAIT_SLICE_S = 0.1


cdef class NativeWork:
    """One pycoll_work_t: the engine-level handle pycoll.Work wraps (wait, done, error, algorithm)."""
    cdef pycoll_work_t *work

    def __dealloc__(self):
        # The collective completes all the same; pycoll.Communicator keeps its buffers alive until then.
        pycoll_work_free(self.work)
        self.work = NULL

    def wait(self, timeout):
        """True once the collective has completed, False when `timeout` seconds (None: no limit; the
        collective's own deadline bounds it) passed first."""
        cdef double slice_s
        cdef int done
        end = None if timeout is None else _time.monotonic() + timeout
        while True:
            slice_s = WAIT_SLICE_S if end is None else min(WAIT_SLICE_S, end - _time.monotonic())
            with nogil:
                done = pycoll_work_wait(self.work, slice_s)
            if done:
                return True
            if end is not None and _time.monotonic() >= end:
                return False
            PyErr_CheckSignals()

    def done(self):
        return pycoll_work_test(self.work) != 0

    def error(self):
        """The exception the collective failed with, as a blocking call raises it; None on success or while
        it runs."""
        cdef pycoll_status_t st = pycoll_work_status(self.work)
        if st == PYCOLL_OK or not pycoll_work_test(self.work):
            return None
        return error_for_status(st, pycoll_work_error(self.work).decode(errors="replace"),
                                pycoll_work_failed_rank(self.work))

    @property
    def algorithm(self):
        """The algorithm that ran (None before completion, or if it never ran)."""
        if not pycoll_work_test(self.work) or pycoll_work_algorithm(self.work) == PYCOLL_ALGO_AUTO:
            return None
        return pycoll_algorithm_name(pycoll_work_algorithm(self.work)).decode()


cdef NativeWork _started(NativeComm native, pycoll_status_t st, pycoll_work_t *work):
    """After a pycoll_comm_start_*: the handle, or the argument error it refused the call with."""
    native._leave(st)
    cdef NativeWork handle = NativeWork.__new__(NativeWork)
    handle.work = work
    return handle
