"""pycoll's CUDA kernels compiled by the real NVRTC (nvidia-cuda-nvrtc-cu12), without a GPU, through pycoll's own
compile path (pycoll_cuda_kernels_compile: the one a launch uses, with the library loaded as the NCCL backend
loads it): a CUBIN for every architecture pycoll targets, for every dtype (each dtype's program holds every op),
the target clamped to what NVRTC supports, PTX only for a device newer than NVRTC, and no fused multiply-add
anywhere (TwoSum's and Dekker's error terms need each product rounded on its own)."""

import ctypes
import re
import struct

import pytest

from nvidia_wheels import unavailable
from pycoll.errors import BackendUnavailable

DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7}
FLOATS = ("float16", "bfloat16", "float32", "float64")
ARCHS = (70, 80, 86, 89, 90, 100)


@pytest.fixture(scope="module")
def vendor():
    from pycoll._bindings import vendor
    from pycoll.plugins.nccl import nvrtc_candidates

    reasons = [why for path in nvrtc_candidates() if (why := vendor.cuda_kernels_load(0, path))]
    if len(reasons) == len(nvrtc_candidates()):
        unavailable(f"NVRTC not found (pip install nvidia-cuda-nvrtc-cu12): {'; '.join(reasons)}")
    return vendor


def cubin_arch(image: bytes) -> int:
    """The sm_XY a CUBIN is for, from its ELF header (EM_CUDA; e_flags holds the SM: bits 0-7 in ELF ABI
    version 7, bits 8-15 in version 8, which CUDA 12.8+ writes for sm_100 on)."""
    assert image[:4] == b"\x7fELF" and image[4] == 2, "not a 64-bit ELF"
    (machine,) = struct.unpack_from("<H", image, 18)
    assert machine == 190, f"ELF machine {machine} is not EM_CUDA"
    (flags,) = struct.unpack_from("<I", image, 48)
    return (flags >> 8) & 0xFF if image[8] >= 8 else flags & 0xFF


@pytest.mark.parametrize("sm", ARCHS)
def test_every_dtype_compiles_to_a_cubin(vendor, sm):
    for dtype, ident in DTYPES.items():
        target, image = vendor.cuda_kernels_compile(ident, sm)
        assert target == f"sm_{sm}", dtype
        assert cubin_arch(image) == sm, dtype
        names = {b"pycoll_reduce", b"pycoll_scale_avg"}
        if dtype in FLOATS:
            names |= {b"pycoll_compensated_load", b"pycoll_compensated_combine", b"pycoll_compensated_store"}
        for name in names:
            assert name + b"\0" in image, (dtype, name)


def _ptx_functions(ptx: str) -> dict:
    """{entry or function name: its body} of a PTX module."""
    parts = re.split(r"^(?:\.visible\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)", ptx, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_no_fused_multiply_add(vendor, dtype):
    """--fmad=false holds: the PTX pycoll's path produces has no fma in any kernel, so TwoSum's
    (a - (s - bb)) + (b - bb) and Dekker's products keep their error terms."""
    target, image = vendor.cuda_kernels_compile(DTYPES[dtype], 90, ptx=True)
    assert target == "compute_90"
    ptx = image.decode()
    functions = _ptx_functions(ptx)
    assert "pycoll_compensated_combine" in functions and "pycoll_compensated_store" in functions
    for name, body in functions.items():
        assert not re.search(r"\bfma\.", body), f"{dtype}: {name} has a fused multiply-add"
    # The store divides the (sum, comp) pair (divide_pair, two_product): products and sums to fuse are there.
    assert re.search(r"\bmul\.rn\.f64", functions["pycoll_compensated_store"])


def test_the_fma_check_sees_contraction(vendor):
    """The same source compiled by the same NVRTC with --fmad=true does contract (so the check above would see
    it): a control, through NVRTC directly since pycoll's path never asks for it."""
    from pycoll.plugins.nccl import nvrtc_candidates

    lib = ctypes.CDLL(nvrtc_candidates()[0])
    prog = ctypes.c_void_p()
    source = vendor.cuda_kernel_source(DTYPES["float32"]).encode()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"k.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * 3)(b"--gpu-architecture=compute_90", b"--fmad=true", b"--std=c++14")
    assert lib.nvrtcCompileProgram(prog, 3, opts) == 0
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    assert re.search(r"\bfma\.rn\.f64", _ptx_functions(buf.value.decode())["pycoll_compensated_store"])


def _supported_archs():
    from pycoll.plugins.nccl import nvrtc_candidates

    lib = ctypes.CDLL(nvrtc_candidates()[0])
    n = ctypes.c_int()
    assert lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0
    archs = (ctypes.c_int * n.value)()
    assert lib.nvrtcGetSupportedArchs(archs) == 0
    return sorted(archs)


def test_the_target_is_clamped_to_what_nvrtc_supports(vendor):
    archs = _supported_archs()
    newest, oldest = archs[-1], archs[0]
    # A device newer than every architecture NVRTC knows: PTX for the newest, which its newer driver JITs.
    target, image = vendor.cuda_kernels_compile(DTYPES["float32"], (newest // 10 + 1) * 10)
    assert target == f"compute_{newest}"
    assert image.lstrip().startswith(b"//") and b".target sm_" in image
    # A minor revision NVRTC does not list: the CUBIN of the newest of its major below it.
    missing = [sm for sm in range(oldest, newest) if sm not in archs and any(a // 10 == sm // 10 and a < sm
                                                                              for a in archs)]
    if missing:
        sm = missing[0]
        below = max(a for a in archs if a // 10 == sm // 10 and a < sm)
        target, image = vendor.cuda_kernels_compile(DTYPES["float32"], sm)
        assert target == f"sm_{below}" and cubin_arch(image) == below
    # Older than every architecture NVRTC has: refused, naming both.
    with pytest.raises(BackendUnavailable, match=rf"sm_{oldest} and newer, not for this device's sm_{oldest - 1}"):
        vendor.cuda_kernels_compile(DTYPES["float32"], oldest - 1)


def test_a_bad_dtype_is_refused(vendor):
    with pytest.raises(ValueError, match="dtype"):
        vendor.cuda_kernels_compile(99, 80)
