# cython: language_level=3
"""The XLA FFI handlers of native/jax/ffi_handlers.c as PyCapsules, for jax.ffi.register_ffi_target
(pycoll.jax). Importing this module needs no jax: the handlers are plain C in libpycoll."""

from cpython.pycapsule cimport PyCapsule_New

cdef extern from *:
    """
    void *pycoll_jax_ffi_handler(const char *name);
    void pycoll_jax_ffi_version(int *major, int *minor);
    """
    void *pycoll_jax_ffi_handler(const char *name)
    void pycoll_jax_ffi_version(int *major, int *minor)

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")


def handler(str name):
    """The XLA FFI handler of collective `name` (one of COLLECTIVES) as a PyCapsule."""
    cdef void *fn = pycoll_jax_ffi_handler(name.encode())
    if fn == NULL:
        raise ValueError(f"name: no pycoll.jax handler {name!r}; expected one of {', '.join(COLLECTIVES)}")
    return PyCapsule_New(fn, NULL, NULL)


def ffi_version():
    """The XLA FFI API version (major, minor) the handlers were written against."""
    cdef int major = 0, minor = 0
    pycoll_jax_ffi_version(&major, &minor)
    return major, minor
