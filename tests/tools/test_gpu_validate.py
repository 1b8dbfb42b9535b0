"""bench/gpu_validate.py, the end-to-end validation of a GPU machine, refuses clearly where there is no usable GPU:
exit code 2, the reason on stderr, and no results file written (it has never run on a GPU: see its docstring).
One GPU is not refused: two ranks share it where both NCCLs allow it, else one rank runs. Its verdicts and report
are checked on stand-in results; its mixed part's checks, and its correctness part's comparison of every checked
collective with torch.distributed's (gloo standing in for NCCL on torch's side), on the fake NCCL."""

import functools
import math
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.vendor_harness import device_array, fakes_fixture, run_ranks_ok
from multiproc import free_port
from repo_paths import ROOT

SCRIPT = ROOT / "bench" / "gpu_validate.py"


def test_it_refuses_without_a_gpu(tmp_path):
    check = subprocess.run([sys.executable, "-P", str(SCRIPT), "--check"], capture_output=True, text=True,
                           timeout=100)
    if check.returncode == 0:
        pytest.skip("a usable GPU is here: run the validation itself (python bench/gpu_validate.py)")
    out = tmp_path / "gpu.md"
    done = subprocess.run([sys.executable, "-P", str(SCRIPT), "--out", str(out), "--quick"], capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "gpu_validate: refusing to run: no usable GPU here:" in done.stderr
    # the reason is one of: no PyTorch, PyTorch without a device, pycoll's nccl backend unusable
    assert ("PyTorch" in done.stderr) or ("nccl backend is unusable" in done.stderr), done.stderr
    assert f"{out} was not written" in done.stderr
    assert not out.exists()


def _validate_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parts(**changes):
    good = {
        "correctness": {0: [{"equal": True}], 1: [{"equal": True}]},
        "algorithms": {0: [{"accuracy": "compensated", "max_ulps": 1.0, "over_bound": 0.01},
                           {"accuracy": "fast", "max_ulps": 900.0, "over_bound": 0.4}],
                       1: []},
        "streams": {0: [{"ok": True}], 1: [{"ok": True}]},
        "killed": {0: [{"raised": "PeerFailure", "seconds": 31.0, "timeout": 30.0}], 1: {"exit": 17, "output": ""}},
        "torch_bench": {0: [{"bytes": 1024, "us": 10.0}]},
        "torch_backend": {r: [{"check": "all_reduce sum int32", "equal": True}] for r in range(2)},
        "cupy": {r: [{"check": "all_gather int64", "equal": True}] for r in range(2)},
        "reproducible": {r: [{"check": "reproducible float64 sum", "equal": True}] for r in range(2)},
        "mixed": {r: [{"check": "all_reduce sum int32 n=1001", "equal": True}] for r in range(4)},
        "bench": {0: [{"ok": True, "why": "exit 0", "output": "#  size  count"}]},
    }
    good.update(changes)
    return good


# ---- the orchestration, every GPU-side piece stood in for ----

def _stand_in_machine(monkeypatch, module, gpus=2):
    """A machine main() takes for a GPU one: preflight passes, torch sees `gpus` devices, pycoll's NCCL and
    torch's are 2.30, versions() answers, and every part's ranks return good rows (run_ranks)."""
    import types

    torch = pytest.importorskip("torch")  # the stand-ins patch torch.cuda: the torch extra

    from pycoll.plugins import nccl as nccl_plugin

    class Backend:
        loaded = {}

        def probe(self):
            return None

        def nccl_version(self):
            return "2.30.1"

    ran = []

    def run_ranks(part, nproc, quick, timeout, env=None):
        ran.append((part, timeout, env["GPU_VALIDATE_COMM_TIMEOUT"]))
        return _parts().get(part, {r: [{"check": "stand-in", "equal": True}] for r in range(nproc)})

    monkeypatch.setattr(module, "preflight", lambda: None)
    monkeypatch.setattr(module, "versions", lambda: {"gpu": "stand-in"})
    monkeypatch.setattr(module, "run_ranks", run_ranks)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "nccl", types.SimpleNamespace(version=lambda: (2, 30, 1)), raising=False)
    monkeypatch.setattr(nccl_plugin, "NcclBackend", Backend)
    return ran


def test_a_bench_past_the_deadline_fails_its_part_and_the_report_is_still_written(monkeypatch, tmp_path):
    module = _validate_module()
    _stand_in_machine(monkeypatch, module)
    launched = []

    def hung_bench(cmd, **kwargs):
        launched.append(cmd)
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], output=b"#  size  count")

    monkeypatch.setattr(subprocess, "run", hung_bench)
    out = tmp_path / "gpu.md"
    assert module.main(["--out", str(out), "--quick", "--timeout", "7"]) == 0
    assert launched and "bench" in launched[0]
    text = out.read_text()
    assert "- bench: FAIL (pycoll bench: timed out after 7 s)" in text, text
    assert "- correctness: PASS" in text and "#  size  count" in text


def test_parts_runs_only_the_named_parts_in_their_order_within_a_deadline_from_the_comm_timeout(
        monkeypatch, tmp_path):
    """A 15-minute device session runs what matters first; a hung part costs the communicator's timeout twice and
    the start, not half an hour."""
    module = _validate_module()
    ran = _stand_in_machine(monkeypatch, module)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the bench was not asked for"))
    out = tmp_path / "gpu.md"
    assert module.main(["--out", str(out), "--parts", "streams,correctness", "--comm-timeout", "20"]) == 0
    assert ran == [("streams", 100.0, "20.0"), ("correctness", 100.0, "20.0")]
    text = out.read_text()
    assert "--parts streams,correctness" in text
    assert "- streams: PASS" in text and "- correctness: PASS" in text
    assert "- bench: NOT RUN (not run: not in --parts)" in text and "- mixed: NOT RUN" in text
    ran.clear()
    assert module.main(["--out", str(out), "--parts", "correctness"]) == 0
    assert ran == [("correctness", module.part_deadline(module.COMM_TIMEOUT_S), "60.0")]
    assert module.part_deadline(60.0) == 180.0
    with pytest.raises(SystemExit):
        module.main(["--out", str(out), "--parts", "correctness,nonsense"])


def test_a_part_killed_at_its_deadline_says_so():
    module = _validate_module()
    ranks = {0: {"exit": -9, "output": "", "timed_out": "killed at the part's deadline, 180 s"}, 1: [{"ok": True}]}
    ok, why = module.verdicts(_parts(streams=ranks))["streams"]
    assert not ok and "ranks [0] failed (killed at the part's deadline, 180 s)" in why, why


def test_nvrtc_is_the_first_candidate_that_loads(monkeypatch):
    """Where libnvrtc.so.12 (the first candidate, a bare soname) is absent and libnvrtc.so.13 is there, pycoll
    loads the latter: the versions must name it, not say NVRTC was not found."""
    import ctypes
    import types

    from pycoll.plugins import nccl as nccl_plugin

    module = _validate_module()
    versions = module.versions  # the real one, on the stand-in machine's NCCL and torch
    _stand_in_machine(monkeypatch, module, gpus=0)

    def set_version(major, minor):
        major._obj.value, minor._obj.value = 13, 2
        return 0

    def cdll(path, *args, **kwargs):
        if path != "libnvrtc.so.13":
            raise OSError(f"{path}: cannot open shared object file: No such file or directory")
        return types.SimpleNamespace(nvrtcVersion=set_version)

    monkeypatch.setattr(nccl_plugin, "nvrtc_candidates", lambda: ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"])
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert versions()["NVRTC"] == "13.2 (libnvrtc.so.13)"
    monkeypatch.setattr(nccl_plugin, "nvrtc_candidates", lambda: ["libnvrtc.so.12", "libnvrtc.so"])
    missing = versions()["NVRTC"]
    assert missing.startswith("not found") and "libnvrtc.so.12:" in missing and "libnvrtc.so:" in missing


def test_the_report_judges_every_part():
    """Its first run on a GPU must say pass or fail for each part, not leave the reader to judge raw rows."""
    verdicts = _validate_module().verdicts
    assert all(ok for ok, _ in verdicts(_parts()).values())
    cases = {
        "correctness": {0: [{"equal": True}, {"equal": False}], 1: []},
        "algorithms": {0: [{"accuracy": "compensated", "max_ulps": 40.0}], 1: []},
        "streams": {0: [{"ok": False}], 1: []},
        "killed": {0: [{"raised": None}], 1: {"exit": 17, "output": ""}},
    }
    for part, rows in cases.items():
        ok, why = verdicts(_parts(**{part: rows}))[part]
        assert not ok, (part, why)
    ok, why = verdicts(_parts(correctness={0: {"exit": 1, "output": "boom"}, 1: []}))["correctness"]
    assert not ok and "ranks [0] failed" in why
    report = _validate_module().report
    args = type("Args", (), {"nproc": 2, "quick": True})()
    text = report(args, {"gpu": "stand-in"}, _parts(streams={0: [{"ok": False}], 1: []}))
    assert "- streams: FAIL" in text and "- correctness: PASS" in text


def test_every_algorithm_row_is_judged_and_a_nan_error_fails():
    """A fast-mode row is judged too (against the rounding any summation order allows: a wrong own algorithm
    must not pass for want of a compensated row), and NaN errors, which compare false with any limit, fail."""
    verdicts = _validate_module().verdicts
    nan = float("nan")
    for rows in ([{"accuracy": "fast", "max_ulps": 3e9, "over_bound": 5e6}],
                 [{"accuracy": "fast", "max_ulps": nan, "over_bound": nan}],
                 [{"accuracy": "compensated", "max_ulps": nan, "over_bound": 0.1}],
                 [{"accuracy": "compensated", "max_ulps": 1.0, "over_bound": float("inf")}]):
        ok, why = verdicts(_parts(algorithms={0: rows, 1: []}))["algorithms"]
        assert not ok, (rows, why)
    ok, why = verdicts(_parts(algorithms={0: [{"accuracy": "fast", "max_ulps": 1e6, "over_bound": 0.9}], 1: []}))[
        "algorithms"]
    assert ok, why


def test_the_bound_tells_a_wrong_sum_from_rounding():
    torch = pytest.importorskip("torch")
    over_bound = _validate_module()._over_bound
    g = torch.Generator().manual_seed(3)
    terms = [(10.0 ** (torch.rand(4096, generator=g) * 16 - 8) * (torch.randint(0, 2, (4096,), generator=g) * 2 - 1))
             .float() for _ in range(4)]
    want = sum(t.double() for t in terms)
    magnitude = sum(t.double().abs() for t in terms)
    in_order = terms[0] + terms[1] + terms[2] + terms[3]
    as_a_tree = (terms[3] + terms[1]) + (terms[2] + terms[0])
    for got in (in_order, as_a_tree, want.float()):
        assert over_bound(got, want, magnitude, 4) <= 1.0
    assert over_bound(terms[0] + terms[1] + terms[2], want, magnitude, 4) > 1.0  # a rank left out
    assert math.isnan(over_bound(in_order + float("nan"), want, magnitude, 4))


def test_a_survivor_that_raises_long_after_its_timeout_fails_the_killed_part():
    verdicts = _validate_module().verdicts
    dead = {"exit": 17, "output": ""}
    ok, why = verdicts(_parts(killed={0: [{"raised": "Timeout", "seconds": 44.0, "timeout": 30.0}], 1: dead}))[
        "killed"]
    assert ok, why
    ok, why = verdicts(_parts(killed={0: [{"raised": "Timeout", "seconds": 600.0, "timeout": 30.0}], 1: dead}))[
        "killed"]
    assert not ok and "later than their timeout" in why, why
    ok, why = verdicts(_parts(killed={0: [{"raised": "Timeout"}], 1: dead}))["killed"]
    assert not ok, why



# The mixed part's checks, run as on a GPU machine (two GPU ranks, two host ranks, backend="auto") but on the fake
# NCCL: the part's own code, but for the torch tensors its GPU ranks pass there.
fakes = fakes_fixture()
MIXED = ("cuda", "cuda", "host", "host")


def _mixed_rank(port, rank, world):
    import pycoll

    kind = MIXED[rank]
    comm = pycoll.init("auto", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       device=kind, timeout=30.0)
    rows = _validate_module().mixed_checks(comm, lambda arr: device_array(kind, arr),
                                           lambda arr: getattr(arr, "arr", arr))
    comm.close()
    return rows


@pytest.mark.timeout(90)
def test_the_mixed_part_passes_on_fake_nccl_and_host_ranks_and_fails_a_wrong_result(fakes, tmp_path):
    module = _validate_module()
    results = run_ranks_ok(functools.partial(_mixed_rank, free_port()), len(MIXED),
                           {**fakes("nccl"), "FAKE_COLL_DIR": str(tmp_path)}, timeout=80)
    ranks = dict(enumerate(results))
    ok, why = module.checks_verdict(ranks)
    assert ok, why
    names = [row["check"] for row in ranks[0]]
    for collective in ("all_reduce", "reduce_scatter counts=", "all_to_all", "gather", "scatter", "send/recv"):
        assert any(name.startswith(collective) for name in names), (collective, names)
    assert {row["ran"] for row in ranks[0] if row["check"].startswith("all_reduce")} <= {"hierarchical",
                                                                                         "host-staged"}
    wrong = {**ranks, 3: [dict(row, equal=False) if row["check"] == "all_to_all" else row for row in ranks[3]]}
    ok, why = module.checks_verdict(wrong)
    assert not ok and "(3, 'all_to_all')" in why, why
    ok, why = module.checks_verdict({**ranks, 2: {"exit": 1, "output": "boom"}})
    assert not ok and "ranks [2] failed" in why
    args = type("Args", (), {"nproc": 2, "quick": True})()
    text = module.report(args, {"gpu": "stand-in"}, _parts(mixed=wrong))
    assert "- mixed: FAIL" in text and "A mixed job" in text


# ---- one GPU: two ranks share it where NCCL allows, else one rank; nothing refused ----

def test_one_gpu_is_not_refused(monkeypatch):
    import types

    torch = pytest.importorskip("torch")  # the stand-ins patch torch.cuda: the torch extra

    import pycoll

    module = _validate_module()
    usable = types.SimpleNamespace(name="nccl", usable=True, reason="")
    monkeypatch.setattr(pycoll, "backends", lambda: [usable])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert module.preflight() is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert "no CUDA device" in module.preflight()


def test_the_layout_shares_one_gpu_where_both_nccls_allow_it():
    layout = _validate_module().layout
    nproc, env, why = layout(1, "2.30.1", "2.30.0")
    assert (nproc, env) == (2, {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}) and "sharing it" in why
    for pycoll_nccl, torch_nccl in (("2.29.7", "2.30.0"), ("2.30.1", "2.27.5"), ("", "2.31.0")):
        nproc, env, why = layout(1, pycoll_nccl, torch_nccl)
        assert (nproc, env) == (1, {}) and "one rank" in why, (pycoll_nccl, torch_nccl)
    assert layout(8, "2.21.5", "2.21.5")[:2] == (8, {})
    assert layout(8, "2.21.5", "2.21.5", nproc=4)[:2] == (4, {})


def test_a_one_rank_run_says_the_killed_part_did_not_run(monkeypatch, tmp_path):
    module = _validate_module()
    ran = _stand_in_machine(monkeypatch, module)
    out = tmp_path / "gpu.md"
    assert module.main(["--out", str(out), "--nproc", "1", "--parts", "killed,correctness"]) == 0
    assert [part for part, _, _ in ran] == ["correctness"]
    text = out.read_text()
    assert "- killed: NOT RUN (not run: one rank, no peer to lose)" in text and "- ranks: one rank per GPU" in text


# ---- correctness of every checked collective against torch.distributed, on the fake NCCL (torch's side: gloo) ----

GLOO_DTYPES = ("int8", "uint8", "int32", "int64", "float16", "float32", "float64")


def _correctness_rank(ports, rank, world):
    import sys

    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes
    from fakes.fake_torch_cuda import cuda, enable

    import pycoll

    comm = pycoll.init("nccl", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=ports[0],
                       timeout=30.0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[1]}", rank=rank, world_size=world)
    enable()
    # gloo takes the same memory as the CPU tensor it is.
    rows = _validate_module().correctness_rows(comm, dist, torch, (0, 7, 1001), dtypes=GLOO_DTYPES, device="cpu",
                                               wrap=cuda, for_torch=lambda t: t.as_subclass(torch.Tensor))
    dist.destroy_process_group()
    comm.close()
    return rows


@pytest.mark.timeout(120)
def test_the_correctness_part_checks_every_collective_on_fake_nccl(fakes, tmp_path):
    pytest.importorskip("torch")
    module = _validate_module()
    results = run_ranks_ok(functools.partial(_correctness_rank, (free_port(), free_port())), 2,
                           {**fakes("nccl"), "FAKE_COLL_DIR": str(tmp_path)}, timeout=110)
    ranks = dict(enumerate(results))
    for rank, rows in ranks.items():
        bad = [row for row in rows if not row.get("equal")]
        assert not bad, (rank, [sorted(row.items()) for row in bad[:3]])
        assert {row["collective"] for row in rows} == set(module.CHECKED)
        assert {row["op"] for row in rows if row["collective"] == "reduce_scatter"} == set(module.OPS)
    parts = _parts(correctness=ranks)
    assert module.verdicts(parts)["correctness"][0]
    # A wrong result on the reduce's root (the last rank) alone fails the part.
    wrong = {0: ranks[0], 1: [dict(row, equal=False) if row["collective"] == "reduce" else row for row in ranks[1]]}
    ok, why = module.verdicts(_parts(correctness=wrong))["correctness"]
    assert not ok and "not equal" in why


# ---- the parts added for the torch backend, CuPy and reproducible accuracy: their checks on the CPU ----

def _cpu_checks_rank(ports, rank, world):
    """The checks of the torch_backend, cupy and reproducible parts, as their GPU workers run them, on host memory:
    pycoll's torch backend on CPU tensors, NumPy standing in for CuPy, the cpu backend for nccl."""
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist

    import pycoll
    import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

    module = _validate_module()
    comm = pycoll.init("cpu", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=ports[0],
                       timeout=30.0)
    rows = {"cupy": module.array_checks(comm, np, lambda a: a),
            "reproducible": module.reproducible_checks(comm, torch, 4099, device="cpu"),
            "fast": module.reproducible_checks(comm, torch, 4099, device="cpu", accuracy="fast")}
    comm.close()
    dist.init_process_group("pycoll", init_method=f"tcp://127.0.0.1:{ports[1]}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    rows["torch_backend"] = module.torch_backend_checks(
        dist, lambda a: torch.from_numpy(np.ascontiguousarray(a)), lambda t: t.numpy())
    dist.destroy_process_group()
    return rows


@pytest.mark.timeout(120)
def test_the_torch_backend_cupy_and_reproducible_checks_pass_on_the_cpu_and_fail_a_wrong_result():
    """Three ranks, so that one rank has no send/recv partner and reversing the rank order moves a term."""
    pytest.importorskip("torch")
    module = _validate_module()
    world = 3
    results = run_ranks_ok(functools.partial(_cpu_checks_rank, (free_port(), free_port())), world, {}, timeout=110)
    for part in ("torch_backend", "cupy", "reproducible"):
        ranks = {r: results[r][part] for r in range(world)}
        ok, why = module.checks_verdict(ranks)
        assert ok, (part, why, ranks)
    names = [row["check"] for row in results[0]["torch_backend"]]
    for call in ("all_reduce sum", "async_op=True", "all_gather (list)", "all_gather_into_tensor",
                 "reduce_scatter_tensor", "broadcast", "all_to_all_single", "send/recv with rank 1", "barrier"):
        assert any(call in name for name in names), (call, names)
    assert not any("send/recv" in row["check"] for row in results[2]["torch_backend"])  # no partner in a world of 3
    # Fast mode shows the rank order in the bits: the reproducible check can fail.
    fast = {r: results[r]["fast"] for r in range(world)}
    ok, why = module.checks_verdict(fast)
    assert not ok and all(row["same_bits_every_rank"] for row in fast[0]), (why, fast[0])
    wrong = {r: results[r]["cupy"] for r in range(world)}
    wrong[1] = [dict(row, equal=False) if row["check"].startswith("all_gather") else row for row in wrong[1]]
    ok, why = module.checks_verdict(wrong)
    assert not ok and "(1, 'all_gather int64')" in why, why


def test_the_cupy_part_says_it_did_not_run_without_cupy():
    module = _validate_module()
    ranks = {0: [{"not_run": "cupy missing (No module named 'cupy')"}], 1: [{"not_run": "cupy missing"}]}
    ok, why = module.verdicts(_parts(cupy=ranks))["cupy"]
    assert ok is None and why.startswith("not run: cupy missing"), why
    args = type("Args", (), {"nproc": 2, "quick": True})()
    assert "- cupy: NOT RUN (not run: cupy missing" in module.report(args, {"gpu": "stand-in"}, _parts(cupy=ranks))
