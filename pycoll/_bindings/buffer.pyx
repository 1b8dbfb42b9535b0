# cython: language_level=3
"""The address of an object's memory, read without NumPy in between: through the buffer protocol (the fast path
of pycoll.buffers, where a NumPy attribute round trip -- __array_interface__ builds a dict -- would cost more than
a small collective) and from DLPack capsules (which NumPy cannot import for every dtype pycoll supports:
bfloat16 is refused by np.from_dlpack)."""

from cpython.buffer cimport PyBUF_STRIDES, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_GetBuffer
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_SetName
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t


def host_view(obj):
    """(address, readonly, c_contiguous) of obj's memory; BufferError/TypeError if it exports none."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_STRIDES)
    try:
        return <uintptr_t>view.buf, bool(view.readonly), bool(PyBuffer_IsContiguous(&view, b'C'))
    finally:
        # The caller keeps obj alive; the exporter's memory stays where it is while obj lives.
        PyBuffer_Release(&view)


# The DLPack ABI (dlpack.h v1.x), declared here so that building pycoll needs no dlpack header. The legacy
# DLManagedTensor and the versioned one (DLPack >= 1.0) hold the same DLTensor, at different places.
cdef extern from *:
    """
    typedef struct { int32_t device_type; int32_t device_id; } pycoll_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } pycoll_DLDataType;
    typedef struct {
        void *data;
        pycoll_DLDevice device;
        int32_t ndim;
        pycoll_DLDataType dtype;
        int64_t *shape;
        int64_t *strides;
        uint64_t byte_offset;
    } pycoll_DLTensor;
    typedef struct pycoll_DLManagedTensor {
        pycoll_DLTensor dl_tensor;
        void *manager_ctx;
        void (*deleter)(struct pycoll_DLManagedTensor *self);
    } pycoll_DLManagedTensor;
    typedef struct { uint32_t major; uint32_t minor; } pycoll_DLPackVersion;
    typedef struct pycoll_DLManagedTensorVersioned {
        pycoll_DLPackVersion version;
        void *manager_ctx;
        void (*deleter)(struct pycoll_DLManagedTensorVersioned *self);
        uint64_t flags;
        pycoll_DLTensor dl_tensor;
    } pycoll_DLManagedTensorVersioned;
    """
    ctypedef struct DLDevice "pycoll_DLDevice":
        int32_t device_type
        int32_t device_id

    ctypedef struct DLDataType "pycoll_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor "pycoll_DLTensor":
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor "pycoll_DLManagedTensor":
        DLTensor dl_tensor
        void (*deleter)(DLManagedTensor *)

    ctypedef struct DLPackVersion "pycoll_DLPackVersion":
        uint32_t major
        uint32_t minor

    ctypedef struct DLManagedTensorVersioned "pycoll_DLManagedTensorVersioned":
        DLPackVersion version
        void (*deleter)(DLManagedTensorVersioned *)
        uint64_t flags
        DLTensor dl_tensor

cdef uint64_t _FLAG_READ_ONLY = 1 << 0
cdef uint64_t _FLAG_IS_COPIED = 1 << 1  # the exporter copied: writes would not reach the caller's array

# DLDataTypeCode -> the prefix of NumPy-style dtype names ("float" + 16 = "float16").
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}


cdef str _dtype_name(DLDataType dt):
    if dt.lanes != 1:
        return f"{_CODE_NAMES.get(dt.code, f'code{dt.code}_')}{dt.bits}x{dt.lanes}"
    if dt.code == 6:
        return "bool"
    return f"{_CODE_NAMES.get(dt.code, f'code{dt.code}_')}{dt.bits}"


cdef class DLPackTensor:
    """One DLPack tensor taken over from its capsule (the exporter's memory lives as long as this object):
    following the DLPack rules the capsule is renamed "used_..." so that its own destructor leaves the tensor
    alone, and this object calls the tensor's deleter when it goes."""

    cdef DLManagedTensor *_legacy
    cdef DLManagedTensorVersioned *_versioned
    cdef DLTensor *_tensor
    cdef readonly uintptr_t address      # data + byte_offset
    cdef readonly int64_t count          # elements
    cdef readonly int itemsize
    cdef readonly str dtype              # NumPy-style name: "bfloat16", "complex64", "bool", ...
    cdef readonly int device_type        # DLDeviceType
    cdef readonly int device_id
    cdef readonly bint read_only         # marked read-only or copied (versioned), or a legacy capsule
    cdef readonly bint contiguous        # C order (size-1 dimensions ignored)

    def __dealloc__(self):
        if self._versioned != NULL and self._versioned.deleter != NULL:
            self._versioned.deleter(self._versioned)
        elif self._legacy != NULL and self._legacy.deleter != NULL:
            self._legacy.deleter(self._legacy)

    @property
    def shape(self):
        return tuple(self._tensor.shape[i] for i in range(self._tensor.ndim))

    @property
    def byte_strides(self):
        """Strides in bytes, as NumPy gives them (DLPack counts elements); None when the exporter gave none."""
        if self._tensor.strides == NULL:
            return None
        return tuple(self._tensor.strides[i] * self.itemsize for i in range(self._tensor.ndim))


def take_dlpack(capsule):
    """The DLPackTensor of a "dltensor_versioned" or legacy "dltensor" capsule (from obj.__dlpack__()).
    A legacy capsule counts as read-only: it cannot say whether writing is allowed (JAX exports immutable
    arrays that way), which is also what np.from_dlpack assumes."""
    cdef DLPackTensor t = DLPackTensor.__new__(DLPackTensor)
    cdef DLManagedTensorVersioned *versioned
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        versioned = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if versioned.version.major != 1:
            # Not renamed: the capsule's destructor still frees it.
            raise BufferError(f"DLPack version {versioned.version.major}.{versioned.version.minor} is not "
                              f"supported (1.x is)")
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        t._versioned = versioned
        t._tensor = &versioned.dl_tensor
        t.read_only = (versioned.flags & (_FLAG_READ_ONLY | _FLAG_IS_COPIED)) != 0
    elif PyCapsule_IsValid(capsule, b"dltensor"):
        t._legacy = <DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor")
        PyCapsule_SetName(capsule, b"used_dltensor")
        t._tensor = &t._legacy.dl_tensor
        t.read_only = True
    else:
        raise BufferError(f"__dlpack__() returned {type(capsule).__name__}, not an unused DLPack capsule")
    _describe(t, t._tensor)
    return t


cdef void _describe(DLPackTensor t, DLTensor *dl) except *:
    cdef int64_t count = 1, expected = 1
    cdef int i
    t.address = <uintptr_t>dl.data + <uintptr_t>dl.byte_offset
    t.device_type = dl.device.device_type
    t.device_id = dl.device.device_id
    t.dtype = _dtype_name(dl.dtype)
    t.itemsize = (dl.dtype.bits * dl.dtype.lanes + 7) // 8
    for i in range(dl.ndim):
        count *= dl.shape[i]
    t.count = count
    t.contiguous = True
    if dl.strides != NULL and count > 0:  # NULL strides mean C order; an empty tensor has no layout to check
        for i in range(dl.ndim - 1, -1, -1):
            if dl.shape[i] != 1 and dl.strides[i] != expected:
                t.contiguous = False
                break
            expected *= dl.shape[i]
