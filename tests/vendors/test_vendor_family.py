"""The vendor family's C ABI (native/include/pycoll/vendor.h): built-in vendors found by name, their table
internal to libpycoll, and no branch on the vendor's identity in the generic layer."""

import ctypes
import re
import subprocess
import sys

import pytest
from repo_paths import ROOT

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


def test_builtin_vendors_are_found_by_name():
    lib = _libpycoll()
    assert lib.pycoll_vendor_find(b"nccl") and lib.pycoll_vendor_find(b"hccl")
    assert lib.pycoll_vendor_find(b"gloo") is None
    assert vendor.Vendor("nccl").unique_id_bytes == 128
    assert vendor.Vendor("hccl").unique_id_bytes == 4108
    with pytest.raises(ValueError, match="no vendor named 'gloo'"):
        vendor.Vendor("gloo")


def test_the_vendor_table_is_internal_and_the_generic_layer_never_asks_which_vendor():
    """The vendor table is compiled into libpycoll, never loaded from outside: no installed header defines it
    (the public one has an opaque handle) and it carries no layout version. What differs per vendor is an entry
    of the table, so backends/common/ names no vendor (but in pycoll_vendor_find's list) and compares no
    vendor's name; nor does it read a test hook (PYCOLL_TEST_*) on the production path."""
    public = (ROOT / "native" / "include" / "pycoll" / "vendor.h").read_text()
    assert "typedef struct pycoll_vendor pycoll_vendor_t;" in public
    assert "struct pycoll_vendor {" not in public and "VENDOR_VERSION" not in public
    ops = (ROOT / "backends" / "common" / "vendor_ops.h").read_text()
    assert "struct pycoll_vendor {" in ops and "uint32_t version;" not in ops
    for source in sorted((ROOT / "backends" / "common").glob("*.c")):
        text = source.read_text()
        find = re.search(r"\npycoll_vendor_t \*pycoll_vendor_find\(.*?\n}\n", text, re.S)
        if find:
            text = text.replace(find.group(0), "")
        for name in ("pycoll_nccl_vendor", "pycoll_hccl_vendor", '"nccl"', '"hccl"', "SETTING_TEST_"):
            assert name not in text, f"{source.name} asks which vendor it has ({name})"
        assert not re.search(r"strcmp\([^;]*->name", text), f"{source.name} compares a vendor's name"


def test_unloaded_vendor_says_what_to_load(tmp_path):
    """In a fresh process, where nothing has loaded HCCL (run outside the source folder, whose pycoll/ has no
    compiled modules and would shadow the installed package)."""
    code = ("from pycoll._bindings import vendor\n"
            "try:\n    vendor.Vendor('hccl').unique_id()\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert out.strip() == "PycollError hccl: HCCL or AscendCL is not loaded (pycoll_vendor_load)"
