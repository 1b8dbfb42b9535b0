# cython: language_level=3, boundscheck=False, wraparound=False
"""Runs collectives on the in-process simulated transport (native/transport/sim_transport.c): one thread per
rank, each with its own communicator (pycoll_comm_create over its simulated p2p) calling the same
pycoll_comm_* functions production calls -- the same argument checks, algorithm decision, descriptors,
sequence numbers and history fingerprints. The GIL is released for the whole run. pycoll.tools.simulate builds the
per-rank calls."""

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
    const int64_t *counts  # the _V collectives' per-rank counts, else NULL
    # filled in by the rank's thread
    pycoll_status_t status
    int32_t failed_rank
    int last_algorithm
    char error[PYCOLL_ERROR_LEN + 64]

cdef struct sim_job:
    rank_call *calls
    pycoll_comm_options_t options
    const void *memory_table  # every rank's p2p->kernels (kernels/memory_kernels.h); NULL: the host's
    int32_t *host_of     # which simulated host each rank is on (pycoll_comm_set_hosts), NULL: one host

cdef pycoll_status_t call_collective(pycoll_comm_t *comm, rank_call *c) noexcept nogil:
    cdef pycoll_dtype_t dtype = <pycoll_dtype_t>c.dtype
    cdef pycoll_op_t op = <pycoll_op_t>c.op
    cdef pycoll_algorithm_t algorithm = <pycoll_algorithm_t>c.algorithm
    cdef pycoll_accuracy_t accuracy = <pycoll_accuracy_t>c.accuracy
    if c.coll == PYCOLL_COLL_ALL_REDUCE:
        return pycoll_comm_all_reduce(comm, c.sendbuf, c.recvbuf, c.count, dtype, op, algorithm, accuracy)
    if c.coll == PYCOLL_COLL_REDUCE_SCATTER:
        return pycoll_comm_reduce_scatter(comm, c.sendbuf, c.recvbuf, c.count, dtype, op, algorithm, accuracy)
    if c.coll == PYCOLL_COLL_ALL_GATHER:
        return pycoll_comm_all_gather(comm, c.sendbuf, c.recvbuf, c.count, dtype)
    if c.coll == PYCOLL_COLL_BROADCAST:
        return pycoll_comm_broadcast(comm, c.recvbuf, c.count, dtype, c.root)
    if c.coll == PYCOLL_COLL_REDUCE:
        return pycoll_comm_reduce(comm, c.sendbuf, c.recvbuf, c.count, dtype, op, c.root, accuracy)
    if c.coll == PYCOLL_COLL_ALL_TO_ALL:
        return pycoll_comm_all_to_all(comm, c.sendbuf, c.recvbuf, c.count, dtype)
    if c.coll == PYCOLL_COLL_GATHER:
        return pycoll_comm_gather(comm, c.sendbuf, c.recvbuf, c.count, dtype, c.root)
    if c.coll == PYCOLL_COLL_SCATTER:
        return pycoll_comm_scatter(comm, c.sendbuf, c.recvbuf, c.count, dtype, c.root)
    if c.coll == PYCOLL_COLL_ALL_GATHER_V:
        return pycoll_comm_all_gather_v(comm, c.sendbuf, c.recvbuf, c.counts, dtype)
    if c.coll == PYCOLL_COLL_REDUCE_SCATTER_V:
        return pycoll_comm_reduce_scatter_v(comm, c.sendbuf, c.recvbuf, c.counts, dtype, op, accuracy)
    return pycoll_comm_barrier(comm)

cdef pycoll_status_t run_rank(pycoll_p2p_t *p2p, void *arg, int32_t rank) noexcept nogil:
    cdef sim_job *job = <sim_job *>arg
    cdef rank_call *c = &job.calls[rank]
    cdef pycoll_comm_t *comm = NULL
    cdef pycoll_status_t st = PYCOLL_OK
    c.error[0] = 0
    if job.memory_table != NULL:
        p2p.kernels = job.memory_table
    if c.coll == CRASH_CALL:
        st = PYCOLL_ERR_SYSTEM
    elif c.coll != SKIP_CALL:
        st = pycoll_comm_create(&comm, p2p, &job.options, c.error, sizeof(c.error))
        if st == PYCOLL_OK:
            if job.host_of != NULL:
                st = pycoll_comm_set_hosts(comm, job.host_of)
            if st == PYCOLL_OK:
                st = call_collective(comm, c)
            c.last_algorithm = pycoll_comm_last_algorithm(comm)
            if st != PYCOLL_OK:
                strncpy(c.error, pycoll_comm_error(comm), sizeof(c.error) - 1)
            # The simulation owns p2p (its destroy does nothing); the communicator's own state goes here.
            pycoll_comm_destroy(comm)
    c.status = p2p.status if p2p.status != PYCOLL_OK else st
    c.failed_rank = p2p.failed_rank
    if st == PYCOLL_OK or p2p.status != PYCOLL_OK:
        strncpy(c.error, p2p.error, sizeof(c.error) - 1)
    return st


def run(list calls, double timeout_s, int64_t segment_bytes=0, uintptr_t memory_table=0, hosts=None):
    """Run one collective per rank; calls[r] = (coll, sendbuf address, recvbuf address, count, dtype id,
    op id, algorithm id, accuracy id, root[, counts address: `size` int64, for the _V collectives]). Every rank's communicator gets timeout_s and segment_bytes
    (0: the default); memory_table: the address of every transport's memory table (0: the host's); hosts (None: one
    host) is every rank's host map, hosts[r] the host of rank r. Returns (status, message, per-rank (status,
    failed_rank, message, algorithm name))."""
    cdef int32_t size = len(calls)
    cdef sim_job job
    cdef char err[512]
    cdef pycoll_status_t st
    pycoll_comm_options_init(&job.options)
    job.options.timeout_s = timeout_s
    job.options.segment_bytes = segment_bytes
    job.memory_table = <const void *>memory_table
    job.host_of = NULL
    if hosts is not None and len(hosts) != size:
        raise ValueError(f"hosts: {len(hosts)} entries for {size} ranks")
    job.calls = <rank_call *>calloc(max(size, 1), sizeof(rank_call))
    if job.calls == NULL:
        raise MemoryError()
    if hosts is not None:
        job.host_of = <int32_t *>calloc(max(size, 1), sizeof(int32_t))
        if job.host_of == NULL:
            free(job.calls)
            raise MemoryError()
    try:
        for r in range(size if hosts is not None else 0):
            job.host_of[r] = hosts[r]
        for r, call in enumerate(calls):
            coll, send, recv, count, dtype, op, algorithm, accuracy, root = call[:9]
            job.calls[r].counts = <const int64_t *><uintptr_t>(call[9] if len(call) > 9 else 0)
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
                  job.calls[r].error.decode(errors="replace"),
                  pycoll_algorithm_name(<pycoll_algorithm_t>job.calls[r].last_algorithm).decode())
                 for r in range(size)]
        return int(st), err.decode(errors="replace"), ranks
    finally:
        free(job.calls)
        free(job.host_of)


def comm_create_status(unsigned int p2p_version):
    """(status, message) of pycoll_comm_create over a transport that declares p2p ABI version p2p_version, not
    this library's: how a transport built against other headers is refused (tests). The transport has no
    operations: the check must come before any is called."""
    if p2p_version == PYCOLL_P2P_VERSION:
        raise ValueError(f"p2p_version: {p2p_version} is this library's own; pass another")
    cdef pycoll_p2p_ops_t ops
    cdef pycoll_p2p_t p2p
    cdef pycoll_comm_t *comm = NULL
    cdef char err[512]
    memset(&ops, 0, sizeof(ops))
    memset(&p2p, 0, sizeof(p2p))
    ops.version = p2p_version
    ops.name = b"wrong-version"
    p2p.ops = &ops
    p2p.size = 1
    p2p.failed_rank = -1
    cdef pycoll_status_t st = pycoll_comm_create(&comm, &p2p, NULL, err, sizeof(err))
    if comm != NULL:
        raise AssertionError("pycoll_comm_create accepted a transport of another p2p version")
    return int(st), err.decode(errors="replace")


def default_cost_model():
    """The defaults (pycoll_default_cost_model) in the flat layout of cost_model.pxi."""
    cdef pycoll_cost_model_t model
    cdef int a
    pycoll_default_cost_model(&model)
    return ([model.alpha_s, model.beta_s_per_byte, model.gamma_s_per_byte]
            + [model.latency_scale[a] for a in range(<int>PYCOLL_COST_MODEL_ALGOS)]
            + [model.bandwidth_scale[a] for a in range(<int>PYCOLL_COST_MODEL_ALGOS)])


def choose_all_reduce(int32_t size, int64_t nbytes, model=None):
    """The algorithm id the cost model (None: the defaults) picks for an all-reduce of nbytes over size ranks."""
    cdef pycoll_cost_model_t m
    fill_cost_model(&m, model)
    return int(pycoll_choose_all_reduce(&m, size, nbytes))


def choose_all_reduce_hosts(int32_t size, int32_t hosts, int32_t max_local, int64_t nbytes, model=None,
                            inter=None, int native=0):
    """The algorithm id the cost model picks for a job over `hosts` hosts, the largest with max_local ranks;
    inter: (inter_alpha_s, inter_beta_s_per_byte), None for the defaults; native: a transport's native
    algorithm id among the candidates (0: none)."""
    cdef pycoll_cost_model_t m
    fill_cost_model(&m, model)
    if inter is not None:
        m.inter_alpha_s, m.inter_beta_s_per_byte = inter
    return int(pycoll_choose_all_reduce_hosts(&m, size, hosts, max_local, nbytes, <pycoll_algorithm_t>native))


def choose_all_reduce_among(int32_t size, int64_t nbytes, int native, model=None):
    """choose_all_reduce on one host with a transport's native algorithm id (e.g. "shm_slots"'s; 0 for none) among
    the candidates."""
    return choose_all_reduce_hosts(size, 1, size, nbytes, model, None, native)


def predict_all_reduce_hosts_s(int algorithm, int32_t size, int32_t hosts, int32_t max_local, int64_t nbytes,
                               model=None, inter=None):
    """The predicted seconds of one all-reduce over `hosts` hosts (see choose_all_reduce_hosts)."""
    cdef pycoll_cost_model_t m
    fill_cost_model(&m, model)
    if inter is not None:
        m.inter_alpha_s, m.inter_beta_s_per_byte = inter
    return pycoll_predict_all_reduce_hosts_s(&m, <pycoll_algorithm_t>algorithm, size, hosts, max_local, nbytes)


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

