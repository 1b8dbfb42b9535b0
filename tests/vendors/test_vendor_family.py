"""The vendor family's C ABI (native/include/pycoll/vendor.h): built-in vendors found by name, and a vendor
struct of another layout version refused with a message naming both versions."""

import ctypes
import subprocess
import sys

import pytest

vendor = pytest.importorskip("pycoll._bindings.vendor")


def _libpycoll():
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if line.rstrip().endswith("libpycoll.so")}
    if not paths:
        pytest.skip("libpycoll.so is not mapped by path (needs /proc/self/maps)")
    lib = ctypes.CDLL(paths.pop())
    lib.pycoll_vendor_find.restype = ctypes.c_void_p
    lib.pycoll_vendor_find.argtypes = [ctypes.c_char_p]
    lib.pycoll_vendor_load.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.c_size_t]
    return lib


class _Head(ctypes.Structure):
    """The fields every version of pycoll_vendor_t starts with, then room for the rest."""
    _fields_ = [("version", ctypes.c_uint32), ("name", ctypes.c_char_p), ("unique_id_bytes", ctypes.c_int64),
                ("rest", ctypes.c_char * 1024)]


def test_builtin_vendors_are_found_by_name():
    lib = _libpycoll()
    assert lib.pycoll_vendor_find(b"nccl") and lib.pycoll_vendor_find(b"hccl")
    assert lib.pycoll_vendor_find(b"gloo") is None
    assert vendor.Vendor("nccl").unique_id_bytes == 128
    assert vendor.Vendor("hccl").unique_id_bytes == 4108
    with pytest.raises(ValueError, match="no vendor named 'gloo'"):
        vendor.Vendor("gloo")


def test_a_vendor_struct_of_another_version_is_refused():
    lib = _libpycoll()
    head = _Head(version=vendor.VENDOR_VERSION + 1, name=b"future", unique_id_bytes=128)
    error = ctypes.create_string_buffer(512)
    status = lib.pycoll_vendor_load(ctypes.addressof(head), 0, b"libfuture.so", error, 512)
    assert status == vendor.ERR_UNSUPPORTED
    assert error.value.decode() == (f"future: vendor struct version {vendor.VENDOR_VERSION + 1}, but this "
                                    f"libpycoll reads versions 1 to {vendor.VENDOR_VERSION} only")
    head = _Head(version=0, name=b"ancient", unique_id_bytes=128)
    status = lib.pycoll_vendor_load(ctypes.addressof(head), 0, b"libancient.so", error, 512)
    assert status == vendor.ERR_UNSUPPORTED and "ancient: vendor struct version 0" in error.value.decode()


def test_unloaded_vendor_says_what_to_load(tmp_path):
    """In a fresh process, where nothing has loaded HCCL (run outside the source folder, whose pycoll/ has no
    compiled modules and would shadow the installed package)."""
    code = ("from pycoll._bindings import vendor\n"
            "try:\n    vendor.Vendor('hccl').unique_id()\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert out.strip() == "PycollError hccl: HCCL or AscendCL is not loaded (pycoll_vendor_load)"
