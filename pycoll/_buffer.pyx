# cython: language_level=3
"""The address of an object's memory through the buffer protocol: the fast path of pycoll.buffers, where a
NumPy attribute round trip (__array_interface__ builds a dict) would cost more than a small collective."""

from cpython.buffer cimport PyBUF_STRIDES, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uintptr_t


def host_view(obj):
    """(address, readonly, c_contiguous) of obj's memory; BufferError/TypeError if it exports none."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_STRIDES)
    try:
        return <uintptr_t>view.buf, bool(view.readonly), bool(PyBuffer_IsContiguous(&view, b'C'))
    finally:
        # The caller keeps obj alive; the exporter's memory stays where it is while obj lives.
        PyBuffer_Release(&view)
