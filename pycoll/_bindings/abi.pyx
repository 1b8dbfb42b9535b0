# cython: language_level=3
"""The ids and names of libpycoll's enums (native/include/pycoll/ids.h, types.h) and its algorithm table, read from the C library once at import (as mpi4py binds MPI's
constants from C rather than retyping them): every Python module takes dtype, op, algorithm, accuracy and
collective ids from here, so the C headers are their one source of truth."""

from libc.stdint cimport int32_t, uint32_t

from pycoll._bindings.libpycoll cimport *


cdef dict _names(const char *(*name_of)(int) noexcept nogil, int count):
    # "?" is an id the C library reserves but does not define (yet): not a name anyone can ask for.
    return {name_of(i).decode(): i for i in range(count) if name_of(i).decode() != "?"}


cdef const char *_op(int i) noexcept nogil:
    return pycoll_op_name(<pycoll_op_t>i)


cdef const char *_algorithm(int i) noexcept nogil:
    return pycoll_algorithm_name(<pycoll_algorithm_t>i)


cdef const char *_accuracy(int i) noexcept nogil:
    return pycoll_accuracy_name(<pycoll_accuracy_t>i)


cdef const char *_coll(int i) noexcept nogil:
    return pycoll_coll_name(<pycoll_coll_t>i)


cdef tuple _dtype_table():
    cdef int32_t n = 0
    cdef const pycoll_dtype_info_t *table = pycoll_dtype_table(&n)
    flags = {"integer": PYCOLL_DTYPE_INTEGER, "float": PYCOLL_DTYPE_FLOAT, "complex": PYCOLL_DTYPE_COMPLEX,
             "compensated": PYCOLL_DTYPE_COMPENSATED, "signed": PYCOLL_DTYPE_SIGNED}
    return tuple(dict({flag: bool(table[i].flags & bit) for flag, bit in flags.items()},
                      id=table[i].id, name=table[i].name.decode(), size=table[i].size,
                      ops=tuple(op for op in range(PYCOLL_NUM_OPS) if table[i].ops & (<uint32_t>1 << op)),
                      accumulator=table[i].accumulator, precision=table[i].precision)
                 for i in range(n))


# One dict per dtype, in id order (types.c's table): id, name, size, the flags integer, float, complex,
# compensated and signed, ops (the op ids that reduce it), accumulator (a dtype id) and precision (bits).
DTYPE_TABLE = _dtype_table()
# name -> id, in id order
DTYPES = {row["name"]: row["id"] for row in DTYPE_TABLE}
OPS = _names(_op, PYCOLL_NUM_OPS)
ALGORITHMS = _names(_algorithm, PYCOLL_NUM_ALGOS)  # "auto" (0) included
ACCURACIES = _names(_accuracy, PYCOLL_NUM_ACCURACIES)
COLLECTIVES = _names(_coll, PYCOLL_NUM_COLLS)


cdef tuple _coll_algorithms(int coll):
    cdef int32_t n = 0
    cdef const pycoll_algorithm_info_t *table = pycoll_coll_algorithms(<pycoll_coll_t>coll, &n)
    return tuple(table[i].name.decode() for i in range(n))


# collective name -> the algorithms it has (the algorithm table, table.c), its fallback first; "auto" not listed
COLL_ALGORITHMS = {name: _coll_algorithms(ident) for name, ident in COLLECTIVES.items()}
# Algorithms that run only as a transport's own collectives (p2p.h's native table), and those that span hosts
# by the host map (the ring on one host): the table's traits.
NATIVE_ALGORITHMS = tuple(name for name, ident in ALGORITHMS.items()
                          if pycoll_algorithm_traits(<pycoll_algorithm_t>ident) & PYCOLL_ALGO_TRAIT_NATIVE)
HOST_ALGORITHMS = tuple(name for name, ident in ALGORITHMS.items()
                        if pycoll_algorithm_traits(<pycoll_algorithm_t>ident) & PYCOLL_ALGO_TRAIT_HOSTS)

ALGO_AUTO = PYCOLL_ALGO_AUTO
P2P_VERSION = PYCOLL_P2P_VERSION
DEFAULT_SEGMENT_BYTES = PYCOLL_DEFAULT_SEGMENT_BYTES
STATUS_OK = PYCOLL_OK
STATUS_INVALID = PYCOLL_ERR_INVALID
STATUS_PEER_FAILURE = PYCOLL_ERR_PEER_FAILURE
