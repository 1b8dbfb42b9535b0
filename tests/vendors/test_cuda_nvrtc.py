"""pycoll's CUDA kernels compiled by the real NVRTC (nvidia-cuda-nvrtc-cu12), without a GPU, through pycoll's own
compile path (pycoll_cuda_kernels_compile: the one a launch uses, with the library loaded as the NCCL backend
loads it): a CUBIN for every architecture pycoll targets, for every dtype (each dtype's program holds every op),
the target clamped to what NVRTC supports, PTX only for a device newer than NVRTC, and no fused multiply-add
anywhere (TwoSum's and Dekker's error terms need each product rounded on its own). The float dtypes' programs
carry accuracy="reproducible"'s exact-mode kernels too (test_cuda_kernel_source.py checks their arithmetic)."""

import ctypes
import re
import struct
from pathlib import Path

import pytest
from nvidia_wheels import unavailable

DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7}
FLOATS = ("float16", "bfloat16", "float32", "float64")
ARCHS = (70, 80, 86, 89, 90, 100)


# Every compile runs in one fresh process: a library pycoll loads stays loaded for the process, and other tests
# load stand-ins in its place.
COMPILE = r"""
import base64, json, sys
from pycoll._bindings import vendor
from pycoll.plugins.nccl import nvrtc_candidates

reasons = [why for path in nvrtc_candidates() if (why := vendor.cuda_kernels_load(0, path))]
if len(reasons) == len(nvrtc_candidates()):
    print("NO NVRTC " + "; ".join(reasons))
    sys.exit(0)
out = {}
for request in json.loads(sys.argv[1]):
    dtype, sm, ptx = request
    try:
        target, image = vendor.cuda_kernels_compile(dtype, sm, ptx)
        out[repr(request)] = [target, base64.b64encode(image).decode()]
    except Exception as exc:
        out[repr(request)] = [type(exc).__name__, str(exc)]
print("RESULT " + json.dumps(out))
"""


def _requests(supported):
    newest, oldest = supported[-1], supported[0]
    missing = [sm for sm in range(oldest, newest) if sm not in supported
               and any(a // 10 == sm // 10 and a < sm for a in supported)]
    requests = [(d, sm, False) for sm in ARCHS for d in DTYPES.values()]
    requests += [(DTYPES[d], 90, True) for d in FLOATS]
    requests += [(DTYPES["float32"], (newest // 10 + 1) * 10, False), (DTYPES["float32"], oldest - 1, False),
                 (99, 80, False)]
    requests += [(DTYPES["float32"], sm, False) for sm in missing[:1]]
    return requests


@pytest.fixture(scope="module")
def compiled():
    """{(dtype id, sm, ptx): (target, image) or (exception type, message)} through pycoll's compile path."""
    import base64
    import json
    import subprocess
    import sys

    try:
        supported = _supported_archs()
    except OSError as exc:
        unavailable(f"NVRTC not found (pip install nvidia-cuda-nvrtc-cu12): {exc}")
    requests = _requests(supported)
    done = subprocess.run([sys.executable, "-P", "-c", COMPILE, json.dumps(requests)], capture_output=True,
                          text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if done.stdout.startswith("NO NVRTC"):
        unavailable(f"NVRTC not found (pip install nvidia-cuda-nvrtc-cu12): {done.stdout}")
    raw = json.loads(done.stdout.split("RESULT ", 1)[1])
    out = {}
    for request in requests:
        kind, payload = raw[repr(list(request))]
        out[request] = (kind, base64.b64decode(payload)) if kind.startswith(("sm_", "compute_")) else (kind, payload)
    out["supported"] = supported
    return out


def cubin_arch(image: bytes) -> int:
    """The sm_XY a CUBIN is for, from its ELF header (EM_CUDA; e_flags holds the SM: bits 0-7 in ELF ABI
    version 7, bits 8-15 in version 8, which CUDA 12.8+ writes for sm_100 on)."""
    assert image[:4] == b"\x7fELF" and image[4] == 2, "not a 64-bit ELF"
    (machine,) = struct.unpack_from("<H", image, 18)
    assert machine == 190, f"ELF machine {machine} is not EM_CUDA"
    (flags,) = struct.unpack_from("<I", image, 48)
    return (flags >> 8) & 0xFF if image[8] >= 8 else flags & 0xFF


@pytest.mark.parametrize("sm", ARCHS)
def test_every_dtype_compiles_to_a_cubin(compiled, sm):
    for dtype, ident in DTYPES.items():
        target, image = compiled[(ident, sm, False)]
        assert target == f"sm_{sm}", dtype
        assert cubin_arch(image) == sm, dtype
        names = {b"pycoll_reduce", b"pycoll_scale_avg"}
        if dtype in FLOATS:
            names |= {b"pycoll_compensated_load", b"pycoll_compensated_combine", b"pycoll_compensated_store"}
            names |= {b"pycoll_repro_summary", b"pycoll_repro_encode", b"pycoll_repro_decode"}
        for name in names:
            assert name + b"\0" in image, (dtype, name)


def _ptx_functions(ptx: str) -> dict:
    """{entry or function name: its body} of a PTX module."""
    parts = re.split(r"^(?:\.visible\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)", ptx, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_no_fused_multiply_add(compiled, dtype):
    """--fmad=false holds: the PTX pycoll's path produces has no fma in any kernel, so TwoSum's
    (a - (s - bb)) + (b - bb) and Dekker's products keep their error terms."""
    target, image = compiled[(DTYPES[dtype], 90, True)]
    assert target == "compute_90"
    ptx = image.decode()
    functions = _ptx_functions(ptx)
    assert "pycoll_compensated_combine" in functions and "pycoll_compensated_store" in functions
    assert "pycoll_repro_decode" in functions  # its scaling products must stay apart from the sums around them
    for name, body in functions.items():
        assert not re.search(r"\bfma\.", body), f"{dtype}: {name} has a fused multiply-add"
    # The store divides the (sum, comp) pair (divide_pair, two_product): products and sums to fuse are there.
    assert re.search(r"\bmul\.rn\.f64", functions["pycoll_compensated_store"])


def test_reproducible_kernels_take_the_parameters_their_launches_pass(compiled):
    """The CUDA table launches (cuda_kernels.c's k_repro_*) pass summary (x, int64 n, summary), encode (x, int64 n,
    int32 base, bits, limbs, out) and decode (sums, int64 n, int32 base, bits, limbs, out): the kernels' PTX
    parameter lists, by width, are those (the fake driver's log checks the order the table fills them in:
    tests/reproducible/test_cuda_reproducible.py)."""
    widths = {"pycoll_repro_summary": ["u64", "u64", "u64"],
              "pycoll_repro_encode": ["u64", "u64", "u32", "u32", "u32", "u64"],
              "pycoll_repro_decode": ["u64", "u64", "u32", "u32", "u32", "u64"]}
    for dtype in FLOATS:
        ptx = compiled[(DTYPES[dtype], 90, True)][1].decode()
        for name, want in widths.items():
            params = re.search(rf"\.entry\s+{name}\s*\(([^)]*)\)", ptx)
            assert params, (dtype, name)
            assert re.findall(r"\.param\s+\.([a-z]\d+)", params.group(1)) == want, (dtype, name, params.group(1))


def test_the_fma_check_sees_contraction(compiled):
    """The same source compiled by the same NVRTC with --fmad=true does contract (so the check above would see
    it): a control, through NVRTC directly since pycoll's path never asks for it."""
    from pycoll._bindings import vendor
    from pycoll.plugins.nccl import nvrtc_candidates

    path = Path(nvrtc_candidates()[0])
    # As pycoll's loader does: NVRTC dlopens its builtins by name, which fails where dlopen is interposed (the
    # ASan run), so the builtins beside this NVRTC are loaded first.
    for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(path))
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


def test_the_target_is_clamped_to_what_nvrtc_supports(compiled):
    archs = compiled["supported"]
    newest, oldest = archs[-1], archs[0]
    # A device newer than every architecture NVRTC knows: PTX for the newest, which its newer driver JITs.
    target, image = compiled[(DTYPES["float32"], (newest // 10 + 1) * 10, False)]
    assert target == f"compute_{newest}"
    assert image.lstrip().startswith(b"//") and b".target sm_" in image
    # A minor revision NVRTC does not list: the CUBIN of the newest of its major below it.
    missing = [r for r in compiled if isinstance(r, tuple) and r[1] not in archs and r[1] < newest and r[1] >= oldest]
    for request in missing:
        sm = request[1]
        below = max(a for a in archs if a // 10 == sm // 10 and a < sm)
        target, image = compiled[request]
        assert target == f"sm_{below}" and cubin_arch(image) == below
    # Older than every architecture NVRTC has: refused, naming both.
    kind, message = compiled[(DTYPES["float32"], oldest - 1, False)]
    assert kind == "BackendUnavailable"
    assert f"sm_{oldest} and newer, not for this device's sm_{oldest - 1}" in message


def test_a_bad_dtype_is_refused(compiled):
    kind, message = compiled[(99, 80, False)]
    assert kind == "ValueError" and "dtype" in message
