"""The vendor backends as plugins: registered by name, honest about what they take, and unavailable with a
reason (never an exception) where their library is missing."""

import os
import subprocess
import sys

import pytest

from pycoll import plugins


def _probe_in_clean_process(tmp_path, module, cls):
    env = dict(os.environ)
    for var in ("PYCOLL_NCCL_LIBRARY", "PYCOLL_CUDART_LIBRARY", "PYCOLL_HCCL_LIBRARY", "PYCOLL_ACL_LIBRARY"):
        env[var] = str(tmp_path / "absent" / "lib.so")
    code = f"from pycoll.{module} import {cls}; print(repr({cls}().probe()))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env=env).stdout


# HCCL offers only its own choice of algorithm: it reads HCCL_ALGO once per process (test_vendor_strict.py).
@pytest.mark.parametrize("module, cls, name, memory, accuracies, algorithms", [
    ("plugins.nccl", "NcclBackend", "nccl", "cuda", ("fast", "compensated", "reproducible"),
     {"auto", "ring", "halving_doubling", "recursive_doubling", "mesh"}),
    ("plugins.hccl", "HcclBackend", "hccl", "npu", ("fast",), {"auto"}),
])
def test_vendor_backends_register_and_declare(module, cls, name, memory, accuracies, algorithms):
    mod = __import__(f"pycoll.{module}", fromlist=[cls])
    backend = getattr(mod, cls)()
    assert backend.name == name and backend.memory == memory
    assert backend.api_version == plugins.PLUGIN_API_VERSION
    assert set(backend.algorithms) == algorithms
    assert backend.accuracies == accuracies
    with plugins._lock:
        assert type(plugins._registry[name]) is type(backend)


@pytest.mark.parametrize("module, cls, words", [
    ("plugins.nccl", "NcclBackend", "pip install nvidia-nccl-cu12"),
    ("plugins.hccl", "HcclBackend", "install the CANN toolkit"),
])
def test_missing_library_is_a_reason_not_an_error(tmp_path, module, cls, words):
    out = _probe_in_clean_process(tmp_path, module, cls)
    assert words in out and "absent" in out


def test_get_unusable_vendor_backend_raises_backend_unavailable(tmp_path):
    pytest.importorskip("pycoll.plugins.tcp", reason="plugins._builtin() imports the TCP backend (branch infra)")
    code = ("import pycoll.plugins as p\n"
            "try:\n    p.get('nccl')\nexcept p.BackendUnavailable as e:\n    print('unavailable:', e)\n"
            "print([s.name for s in p.statuses()])")
    env = dict(os.environ, PYCOLL_NCCL_LIBRARY=str(tmp_path / "absent.so"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env=env).stdout
    assert "unavailable: nccl: libnccl.so.2 not found" in out
    assert "'hccl'" in out and "'nccl'" in out


def test_an_engine_without_point_to_point_refuses_it_at_the_call():
    """A per-collective engine lacking send/recv, gather, scatter or all_to_all refuses each where it is called,
    async or not (not through a Work that fails later)."""
    from pycoll.plugins import Call, Engine

    class OnlyAllReduce(Engine):
        name = "only-all-reduce"

    engine = OnlyAllReduce()
    for call, text in ((Call("send/recv", dest=1), "send: backend only-all-reduce has no point-to-point"),
                       (Call("send/recv", source=1), "recv: backend only-all-reduce has no point-to-point"),
                       (Call("gather", root=0), "gather: backend only-all-reduce has none"),
                       (Call("scatter", root=0), "scatter: backend only-all-reduce has none"),
                       (Call("all_to_all"), "all_to_all: backend only-all-reduce has none")):
        for async_op in (False, True):
            with pytest.raises(NotImplementedError, match=text):
                engine.run(call, async_op)
