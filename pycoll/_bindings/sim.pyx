# cython: language_level=3, boundscheck=False, wraparound=False
"""Runs collectives on the in-process simulated transport (native/transport/sim_transport.c): one thread per
rank, the real C schedules, the GIL released for the whole run. pycoll.simulate builds the per-rank calls."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset, strncpy

from pycoll._bindings.libpycoll cimport *

include "cost_model.pxi"

# A rank that calls nothing (a peer that never shows up) or that dies before calling anything.
cdef enum:
    SKIP_CALL = -1
    CRASH_CALL = -2
SKIP = SKIP_CALL
CRASH = CRASH_CALL

cdef struct rank_call:
    int coll
    void *sendbuf
    void *recvbuf
    int64_t count
    int dtype
    int op
    int algorithm
    int accuracy
    int32_t root
    # filled in by the rank's thread
    pycoll_status_t status
    int32_t failed_rank
    char error[512]

cdef struct sim_job:
    rank_call *calls
    double timeout_s

cdef pycoll_status_t call_collective(pycoll_p2p_t *p2p, rank_call *c) noexcept nogil:
    cdef pycoll_dtype_t dtype = <pycoll_dtype_t>c.dtype
    cdef pycoll_op_t op = <pycoll_op_t>c.op
    cdef pycoll_algorithm_t algorithm = <pycoll_algorithm_t>c.algorithm
    cdef pycoll_accuracy_t accuracy = <pycoll_accuracy_t>c.accuracy
    cdef pycoll_all_reduce_fn fn
    if c.coll == PYCOLL_COLL_ALL_REDUCE:
        fn = pycoll_all_reduce_algorithm(algorithm)
        if fn == NULL:
            return PYCOLL_ERR_UNSUPPORTED
        return fn(p2p, c.recvbuf, c.count, dtype, op, accuracy)
    if c.coll == PYCOLL_COLL_REDUCE_SCATTER:
        return pycoll_reduce_scatter_algo(p2p, c.sendbuf, c.recvbuf, c.count, dtype, op, algorithm, accuracy)
    if c.coll == PYCOLL_COLL_ALL_GATHER:
        return pycoll_all_gather_algo(p2p, c.sendbuf, c.recvbuf, c.count, dtype, algorithm)
    if c.coll == PYCOLL_COLL_BROADCAST:
        return pycoll_broadcast_algo(p2p, c.recvbuf, c.count, dtype, c.root)
    if c.coll == PYCOLL_COLL_REDUCE:
        return pycoll_reduce_algo(p2p, c.sendbuf, c.recvbuf, c.count, dtype, op, c.root, accuracy)
    return pycoll_barrier_algo(p2p)

cdef pycoll_status_t run_rank(pycoll_p2p_t *p2p, void *arg, int32_t rank) noexcept nogil:
    cdef sim_job *job = <sim_job *>arg
    cdef rank_call *c = &job.calls[rank]
    cdef pycoll_status_t st = PYCOLL_OK
    if c.coll == CRASH_CALL:
        st = PYCOLL_ERR_SYSTEM
    elif c.coll != SKIP_CALL:
        # What the communicator does before every collective: stamp it and start its deadline.
        memset(&p2p.desc, 0, sizeof(pycoll_coll_desc_t))
        p2p.desc.seq = 1
        p2p.desc.count = c.count
        p2p.desc.root = c.root
        p2p.desc.coll = <uint8_t>c.coll
        p2p.desc.dtype = <uint8_t>c.dtype
        p2p.desc.op = <uint8_t>c.op
        p2p.desc.algorithm = <uint8_t>c.algorithm
        p2p.desc.accuracy = <uint8_t>c.accuracy
        p2p.deadline_ns = pycoll_now_ns() + <int64_t>(job.timeout_s * 1e9)
        st = call_collective(p2p, c)
    c.status = p2p.status if p2p.status != PYCOLL_OK else st
    c.failed_rank = p2p.failed_rank
    strncpy(c.error, p2p.error, sizeof(c.error) - 1)
    return st


def run(list calls, double timeout_s):
    """Run one collective per rank; calls[r] = (coll, sendbuf address, recvbuf address, count, dtype id,
    op id, algorithm id, accuracy id, root). Returns (status, message, per-rank (status, failed_rank,
    message))."""
    cdef int32_t size = len(calls)
    cdef sim_job job
    cdef char err[512]
    cdef pycoll_status_t st
    job.timeout_s = timeout_s
    job.calls = <rank_call *>calloc(max(size, 1), sizeof(rank_call))
    if job.calls == NULL:
        raise MemoryError()
    try:
        for r, (coll, send, recv, count, dtype, op, algorithm, accuracy, root) in enumerate(calls):
            job.calls[r].coll = coll
            job.calls[r].sendbuf = <void *><uintptr_t>send
            job.calls[r].recvbuf = <void *><uintptr_t>recv
            job.calls[r].count = count
            job.calls[r].dtype = dtype
            job.calls[r].op = op
            job.calls[r].algorithm = algorithm
            job.calls[r].accuracy = accuracy
            job.calls[r].root = root
        err[0] = 0
        with nogil:
            st = pycoll_sim_run(size, timeout_s, run_rank, &job, err, sizeof(err))
        ranks = [(int(job.calls[r].status), int(job.calls[r].failed_rank),
                  job.calls[r].error.decode(errors="replace")) for r in range(size)]
        return int(st), err.decode(errors="replace"), ranks
    finally:
        free(job.calls)


def default_cost_model():
    """The defaults (pycoll_default_cost_model) in the flat layout of cost_model.pxi."""
    cdef pycoll_cost_model_t model
    cdef int a
    pycoll_default_cost_model(&model)
    return ([model.alpha_s, model.beta_s_per_byte, model.gamma_s_per_byte]
            + [model.latency_scale[a] for a in range(<int>PYCOLL_NUM_ALGOS)]
            + [model.bandwidth_scale[a] for a in range(<int>PYCOLL_NUM_ALGOS)])


def choose_all_reduce(int32_t size, int64_t nbytes, model=None):
    """The algorithm id the cost model (None: the defaults) picks for an all-reduce of nbytes over size ranks."""
    cdef pycoll_cost_model_t m
    fill_cost_model(&m, model)
    return int(pycoll_choose_all_reduce(&m, size, nbytes))


def predict_all_reduce_s(int algorithm, int32_t size, int64_t nbytes, model=None):
    """The cost model's (None: the defaults) predicted time of one all-reduce, in seconds."""
    cdef pycoll_cost_model_t m
    fill_cost_model(&m, model)
    return pycoll_predict_all_reduce_s(&m, <pycoll_algorithm_t>algorithm, size, nbytes)


def all_reduce_cost_terms(int algorithm, int32_t size, int64_t nbytes, model=None):
    """(latency, bandwidth) seconds of an algorithm's textbook formula, before its scale factors."""
    cdef pycoll_cost_model_t m
    cdef double latency_s, bandwidth_s
    fill_cost_model(&m, model)
    pycoll_all_reduce_cost_terms(&m, <pycoll_algorithm_t>algorithm, size, nbytes, &latency_s, &bandwidth_s)
    return latency_s, bandwidth_s
