"""The guarded test memory table (guarded_memory.c), which stands in for a device memory table where there is no
device, built with the system C compiler into a shared library of its own (libpycoll does not carry it): its
address for pycoll.tools.simulate(memory_table=), its path in PYCOLL_TEST_MEMORY_TABLE (a rank process then installs
it as the vendor transport's table for device memory: install_named), the calls a process made to each of its
entries, and a simulated collective checked through it against the host table."""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from fakes.vendor_harness import FAKES, compile_shared

# Read by the test suite only (make_engine), never by pycoll: the path of the table a rank's vendors use.
VARIABLE = "PYCOLL_TEST_MEMORY_TABLE"
ENTRIES = ("copy", "alloc", "free", "live", "corrupt", "compensated_load", "compensated_combine",
           "compensated_store", "reduce_into", "reduce", "scale_avg", "repro_summary", "repro_encode",
           "repro_decode", "copy_to_host")


@functools.cache
def library_path() -> str:
    """The library, built once per process, against the installed libpycoll's kernels and the source tree's
    internal headers (skips the test where there is no C compiler)."""
    from pycoll import paths

    out_dir = Path(tempfile.mkdtemp(prefix="pycoll-guarded-memory-"))
    atexit.register(shutil.rmtree, out_dir, True)
    native = FAKES.parent.parent / "native"
    lib_dir = Path(paths.get_library()).parent
    out = compile_shared(out_dir / "libguarded_memory.so", [FAKES / "guarded_memory.c", FAKES / "streamed_memory.c"],
                         [f"-I{native}", f"-I{native / 'include'}"],
                         [f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}", "-lpycoll"])
    if out is None:
        pytest.skip("no C compiler to build the guarded test memory table")
    return out


def _load(path: str | None) -> ctypes.CDLL:
    # The same path as the vendor transport's dlopen gives the same loaded library, so the same counters.
    lib = ctypes.CDLL(path or library_path())
    lib.pycoll_test_memory_table.restype = ctypes.c_void_p
    lib.pycoll_guarded_memory_count.restype = ctypes.c_int64
    return lib


def table_address() -> int:
    """The table's address, for pycoll.tools.simulate(memory_table=)."""
    return _load(None).pycoll_test_memory_table()


def install_named() -> None:
    """Where VARIABLE names a library, its table serves every vendor's device memory in this process (the fake
    libraries' "device" memory is host memory): through the bindings' test-only setter."""
    path = os.environ.get(VARIABLE)
    if path:
        from pycoll._bindings import vendor
        vendor._set_test_device_kernels(_load(path).pycoll_test_memory_table())


def install_streamed(stream: int, runtime_path: str, delay_us: int) -> None:
    """The table made stream-ordered (streamed_memory.c) serves every vendor's device memory in this process: each
    data entry queued on `stream` of the fake runtime at runtime_path (its fake_stream_submit), after delay_us."""
    from pycoll._bindings import vendor
    runtime = ctypes.CDLL(runtime_path)
    lib = _load(None)
    lib.pycoll_streamed_memory_table.restype = ctypes.c_void_p
    lib.pycoll_streamed_memory_table.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    submit = ctypes.cast(runtime.fake_stream_submit, ctypes.c_void_p).value
    vendor._set_test_device_kernels(lib.pycoll_streamed_memory_table(stream, submit, delay_us))


def streamed_failures() -> int:
    """Entries of the streamed table that failed on the stream (their callers were told they were queued)."""
    lib = _load(None)
    lib.pycoll_streamed_memory_failures.restype = ctypes.c_int64
    return lib.pycoll_streamed_memory_failures()


def old_table_address() -> int:
    """The same table stamped version 1, from before reproducible's entries (which it keeps, unread)."""
    lib = _load(None)
    lib.pycoll_guarded_memory_table_v1.restype = ctypes.c_void_p
    return lib.pycoll_guarded_memory_table_v1()


def counts(path: str | None = None) -> dict:
    """This process's calls so far to each entry of the table in the library at path (None: the one built
    here): "live" is the blocks not yet freed, "corrupt" the guard violations."""
    lib = _load(path)
    return {entry: lib.pycoll_guarded_memory_count(entry.encode()) for entry in ENTRIES}


def run_guarded(coll, inputs, **kwargs):
    """simulate(coll, inputs, **kwargs) through the guarded table and through the host one: the same bytes on every
    rank, the host run never in the guarded table, no block corrupted or kept. Returns the calls to each entry."""
    import numpy as np

    from pycoll.tools.simulate import simulate

    before = counts()
    guarded = simulate(coll, inputs, memory_table=table_address(), **kwargs)
    after = counts()
    host = simulate(coll, inputs, **kwargs)
    assert counts() == after, "the host table went through the guarded one"
    for rank, (g, h) in enumerate(zip(guarded, host)):
        if h is None:
            assert g is None
            continue
        assert np.asarray(g).tobytes() == np.asarray(h).tobytes(), (coll, kwargs, rank)
    calls = {entry: after[entry] - before[entry] for entry in ENTRIES}
    assert calls["corrupt"] == 0, calls
    assert calls["live"] == 0 and calls["alloc"] == calls["free"], calls  # every block back, when each comm closes
    return calls
