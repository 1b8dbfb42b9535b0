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


def test_an_engine_has_one_shape_run_required_the_rest_optional():
    """Plugin API 2: Engine is an abstract class; one without run() cannot be made, one with only run() has
    every optional member's documented default, and what it lacks is refused naming the backend."""
    from pycoll.plugins import Call, Engine

    class NoRun(Engine):
        def all_reduce(self, send, recv, op, algorithm, accuracy):
            return "ring"

    with pytest.raises(TypeError, match="run"):
        NoRun()

    class OnlyRun(Engine):
        name = "only-run"

        def run(self, call, async_op=False):
            return call.collective

    engine = OnlyRun()
    assert engine.run(Call("barrier")) == "barrier"
    assert (engine.transport, engine.hosts, engine.close_linger, engine.native) == (None, None, None, None)
    assert engine.uneven_all_to_all is False and tuple(engine.failed_ranks) == ()
    assert engine.fast_path({}) is None
    assert engine.request_abort(1, "gone") is None and engine.abort() is None and engine.close() is None
    for what, call in (("split", lambda: engine.split(0, 0)), ("revoke", engine.revoke),
                       ("agree", lambda: engine.agree(1, 1.0)), ("shrink", lambda: engine.shrink([1], 1.0))):
        with pytest.raises(NotImplementedError, match=f"{what}: backend only-run"):
            call()


def test_every_engine_is_an_engine_and_the_host_backends_are_siblings():
    from pycoll.islands.engine import IslandsEngine
    from pycoll.plugins import Engine
    from pycoll.plugins.cpu import CpuBackend
    from pycoll.plugins.host import HostBackend, NativeEngine
    from pycoll.plugins.shm import ShmBackend
    from pycoll.plugins.tcp import TcpBackend
    from pycoll.plugins.vendor import VendorEngine

    for engine in (NativeEngine, VendorEngine, IslandsEngine):
        assert issubclass(engine, Engine) and "run" in vars(engine), engine
    for backend in (TcpBackend, ShmBackend, CpuBackend):
        assert backend.__bases__ == (HostBackend,), backend


def test_a_plugin_declaring_plugin_api_1_is_refused_naming_both_versions():
    class Old(plugins.Backend):
        name = "old-plugin"
        api_version = 1

    assert plugins.PLUGIN_API_VERSION == 2
    with pytest.raises(plugins.BackendUnavailable,
                       match="backend 'old-plugin' declares plugin API version 1; this pycoll requires version 2"):
        plugins.register(Old())
    with plugins._lock:
        assert "old-plugin" not in plugins._registry
