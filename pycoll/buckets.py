"""pycoll.GradientBuckets: many small arrays all-reduced as a few large flat buckets, each started as soon as
its arrays are ready, as DDP does with gradients in backward.

One all-reduce per array pays the per-call latency once per array; a bucket pays it once for all of its arrays.
Arrays are packed in reverse registration order (the order gradients become ready in backward), one dtype per
bucket, at most `bucket_bytes` per bucket (an array larger than that gets a bucket of its own). Buckets start in
one fixed order, the same on every rank: bucket k's all-reduce starts once its arrays are all ready and buckets
0..k-1 have started, so ranks whose arrays become ready in different orders still call the same collectives in
the same order (DDP's rule too).
"""

from __future__ import annotations

import ctypes
import operator

import numpy as np

from pycoll.buffers import as_buffer
from pycoll.comm import check_no_overlap
from pycoll.dtypes import DTYPES
from pycoll.work import wait_all

DTYPE_NAMES = tuple(DTYPES)  # index = pycoll dtype id
DEFAULT_BUCKET_BYTES = 25 << 20  # DDP's default: large enough that per-call latency is a small share


def _numpy_dtype(dtype_id, name):
    try:
        return np.dtype(DTYPE_NAMES[dtype_id])
    except TypeError:
        pass
    try:
        import ml_dtypes  # bfloat16 for NumPy
    except ImportError:
        raise TypeError(f"{name}: a {DTYPE_NAMES[dtype_id]} bucket needs ml_dtypes (pip install ml_dtypes)") from None
    return np.dtype(getattr(ml_dtypes, DTYPE_NAMES[dtype_id]))


def _bytes_of(buf):
    """A uint8 NumPy view of a host Buffer's memory (the caller keeps the array alive)."""
    if buf.nbytes == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array(ctypes.cast(buf.ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(buf.nbytes,))


def _check_disjoint(buffers):
    """ValueError naming two arrays that share memory: each one's result is copied back into it, so shared
    bytes would get whichever copy came last. Sorted by address, one pass (models register thousands)."""
    reach = None  # of the arrays seen so far, the one that ends last
    for i in sorted(range(len(buffers)), key=lambda k: buffers[k].ptr):
        if reach is not None:
            first, second = sorted((reach, i))
            check_no_overlap(buffers[first], f"arrays[{first}]", buffers[second], f"arrays[{second}]",
                             "GradientBuckets", in_place=False)
        if reach is None or buffers[i].ptr + buffers[i].nbytes > buffers[reach].ptr + buffers[reach].nbytes:
            reach = i


def _bucket_bytes(bucket_bytes):
    if isinstance(bucket_bytes, bool):
        raise TypeError("bucket_bytes must be an integer number of bytes, got bool")
    try:
        bucket_bytes = operator.index(bucket_bytes)
    except TypeError:
        raise TypeError(f"bucket_bytes must be an integer number of bytes, got "
                        f"{type(bucket_bytes).__name__}") from None
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    return bucket_bytes


def _plan(sizes, bucket_bytes):
    """The buckets over arrays of sizes[i] = (dtype key, nbytes), as lists of array indices in packing order:
    reverse registration order, one open bucket per dtype; a bucket is closed when the next array would take it
    past bucket_bytes. Buckets are listed (and start) in the order they were opened."""
    buckets, open_by_dtype, filled = [], {}, []
    for i in reversed(range(len(sizes))):
        dtype, nbytes = sizes[i]
        k = open_by_dtype.get(dtype)
        if k is None or filled[k] + nbytes > bucket_bytes:
            k = open_by_dtype[dtype] = len(buckets)
            buckets.append([])
            filled.append(0)
        buckets[k].append(i)
        filled[k] += nbytes
    return buckets


class _Bucket:
    def __init__(self, number, dtype):
        self.number = number  # buckets start in this order
        self.dtype = dtype
        self.members = []  # array indices, in packing order
        self.nbytes = 0
        self.flat = None   # the packed array, allocated once every member is known
        self.work = None
        self.concat = None  # the members' bytes, concatenated into flat when no member lives there (view(i))
        self.copies = []    # (bytes in flat, the array's bytes) of each member that does not live there


class GradientBuckets:
    """Flat buckets over `arrays` (host memory: NumPy, or writable PyTorch CPU tensors) on `comm`. JAX arrays are
    immutable: pycoll.reduce_tree (pycoll/tree.py) is the form for them.

    Each step: write the arrays in place (or write into view(i), which needs no copy at all), call ready(i) as
    each one is final (and leave it alone until wait() returns: it is read when its bucket starts), then
    wait(): every bucket is all-reduced with `op` (default "avg": gradient averaging)
    and the results are back in the arrays. The arrays are registered once: keep them (do not rebind them).
    """

    def __init__(self, comm, arrays, *, bucket_bytes=DEFAULT_BUCKET_BYTES, op="avg", accuracy="fast"):
        bucket_bytes = _bucket_bytes(bucket_bytes)
        comm._op(op)
        comm._accuracy(accuracy)
        self._comm, self._op, self._accuracy = comm, op, accuracy
        self._arrays = list(arrays)
        self._buffers = []
        for i, a in enumerate(self._arrays):
            buf = as_buffer(a, name=f"arrays[{i}]", writable=True)
            if buf.memory != "host":
                raise TypeError(f"arrays[{i}] is in {buf.memory} memory; GradientBuckets takes host memory for now")
            self._buffers.append(buf)
        _check_disjoint(self._buffers)
        self._buckets = self._pack(bucket_bytes)
        self._slot = {}  # array index -> (bucket, byte offset)
        self._slot_bytes = [None] * len(self._buffers)  # array index -> its bytes in its bucket
        for bucket in self._buckets:
            bucket.flat = np.empty(bucket.nbytes // bucket.dtype.itemsize, bucket.dtype)
            raw, offset = bucket.flat.view(np.uint8), 0
            for i in bucket.members:
                self._slot[i] = (bucket, offset)
                self._slot_bytes[i] = raw[offset:offset + self._buffers[i].nbytes]
                offset += self._buffers[i].nbytes
        self._array_bytes = [_bytes_of(buf) for buf in self._buffers]
        self._viewed = set()  # arrays that live in their bucket (view(i)): never copied
        self._bucket_number = [self._slot[i][0].number for i in range(len(self._buffers))]
        for bucket in self._buckets:
            self._plan_copies(bucket)
        self._reset()

    def _plan_copies(self, bucket):
        """What packing and unpacking bucket copies: with no member moved into it (view(i)), all its members in
        one np.concatenate into the bucket's bytes; otherwise one copy per member that was not moved."""
        copied = [i for i in bucket.members if i not in self._viewed]
        bucket.concat = [self._array_bytes[i] for i in copied] if len(copied) == len(bucket.members) else None
        bucket.copies = [(self._slot_bytes[i], self._array_bytes[i]) for i in copied]

    def _pack(self, bucket_bytes):
        buckets = []
        for members in _plan([(buf.dtype, buf.nbytes) for buf in self._buffers], bucket_bytes):
            first = members[0]
            bucket = _Bucket(len(buckets), _numpy_dtype(self._buffers[first].dtype, f"arrays[{first}]"))
            bucket.members = members
            bucket.nbytes = sum(self._buffers[i].nbytes for i in members)
            buckets.append(bucket)
        return buckets

    def _reset(self):
        self._ready = [False] * len(self._arrays)
        self._missing = [len(b.members) for b in self._buckets]
        self._next = 0  # the first bucket not started yet

    @property
    def bucket_count(self):
        """The number of buckets the arrays are packed into: one all-reduce each per step."""
        return len(self._buckets)

    def bucket_of(self, i):
        """The bucket number array i is packed into (buckets start in this order)."""
        return self._slot[self._index(i)][0].number

    def view(self, i):
        """Move array i into its bucket: returns its place there, a NumPy array of its shape and dtype holding
        its current values. From then on write array i's values into the view, not into arrays[i]: ready(i)
        and wait() copy nothing for it, and after wait() the view holds the reduced values (DDP's
        gradient_as_bucket_view). arrays[i] is no longer read or written."""
        i = self._index(i)
        bucket, offset = self._slot[i]
        buf = self._buffers[i]
        if i not in self._viewed:
            np.copyto(self._slot_bytes[i], self._array_bytes[i])
            self._viewed.add(i)
            self._plan_copies(bucket)
        first = offset // bucket.dtype.itemsize
        return bucket.flat[first:first + buf.count].reshape(np.shape(self._arrays[i]))

    def _index(self, i):
        i = operator.index(i)
        if not 0 <= i < len(self._arrays):
            raise IndexError(f"array index {i} out of range for {len(self._arrays)} arrays")
        return i

    def ready(self, i):
        """Array i holds its final values for this step: do not write it again until wait() returns. Every
        bucket that is now complete is packed and its all-reduce started, in bucket order."""
        if type(i) is not int or not 0 <= i < len(self._ready):  # the check ready() runs 100s of times per step
            i = self._index(i)
        if self._comm._failure is not None:  # broken: say so here, as a blocking all_reduce would
            self._comm._raise_failure()
        if self._ready[i]:
            raise ValueError(f"array {i} was already marked ready in this step")
        self._ready[i] = True
        k = self._bucket_number[i]
        self._missing[k] -= 1
        if k == self._next and not self._missing[k]:
            self._start_ready_buckets()

    def _start_ready_buckets(self):
        # A bucket is packed when it starts, not array by array in ready(): one np.concatenate for all of its
        # arrays costs less than one copy call per array.
        while self._next < len(self._buckets) and self._missing[self._next] == 0:
            if self._next:  # the bucket before failed already (its Work tells the communicator): raise that
                self._buckets[self._next - 1].work.is_completed()
            self._comm._raise_failure()
            bucket = self._buckets[self._next]
            if bucket.concat is not None:
                np.concatenate(bucket.concat, out=bucket.flat.view(np.uint8))
            else:
                for slot_bytes, array_bytes in bucket.copies:
                    np.copyto(slot_bytes, array_bytes)
            bucket.work = self._comm.all_reduce(bucket.flat, self._op, accuracy=self._accuracy, async_op=True)
            self._next += 1

    def wait(self):
        """Finish the step: arrays not marked ready are taken as they are, every bucket is all-reduced, and the
        results are copied back into the arrays (not into those that are view(i)), bucket by bucket as each
        completes, while the later ones are still running. Raises the first bucket's error once every bucket
        has completed, as a blocking all_reduce would (the arrays of the buckets before it hold results)."""
        for i, done in enumerate(self._ready):
            if not done:
                self.ready(i)
        try:
            for k, bucket in enumerate(self._buckets):
                try:
                    bucket.work.wait()
                except BaseException:
                    try:
                        wait_all([b.work for b in self._buckets[k + 1:]])
                    except Exception:  # noqa: BLE001 -- the first error is the one to raise
                        pass
                    raise
                for slot_bytes, array_bytes in bucket.copies:
                    np.copyto(array_bytes, slot_bytes)
        finally:
            for b in self._buckets:
                b.work = None
            self._reset()
