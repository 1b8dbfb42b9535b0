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


ENTRY_POINT_PLUGIN = '''
from pycoll import plugins


class Loopback(plugins.Backend):
    name = "loopback-plugin"


class Hijack(plugins.Backend):
    name = "tcp"
'''

ENTRY_POINT_JOB = '''
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
import pycoll.plugins as p
from pycoll.plugins.tcp import TcpBackend
print("scanned at import:", "importlib.metadata" in sys.modules)
print("tcp is built in:", type(p.get("tcp")) is TcpBackend, "scanned:", "importlib.metadata" in sys.modules)
print("plugin:", type(p.get("loopback-plugin")).__name__)
print("tcp is built in after the scan:", type(p.get("tcp")) is TcpBackend)
print("listed:", sorted(s.name for s in p.statuses() if s.name in ("loopback-plugin", "tcp")))
try:
    p.get("absent-plugin")
except p.BackendUnavailable as exc:
    print("absent:", exc)
'''


def test_entry_point_plugins_add_names_never_replace_a_registered_one_and_are_read_only_when_needed(tmp_path):
    """A package's entry points in group pycoll.backends: a new name is found by get() and listed; one naming a
    built-in backend and one that fails to import are each skipped with a warning naming it; get() of a registered
    name never scans the installed packages (importlib.metadata not even imported)."""
    site = tmp_path / "site"
    dist = site / "pycoll_test_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "pycoll_test_plugin.py").write_text(ENTRY_POINT_PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pycoll-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pycoll.backends]\nloopback = pycoll_test_plugin:Loopback\n"
                                           "hijack = pycoll_test_plugin:Hijack\nbroken = pycoll_test_plugin_gone:X\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", ENTRY_POINT_JOB], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "scanned at import: False" in lines
    assert "tcp is built in: True scanned: False" in lines
    assert "plugin: Loopback" in lines
    assert "tcp is built in after the scan: True" in lines
    assert "listed: ['loopback-plugin', 'tcp']" in lines
    assert ("pycoll: backend entry point hijack names backend 'tcp', which is already registered; it is not loaded"
            in lines)
    assert any(ln.startswith("pycoll: backend entry point broken could not be loaded: No module named") for ln in lines)
    assert any(ln.startswith("absent: unknown backend 'absent-plugin'; known:") and "loopback-plugin" in ln
               for ln in lines), lines
