"""Run pycoll's collective schedules on simulated ranks: threads of this process exchanging through memory::

    outs = simulate("all_reduce", [np.arange(5) * r for r in range(4)], algorithm="halving_doubling")

Every rank creates its own communicator over the simulated transport and calls the same pycoll_comm_*
functions a TCP communicator calls (argument checks, the "auto" decision, descriptors, sequence numbers), so
this is how tests and the accuracy report drive world sizes beyond the machine's cores. Any of coll, op,
algorithm and accuracy may be a list (one entry per rank) to make ranks disagree; a rank whose coll is None
calls nothing (its peers time out) and one whose coll is "crash" fails before calling anything (its peers see
PeerFailure).
"""

import numpy as np

from pycoll._bindings import sim as _sim
from pycoll._bindings.abi import COLLECTIVES, STATUS_PEER_FAILURE
from pycoll._bindings.comm import error_for_status
from pycoll.algorithms import ACCURACIES, ALGORITHMS, accuracy_name, canonical_algorithm, segment_bytes_from_env
from pycoll.dtypes import dtype_id, op_id

__all__ = ["simulate", "COLLECTIVES"]

_ROOTED = {"broadcast", "reduce", "gather", "scatter"}


def _per_rank(value, size, name):
    if isinstance(value, (list, tuple)):
        if len(value) != size:
            raise ValueError(f"{name}: {len(value)} entries for {size} ranks")
        return list(value)
    return [value] * size


def _algorithm_id(algorithm):
    """The id of an algorithm name ("auto" included: each rank's communicator decides, as in production)."""
    algorithm = canonical_algorithm(algorithm)
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: unknown {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[algorithm]


def _error(status, message, rank_errors):
    failed = [rank for st, rank, *_ in rank_errors or () if st == STATUS_PEER_FAILURE and rank >= 0]
    exc = error_for_status(status, message, failed[0] if failed else -1)
    exc.rank_errors = [_error(s, m, []) if s else None for s, _, m, _ in rank_errors] if rank_errors else None
    return exc


def _host_ids(hosts, size):
    """hosts (one label per rank) as the communicator's host map: each label numbered by its first rank."""
    if hosts is None:
        return None
    labels = list(hosts)
    if len(labels) != size:
        raise ValueError(f"hosts: {len(labels)} entries for {size} ranks")
    return [labels.index(label) for label in labels]


def _prepare(coll, x, size, is_root, out_of_place=False):
    """(sendbuf, recvbuf, desc count, result) for one rank; the arrays are this call's own copies. An all-reduce
    out of place writes a separate result that starts as 0xA5 bytes, so an element it leaves unwritten shows."""
    if coll == "barrier":
        return None, None, 0, None
    x = np.array(x, copy=True, order="C")
    if x.ndim != 1:
        x = x.reshape(-1)
    if coll == "all_reduce" and out_of_place:
        out = np.empty_like(x)
        out.view(np.uint8).fill(0xA5)
        return x, out, x.size, out
    if coll == "all_reduce" or coll == "broadcast":
        return x, x, x.size, x
    if coll == "reduce_scatter":
        if x.size % size:
            raise ValueError(f"inputs: reduce_scatter needs a multiple of {size} elements per rank, got {x.size}")
        out = np.empty(x.size // size, dtype=x.dtype)
        return x, out, out.size, out
    if coll == "all_gather":
        out = np.empty(x.size * size, dtype=x.dtype)
        return x, out, x.size, out
    if coll in ("all_to_all", "scatter"):
        # scatter: every rank's input is size * k elements (the root's is sent; the others' give k).
        if x.size % size:
            raise ValueError(f"inputs: {coll} needs a multiple of {size} elements per rank, got {x.size}")
        out = np.empty(x.size if coll == "all_to_all" else x.size // size, dtype=x.dtype)
        send = x if coll == "all_to_all" or is_root else None
        return send, out, x.size // size, out
    if coll == "gather":
        out = np.empty(x.size * size, dtype=x.dtype) if is_root else None
        return x, out, x.size, out
    out = np.empty_like(x) if is_root else None
    return x, out, x.size, out


def _prepare_v(coll, x, rank, counts):
    """(sendbuf, recvbuf, result) of all_gather_v / reduce_scatter_v for one rank."""
    x = np.array(x, copy=True, order="C").reshape(-1)
    total = int(counts.sum())
    out = np.empty(total if coll == "all_gather_v" else int(counts[rank]), dtype=x.dtype)
    return x, out, out


def _counts_per_rank(counts, size):
    """counts (size ints, or one such list per rank to make ranks disagree) as one int64 array per rank."""
    if counts is None:
        raise ValueError("counts: the _v collectives need counts")
    entries = list(counts)
    per_rank = entries if entries and isinstance(entries[0], (list, tuple, np.ndarray)) else [entries] * size
    if len(per_rank) != size:
        raise ValueError(f"counts: {len(per_rank)} entries for {size} ranks")
    arrays = [np.ascontiguousarray(c, dtype=np.int64).reshape(-1) for c in per_rank]
    for r, a in enumerate(arrays):
        if a.size != size:  # the C side reads size entries: never fewer
            raise ValueError(f"counts: rank {r}'s has {a.size} entries for {size} ranks")
    return arrays


def simulate(coll, inputs, op="sum", algorithm="ring", accuracy="fast", root=0, timeout=30.0, segment_bytes=None,
             algorithms_out=None, memory_table=0, hosts=None, counts=None, out_of_place=False):
    """Run collective `coll` over len(inputs) simulated ranks, rank r contributing inputs[r]; returns each
    rank's result: the reduced/gathered/broadcast array, or None (barrier; reduce on ranks other than root).
    Inputs are not modified. Raises Timeout, PeerFailure, MismatchError or PycollError like a communicator;
    the exception's rank_errors lists each rank's own error (or None). segment_bytes is every rank's
    communicator option (None: PYCOLL_RING_SEGMENT_BYTES, else the default). A list passed as algorithms_out
    receives the algorithm each rank's communicator ran (its last_algorithm). memory_table (a test hook): the
    address of a memory table (native/kernels/memory_kernels.h) the ranks' transports hand the schedules instead of
    the host's, as a device transport would its device's (tests/fakes/guarded_memory.c); 0: the host's. hosts: which
    simulated host each rank is on (hosts[r] for rank r, any labels; None: one host), as a communicator learns
    it at rendezvous: it shapes the hierarchical all-reduce. counts: the _v collectives' per-rank element counts
    (size ints; or one list per rank, to make ranks disagree): all_gather_v's inputs[r] holds counts[r]
    elements, reduce_scatter_v's sum(counts). scatter: every rank's input holds size * k elements (only the
    root's is sent). out_of_place: all_reduce reads each rank's input and writes a separate result (as
    comm.all_reduce(x, out=y) does); by default it runs in place."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"inputs must be a list of arrays (one per rank), got {type(inputs).__name__}")
    size = len(inputs)
    if size < 1:
        raise ValueError("inputs: need at least one rank")
    if not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in 0..{size - 1}, got {root!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0, got {timeout!r}")
    colls = _per_rank(coll, size, "coll")
    ops = _per_rank(op, size, "op")
    algorithms = _per_rank(algorithm, size, "algorithm")
    accuracies = _per_rank(accuracy, size, "accuracy")
    calls, results, keep = [], [], []
    rank_counts = _counts_per_rank(counts, size) if any(c in ("all_gather_v", "reduce_scatter_v")
                                                         for c in colls) else [None] * size
    for r in range(size):
        c = colls[r]
        if c is None or c == "crash":
            calls.append((_sim.SKIP if c is None else _sim.CRASH, 0, 0, 0, 0, 0, 0, 0, -1))
            results.append(None)
            continue
        if c not in COLLECTIVES:
            raise ValueError(f"coll: unknown collective {c!r}; choose one of {', '.join(COLLECTIVES)}")
        if rank_counts[r] is not None and c in ("all_gather_v", "reduce_scatter_v"):
            send, recv, result = _prepare_v(c, inputs[r], r, rank_counts[r])
            count = 0
        else:
            send, recv, count, result = _prepare(c, inputs[r], size, r == root, out_of_place)
        dtype = dtype_id((send if send is not None else recv).dtype) if recv is not None or send is not None else 0
        keep.append((send, recv, rank_counts[r]))
        calls.append((COLLECTIVES[c], 0 if send is None else send.ctypes.data,
                      0 if recv is None else recv.ctypes.data, count, dtype, op_id(ops[r]),
                      _algorithm_id(algorithms[r]), ACCURACIES[accuracy_name(accuracies[r])],
                      root if c in _ROOTED else -1,
                      0 if rank_counts[r] is None else rank_counts[r].ctypes.data))
        results.append(result)
    if segment_bytes is None:
        segment_bytes = segment_bytes_from_env()
    elif not segment_bytes > 0:
        raise ValueError(f"segment_bytes must be > 0, got {segment_bytes!r}")
    status, message, rank_errors = _sim.run(calls, float(timeout), int(segment_bytes), int(memory_table),
                                            _host_ids(hosts, size))
    if algorithms_out is not None:
        algorithms_out[:] = [name for *_, name in rank_errors]
    if status:
        raise _error(status, message, rank_errors)
    return results
