"""Python objects through the collectives (Communicator.broadcast_object and all_gather_object): pickled,
their sizes exchanged first as int64 so every rank can allocate, then their bytes as uint8 -- with
all_gather's counts where the sizes differ. Pickle runs code when it loads, so this is only for ranks that
trust each other, as the ranks of one job do."""

from __future__ import annotations

import pickle

import numpy as np


def _dumps(obj):
    return np.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=np.uint8)


def broadcast_object(comm, obj, root):
    """root's obj on every rank (obj itself on root, an unpickled copy elsewhere)."""
    payload = _dumps(obj) if comm.rank == root else None
    size = np.array([payload.size if payload is not None else 0], dtype=np.int64)
    comm.broadcast(size, root)
    if payload is None:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    comm.broadcast(payload, root)
    return obj if comm.rank == root else pickle.loads(payload.tobytes())


def all_gather_object(comm, obj):
    """[rank 0's obj, ..., rank size-1's obj] on every rank, each unpickled (copies, own one included, so every
    rank holds the same list)."""
    payload = _dumps(obj)
    sizes = np.empty(comm.size, dtype=np.int64)
    comm.all_gather(np.array([payload.size], dtype=np.int64), sizes)
    gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
    comm.all_gather(payload, gathered, counts=sizes)
    ends = np.cumsum(sizes)
    return [pickle.loads(gathered[end - n:end].tobytes()) for n, end in zip(sizes.tolist(), ends.tolist())]
