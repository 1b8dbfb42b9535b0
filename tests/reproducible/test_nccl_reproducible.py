"""accuracy="reproducible" on the NCCL backend: pycoll's ring over ncclSend/ncclRecv, the exact mode's summary,
limbs and result made by the device memory table's kernels (native/comm/reproducible_device.c). Against the fake
libnccl (tests/fakes/fake_nccl.c) in real processes with every buffer reported as device memory
(FAKE_CUDA_MEMORY_TYPE=2) and the guarded test table (tests/fakes/guarded_memory.c: the host's exact-mode loops
behind counters) standing in for the CUDA one: the same data through that job and through a job on host memory give
the same bytes, the simulated host path's; what the device has no kernels for is refused on every rank, typed,
and the communicator goes on. (tests/vendors/test_cuda_scratch.py runs the CUDA table's own entries against a fake
driver.)"""

import os

import numpy as np
import pytest
from fakes import guarded_memory
from fakes.vendor_harness import buffer, make_engine, run_ranks_ok, vendor_fixtures

from pycoll.tools.accuracy import make_inputs

SUM, MAX, AVG = 0, 3, 4
COUNT = 1001
FLOATS = ["float16", "bfloat16", "float32", "float64"]

fake_env, env = vendor_fixtures("nccl")


def _counts():
    return guarded_memory.counts(os.environ[guarded_memory.VARIABLE])


def _error(fn):
    """(exception type name, message) of fn(), or None when it succeeds."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 -- the test compares what each rank raised
        return type(exc).__name__, str(exc)
    return None


def _every_reproducible_call(rank, world):
    """Each reproducible collective of the NCCL engine on this rank's share of the data sets; the calls each made
    to the guarded table; then a call with an infinity on rank 0 (device memory has no kernels for it), one with
    op max, and a call after both."""
    engine = make_engine("nccl", rank, world, 30.0)
    out, calls = {}, {}
    for dtype in FLOATS:
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=7)
        full = make_inputs("gaussian", world, COUNT * world, dtype, seed=8)

        def all_reduce_in_place(op):
            x = inputs[rank].copy()
            engine.all_reduce(buffer(x), buffer(x), op, "auto", "reproducible")
            return x

        def all_reduce_out_of_place(op):
            y = np.empty_like(inputs[rank])
            engine.all_reduce(buffer(inputs[rank]), buffer(y), op, "auto", "reproducible")
            return y

        def reduce_scatter(op):
            part = np.empty(COUNT, full[rank].dtype)
            engine.reduce_scatter(buffer(full[rank]), buffer(part), op, "auto", "reproducible")
            return part

        def reduce(op):
            z = inputs[rank].copy()
            engine.reduce(buffer(z), buffer(z), op, world - 1, "reproducible")
            return z

        for fn in (all_reduce_in_place, all_reduce_out_of_place, reduce_scatter, reduce):
            for op in (SUM, AVG):
                before = _counts()
                out[(fn.__name__, op, dtype)] = fn(op)
                after = _counts()
                calls[(fn.__name__, op, dtype)] = {k: after[k] - before[k] for k in after}
    special = np.ones(8, np.float32)
    special[3] = np.inf if rank == 0 else 1.0
    out["special"] = special
    refusals = {"special": _error(lambda: engine.all_reduce(buffer(special), buffer(special), SUM, "auto",
                                                           "reproducible"))}
    ones = np.ones(8, np.float32)
    refusals["max"] = _error(lambda: engine.all_reduce(buffer(ones), buffer(ones), MAX, "auto", "reproducible"))
    after_refusals = np.full(8, rank + 0.25, np.float32)
    engine.all_reduce(buffer(after_refusals), buffer(after_refusals), SUM, "auto", "reproducible")
    out["after"] = after_refusals
    engine.close()
    return out, calls, refusals, _counts()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [2, 4])
def test_device_memory_gives_the_host_bytes_and_refuses_what_it_has_no_kernels_for(env, tmp_path, world):
    from pycoll.tools.simulate import simulate
    table = {guarded_memory.VARIABLE: guarded_memory.library_path()}
    device = run_ranks_ok(_every_reproducible_call, world, dict(env, FAKE_CUDA_MEMORY_TYPE="2", **table),
                          timeout=220)
    (tmp_path / "host_store").mkdir()  # a second job: its own rendezvous store; host memory, the table offered
    host = run_ranks_ok(_every_reproducible_call, world, dict(env, STORE_DIR=str(tmp_path / "host_store"), **table),
                        timeout=220)
    for rank in range(world):
        out, calls, refusals, final = device[rank]
        host_out, host_calls, host_refusals, _ = host[rank]
        for key, c in calls.items():
            assert out[key].tobytes() == host_out[key].tobytes(), (rank, key)  # bitwise the host path's
            assert not any(host_calls[key].values()), key  # host memory: the host kernels, never the table
            name, op, _ = key
            receives = name != "reduce" or rank == world - 1
            assert c["repro_summary"] == c["repro_encode"] == c["copy_to_host"] == 1, (rank, key, c)
            assert c["repro_decode"] == receives and c["scale_avg"] == (receives and op == AVG), (rank, key, c)
            assert c["corrupt"] == 0 and c["alloc"] >= 2, (rank, key, c)  # the summary and the limbs
        assert final["live"] == 0 and final["alloc"] == final["free"] > 0 and final["corrupt"] == 0, final
        # An infinity: the host runs the general mode; device memory refuses it on every rank, and goes on.
        assert host_refusals["special"] is None and host_out["special"][3] == np.inf
        name, message = refusals["special"]
        assert name == "PycollError", (rank, name, message)
        assert "guarded test memory runs the exact mode only" in message and "infinity or NaN" in message
        for refusal in (refusals["max"], host_refusals["max"]):  # refused before anything is sent, as on host
            assert refusal is not None and "op max" in refusal[1], refusal
        np.testing.assert_array_equal(out["after"], np.full(8, sum(r + 0.25 for r in range(world)), np.float32))
    for dtype in FLOATS:  # the simulated host path's bytes too
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=7)
        full = make_inputs("gaussian", world, COUNT * world, dtype, seed=8)
        for op in ("sum", "avg"):
            op_id = SUM if op == "sum" else AVG
            simulated = simulate("all_reduce", inputs, op=op, accuracy="reproducible")
            blocks = simulate("reduce_scatter", full, op=op, accuracy="reproducible")
            for rank in range(world):
                out = device[rank][0]
                assert out[("all_reduce_in_place", op_id, dtype)].tobytes() == simulated[rank].tobytes()
                assert out[("reduce_scatter", op_id, dtype)].tobytes() == blocks[rank].tobytes()
            assert device[world - 1][0][("reduce", op_id, dtype)].tobytes() == simulated[0].tobytes()
