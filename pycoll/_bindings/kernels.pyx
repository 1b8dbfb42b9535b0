# cython: language_level=3, boundscheck=False, wraparound=False
"""Byte-level bindings of libpycoll's reduction kernels (kernels.h). pycoll.kernels is the public layer: it
maps dtypes and ops to ids and validates arrays; this module takes any C-contiguous buffer and ids."""
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uintptr_t

from pycoll._bindings.libpycoll cimport *


cdef struct _Views:
    # One kernel call's buffers, element count and status, on the caller's stack: the Py_buffers taken by
    # argument name with _take and all released by one _release in a finally (one place for the acquire/release
    # pairs every binding needs, at no allocation -- a kernel call on a small array costs a few hundred
    # nanoseconds in all).
    Py_buffer views[5]
    int held
    int64_t count  # the call's element count, from the buffer _take_counted took
    pycoll_status_t status  # what the kernel returned


cdef Py_buffer *_take(_Views *v, object obj, bint writable, str name) except NULL:
    # No PyBUF_FORMAT: numpy cannot describe ml_dtypes' bfloat16 as a format string, and we only need bytes.
    cdef int flags = PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0)
    try:
        PyObject_GetBuffer(obj, &v.views[v.held], flags)
    except TypeError:
        raise TypeError(f"{name} must support the buffer protocol, got {type(obj).__name__}") from None
    except (BufferError, ValueError) as exc:
        what = "a writable C-contiguous buffer" if writable else "a C-contiguous buffer"
        raise ValueError(f"{name} must be {what}: {exc}") from None
    v.held += 1
    return &v.views[v.held - 1]


cdef void _release(_Views *v) noexcept:
    while v.held:
        v.held -= 1
        PyBuffer_Release(&v.views[v.held])


cdef int64_t _count(Py_buffer *view, pycoll_dtype_t dtype, str name) except -1:
    cdef size_t size = pycoll_dtype_size(dtype)
    if size == 0:
        raise ValueError(f"invalid dtype id {<int>dtype}")
    if <size_t>view.len % size:
        raise ValueError(f"{name} holds {view.len} bytes, not a whole number of {size}-byte elements")
    return view.len // size


cdef Py_buffer *_take_counted(_Views *v, object obj, bint writable, str name, pycoll_dtype_t dtype) except NULL:
    # _take the buffer that sets the call's element count (a whole number of dtype's elements) into v.count.
    cdef Py_buffer *view = _take(v, obj, writable, name)
    v.count = _count(view, dtype, name)
    return view


cdef int _check_same(Py_buffer *view, int64_t nbytes, str name) except -1:
    if view.len != nbytes:
        raise ValueError(f"length mismatch: {name} holds {view.len} bytes, expected {nbytes}")
    return 0


cdef int _check_divisor(int64_t divisor) except -1:
    if divisor < 1:
        raise ValueError(f"divisor must be >= 1, got {divisor}")
    return 0


cdef int _take_pair(_Views *v, object sum, object comp, bint writable, pycoll_dtype_t dtype, Py_buffer **vs,
                    Py_buffer **vc) except -1:
    # A (sum, comp) pair of v.count elements of dtype's accumulator type, taken into *vs and *vc.
    cdef int64_t nbytes = v.count * pycoll_dtype_size(pycoll_accumulator_dtype(dtype))
    vs[0] = _take(v, sum, writable, "sum")
    vc[0] = _take(v, comp, writable, "comp")
    _check_same(vs[0], nbytes, "sum")
    _check_same(vc[0], nbytes, "comp")
    return 0


cdef int _check_no_partial_overlap(Py_buffer *a, Py_buffer *b, str names) except -1:
    # Kernels run element-wise in vectors: the same buffer twice is fine, a shifted view of it is not.
    cdef uintptr_t pa = <uintptr_t>a.buf, pb = <uintptr_t>b.buf
    if pa != pb and pa < pb + <uintptr_t>b.len and pb < pa + <uintptr_t>a.len:
        raise ValueError(f"{names} overlap partially")
    return 0


cdef int _check_status(pycoll_status_t status, str what) except -1:
    if status == PYCOLL_OK:
        return 0
    if status == PYCOLL_ERR_UNSUPPORTED:
        raise TypeError(f"{what}: unsupported dtype/op combination")
    raise ValueError(f"{what}: invalid argument (status {<int>status})")


def reduce(out, a, b, int dtype, int op):
    """out = op(a, b) element-wise; out may be a or b."""
    cdef Py_buffer *vo, *va, *vb
    cdef _Views views
    views.held = 0
    try:
        vo = _take_counted(&views, out, True, "out", <pycoll_dtype_t>dtype)
        va, vb = _take(&views, a, False, "a"), _take(&views, b, False, "b")
        _check_same(va, vo.len, "a")
        _check_same(vb, vo.len, "b")
        _check_no_partial_overlap(vo, va, "out and a")
        _check_no_partial_overlap(vo, vb, "out and b")
        with nogil:
            views.status = pycoll_reduce(vo.buf, va.buf, vb.buf, views.count, <pycoll_dtype_t>dtype,
                                         <pycoll_op_t>op)
        if views.status != PYCOLL_OK:  # name the pair: complex has no min or max
            _check_status(views.status, f"reduce: op {pycoll_op_name(<pycoll_op_t>op).decode()} on dtype "
                                        f"{pycoll_dtype_name(<pycoll_dtype_t>dtype).decode()}")
    finally:
        _release(&views)


def scale_avg(buf, int dtype, int64_t divisor):
    """buf /= divisor element-wise (integers truncate toward zero)."""
    cdef Py_buffer *v
    cdef _Views views
    views.held = 0
    _check_divisor(divisor)
    try:
        v = _take_counted(&views, buf, True, "buf", <pycoll_dtype_t>dtype)
        with nogil:
            views.status = pycoll_scale_avg(v.buf, views.count, <pycoll_dtype_t>dtype, divisor)
        _check_status(views.status, "scale_avg")
    finally:
        _release(&views)


NORM_KINDS = {"layernorm": PYCOLL_NORM_LAYER, "rmsnorm": PYCOLL_NORM_RMS}


def norm_rows(out, x, residual, weight, bias, int64_t rows, int64_t hidden, int dtype, int kind, double eps):
    """Each of `rows` rows of `hidden` elements: out = norm(x (+ residual)) * weight (+ bias), kind a
    NORM_KINDS value; residual and bias may be None. out may be x or residual (the same memory), nothing else."""
    cdef Py_buffer *vo, *vx, *vr = NULL, *vw, *vb = NULL
    cdef const void *pr = NULL
    cdef const void *pb = NULL
    cdef _Views views
    views.held = 0
    if rows < 0 or hidden < 0:
        raise ValueError(f"rows and hidden must be >= 0, got {rows} and {hidden}")
    try:
        vo = _take_counted(&views, out, True, "out", <pycoll_dtype_t>dtype)
        if views.count != rows * hidden:
            raise ValueError(f"length mismatch: out holds {views.count} elements, expected {rows} * {hidden}")
        vx, vw = _take(&views, x, False, "x"), _take(&views, weight, False, "weight")
        _check_same(vx, vo.len, "x")
        _check_same(vw, hidden * pycoll_dtype_size(<pycoll_dtype_t>dtype), "weight")
        _check_no_partial_overlap(vo, vx, "out and x")
        _check_no_partial_overlap(vo, vw, "out and weight")
        if residual is not None:
            vr = _take(&views, residual, False, "residual")
            _check_same(vr, vo.len, "residual")
            _check_no_partial_overlap(vo, vr, "out and residual")
            pr = vr.buf
        if bias is not None:
            vb = _take(&views, bias, False, "bias")
            _check_same(vb, vw.len, "bias")
            _check_no_partial_overlap(vo, vb, "out and bias")
            pb = vb.buf
        if vo.len and (vo.buf == vw.buf or (vb != NULL and vo.buf == vb.buf)):
            raise ValueError("out must not be weight or bias")
        with nogil:
            views.status = pycoll_norm_rows(vo.buf, vx.buf, pr, vw.buf, pb, rows, hidden, <pycoll_dtype_t>dtype,
                                            <pycoll_norm_kind_t>kind, eps)
        _check_status(views.status, "norm_rows")
    finally:
        _release(&views)


def compensated_load(sum, comp, src, int dtype):
    """sum = src in the accumulator type, comp = 0."""
    cdef Py_buffer *vs, *vc, *vx
    cdef _Views views
    views.held = 0
    try:
        vx = _take_counted(&views, src, False, "src", <pycoll_dtype_t>dtype)
        _take_pair(&views, sum, comp, True, <pycoll_dtype_t>dtype, &vs, &vc)
        with nogil:
            views.status = pycoll_compensated_load(vs.buf, vc.buf, vx.buf, views.count, <pycoll_dtype_t>dtype)
        _check_status(views.status, "compensated_load")
    finally:
        _release(&views)


def compensated_combine(dst_sum, dst_comp, src_sum, src_comp, int dtype):
    """(dst_sum, dst_comp) += (src_sum, src_comp), pairs in the accumulator type of dtype."""
    cdef Py_buffer *vds, *vdc, *vss, *vsc
    cdef _Views views
    views.held = 0
    try:
        vds = _take_counted(&views, dst_sum, True, "dst_sum", pycoll_accumulator_dtype(<pycoll_dtype_t>dtype))
        vdc = _take(&views, dst_comp, True, "dst_comp")
        vss, vsc = _take(&views, src_sum, False, "src_sum"), _take(&views, src_comp, False, "src_comp")
        _check_same(vdc, vds.len, "dst_comp")
        _check_same(vss, vds.len, "src_sum")
        _check_same(vsc, vds.len, "src_comp")
        with nogil:
            views.status = pycoll_compensated_combine(vds.buf, vdc.buf, vss.buf, vsc.buf, views.count,
                                                      <pycoll_dtype_t>dtype)
        _check_status(views.status, "compensated_combine")
    finally:
        _release(&views)


def compensated_store(dst, sum, comp, int dtype, int64_t divisor):
    """dst = dtype((sum + comp) / divisor), rounded once."""
    cdef Py_buffer *vd, *vs, *vc
    cdef _Views views
    views.held = 0
    _check_divisor(divisor)
    try:
        vd = _take_counted(&views, dst, True, "dst", <pycoll_dtype_t>dtype)
        _take_pair(&views, sum, comp, False, <pycoll_dtype_t>dtype, &vs, &vc)
        with nogil:
            views.status = pycoll_compensated_store(vd.buf, vs.buf, vc.buf, views.count, <pycoll_dtype_t>dtype, divisor)
        _check_status(views.status, "compensated_store")
    finally:
        _release(&views)


def simd_name():
    """The kernel variant in use: "avx512", "avx2" or "scalar"."""
    cdef const char *name
    with nogil:
        name = pycoll_simd_name()
    return name.decode()
