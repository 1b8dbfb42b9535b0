"""Compensated mode on the NCCL backend: pycoll's own C algorithms (native/algorithms) through a pycoll
communicator over the vendor transport (backends/common/vendor_p2p.c: ncclSend/ncclRecv in NCCL groups), against
the fake libnccl (tests/fakes/fake_nccl.c) in real processes, whose "device" memory is host memory (the host
kernels stand in for device ones). On device memory the mode says why it is unavailable."""

import os

import numpy as np
import pytest
from fakes import guarded_memory
from fakes.vendor_harness import all_reduce_error, buffer, make_engine, run_ranks_ok, vendor_fixtures, with_engine

from pycoll.tools.accuracy import correctly_rounded_sum, make_inputs, ulp_distance

ml_dtypes = pytest.importorskip("ml_dtypes")

SUM, AVG = 0, 4
COUNT = 1001  # not a multiple of the world size: blocks of unequal length


fake_env, env = vendor_fixtures("nccl")
engine_per_rank = with_engine("nccl", 30.0)


def _max_ulps(outs, inputs, dtype, divisor=1):
    reference = correctly_rounded_sum(inputs, dtype, divisor)
    return max(float(ulp_distance(np.asarray(out).astype(reference.dtype), reference).max()) for out in outs)


def _assert_identical_within_one_ulp(outs, inputs, dtype, divisor=1):
    """Every rank has the same bits, within 1 ulp of the correctly rounded sum (divided by divisor)."""
    assert all(np.asarray(o).tobytes() == np.asarray(outs[0]).tobytes() for o in outs), "ranks differ"
    assert _max_ulps(outs, inputs, dtype, divisor) <= 1, dtype


# ---- 2 ranks in 2 processes over the fake NCCL ----

FLOATS = ["float16", "bfloat16", "float32", "float64"]


@engine_per_rank
def _two_ranks(engine, rank, world):
    out = {}
    for dtype in FLOATS:
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=3)
        x = inputs[rank].copy()
        assert engine.all_reduce(buffer(x), buffer(x), SUM, "auto", "compensated") == "ring"
        out[("sum", dtype)] = x
        y = np.empty_like(x)
        engine.all_reduce(buffer(inputs[rank]), buffer(y), AVG, "auto", "compensated")
        out[("avg", dtype)] = y
        full = np.concatenate([inputs[rank], inputs[rank][::-1]])
        part = np.empty(COUNT, x.dtype)
        engine.reduce_scatter(buffer(full), buffer(part), SUM, "auto", "compensated")
        out[("reduce_scatter", dtype)] = part
        z = inputs[rank].copy()
        engine.reduce(buffer(z), buffer(z), SUM, 1, "compensated")
        out[("reduce", dtype)] = z
    one = np.array([rank + 0.5], np.float32)  # fewer elements than ranks: rank 1's block is empty
    engine.all_reduce(buffer(one), buffer(one), SUM, "auto", "compensated")
    out["one"] = one
    ints = np.arange(6, dtype=np.int32) * (rank + 1)
    engine.all_reduce(buffer(ints), buffer(ints), SUM, "auto", "compensated")  # no compensated form: NCCL's own
    out["int32"] = ints
    return out


@pytest.mark.timeout(90)
def test_two_ranks_sum_avg_reduce_scatter_reduce(env):
    world = 2
    outs = run_ranks_ok(_two_ranks, world, env, timeout=80)
    for dtype in FLOATS:
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=3)
        _assert_identical_within_one_ulp([o[("sum", dtype)] for o in outs], inputs, dtype)
        _assert_identical_within_one_ulp([o[("avg", dtype)] for o in outs], inputs, dtype, divisor=2)
        fulls = [np.concatenate([x, x[::-1]]) for x in inputs]
        for rank in range(world):
            block = [f[rank * COUNT:(rank + 1) * COUNT] for f in fulls]
            assert _max_ulps([outs[rank][("reduce_scatter", dtype)]], block, dtype) <= 1, dtype
        assert _max_ulps([outs[1][("reduce", dtype)]], inputs, dtype) <= 1, dtype
        np.testing.assert_array_equal(outs[0][("reduce", dtype)], inputs[0])  # off the root: untouched
    for o in outs:
        np.testing.assert_array_equal(o["one"], [2.0])
        np.testing.assert_array_equal(o["int32"], np.arange(6) * 3)
    log = open(env["FAKE_COLL_LOG"]).read()
    # The C ring's messages go as bytes (ncclUint8, 1): float16 partials travel as float32 (sum, comp) pairs, so
    # block 1 (500 elements) is 500 x 8 bytes.
    assert "ncclSend rank=0 peer=1 count=4000 dtype=1" in log
    assert "ncclRecv rank=1 peer=0 count=4000 dtype=1" in log
    assert "ncclAllReduce rank=0 count=6 dtype=2" in log  # the int32 sum went to NCCL's all-reduce


# ---- 4 ranks: the ring carries pairs over several steps, where plain float32 sums lose digits ----

@engine_per_rank
def _four_ranks(engine, rank, world):
    out = {}
    for dtype in ("float16", "float32", "float64"):
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=5)
        for accuracy in ("compensated", "fast"):
            x = inputs[rank].copy()
            engine.all_reduce(buffer(x), buffer(x), SUM, "auto", accuracy)
            out[(accuracy, dtype)] = x
    return out


@pytest.mark.timeout(120)
def test_four_ranks_within_one_ulp_where_plain_float32_is_not(env):
    from pycoll.tools.simulate import simulate
    world = 4
    outs = run_ranks_ok(_four_ranks, world, env, timeout=110)
    for dtype in ("float16", "float32", "float64"):
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=5)
        comp = [o[("compensated", dtype)] for o in outs]
        _assert_identical_within_one_ulp(comp, inputs, dtype)
        # The same bits as libpycoll's C ring (simulated ranks): one schedule, one arithmetic.
        c_ring = simulate("all_reduce", inputs, algorithm="ring", accuracy="compensated")
        np.testing.assert_array_equal(comp[0].view(np.uint8), c_ring[0].view(np.uint8), err_msg=dtype)
    # The fake NCCL sums in float32 in rank order, as a plain ring does: many ulps off on this data.
    inputs = make_inputs("mixed", world, COUNT, "float32", seed=5)
    assert _max_ulps([outs[0][("fast", "float32")]], inputs, "float32") > 16


# ---- device memory ----

def _device_memory(rank, world):
    x = np.ones(8, np.float32)
    return all_reduce_error(make_engine("nccl", rank, world, 5.0), x, SUM, "compensated")


@pytest.mark.timeout(60)
def test_on_device_memory_without_nvrtc_compensated_mode_says_what_to_install(env, tmp_path):
    """Device memory runs pycoll's CUDA kernels (backends/cuda/cuda_kernels.c): where NVRTC cannot be loaded, the
    refusal names it and what to install; where NVRTC loads but the driver does not, it names the driver."""
    missing = str(tmp_path / "libnvrtc-missing.so")
    for name, message in run_ranks_ok(_device_memory, 2,
                                      dict(env, FAKE_CUDA_MEMORY_TYPE="2", PYCOLL_NVRTC_LIBRARY=missing)):
        assert name == "BackendUnavailable", message
        assert "device memory" in message and "NVRTC (libnvrtc) is not loaded" in message
        assert "pip install nvidia-cuda-nvrtc-cu12" in message and missing in message


def test_cuda_library_without_its_symbols_is_refused_naming_them(env):
    """A library that loads but lacks the symbols (here the fake libnccl as NVRTC) is refused, naming the first
    one missing; the failed load leaves nothing half-loaded."""
    from pycoll._bindings.vendor import cuda_kernels_load
    fake = env["PYCOLL_NCCL_LIBRARY"]
    assert "lacks nvrtcCreateProgram" in cuda_kernels_load(0, fake)
    assert "lacks cuInit" in cuda_kernels_load(1, fake)
    assert "not 0 or 1" in cuda_kernels_load(2, fake)


# ---- every data copy and data scratch buffer through the transport's memory table ----

BIG = 40_000  # float32 x 40 000 = 160 KB: past reduce's 64 KiB tree limit, so its scatter-gather runs


def _guarded_counts():
    """The counts of the guarded table the rank's transport is given (PYCOLL_TEST_MEMORY_TABLE)."""
    return guarded_memory.counts(os.environ[guarded_memory.VARIABLE])


def _delta(before, after):
    return {entry: after[entry] - before[entry] for entry in guarded_memory.ENTRIES}


def _every_compensated_collective(rank, world):
    """Each compensated collective the NCCL engine runs through the C schedules, with the table's calls it made,
    and the table's counts once the engine is closed."""
    engine = make_engine("nccl", rank, world, 30.0)
    out, calls = {}, {}

    def run(key, fn):
        before = _guarded_counts()
        out[key] = fn()
        calls[key] = _delta(before, _guarded_counts())

    for dtype in FLOATS:
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=7)

        def in_place():
            x = inputs[rank].copy()
            engine.all_reduce(buffer(x), buffer(x), SUM, "auto", "compensated")
            return x

        def out_of_place_avg():
            y = np.empty_like(inputs[rank])
            engine.all_reduce(buffer(inputs[rank]), buffer(y), AVG, "auto", "compensated")
            return y

        def reduce_scatter():
            full = np.concatenate([inputs[rank], inputs[rank][::-1]] * (world // 2))
            part = np.empty(COUNT, inputs[rank].dtype)
            engine.reduce_scatter(buffer(full), buffer(part), SUM, "auto", "compensated")
            return part

        def reduce_tree():
            z = inputs[rank].copy()
            engine.reduce(buffer(z), buffer(z), SUM, 1, "compensated")
            return z

        run(("all_reduce", dtype), in_place)
        run(("all_reduce_avg", dtype), out_of_place_avg)
        run(("reduce_scatter", dtype), reduce_scatter)
        run(("reduce", dtype), reduce_tree)
    big = make_inputs("mixed", world, BIG, "float32", seed=8)

    def reduce_large():
        z = np.empty_like(big[rank])
        engine.reduce(buffer(big[rank]), buffer(z), AVG, 0, "compensated")
        return z if rank == 0 else z[:0]  # off the root recvbuf is not written

    run("reduce_large", reduce_large)
    engine.close()
    return out, calls, _guarded_counts()


@pytest.mark.timeout(120)
def test_device_memory_runs_every_data_copy_and_scratch_through_the_memory_table(env, tmp_path):
    """With the guarded test table standing in for a device one (FAKE_CUDA_MEMORY_TYPE=2: every buffer is
    "device" memory): every scratch buffer is the table's (poisoned on allocation, canaries checked on free, all
    freed at close), every copy and kernel is the table's, and the bits equal the host path's and the simulated
    C ring's."""
    from pycoll.tools.simulate import simulate
    world = 4
    table = {guarded_memory.VARIABLE: guarded_memory.library_path()}
    guarded = run_ranks_ok(_every_compensated_collective, world, dict(env, FAKE_CUDA_MEMORY_TYPE="2", **table),
                           timeout=110)
    (tmp_path / "host_store").mkdir()  # a second job: its own rendezvous store; host memory, the table offered
    host = run_ranks_ok(_every_compensated_collective, world,
                        dict(env, STORE_DIR=str(tmp_path / "host_store"), **table), timeout=110)
    for rank in range(world):
        out, calls, final = guarded[rank]
        host_out, host_calls, host_final = host[rank]
        for key, value in out.items():
            assert value.tobytes() == host_out[key].tobytes(), (rank, key)  # bitwise the host path's
            assert host_calls[key] == dict.fromkeys(guarded_memory.ENTRIES, 0), key  # host memory: the host table
            c = calls[key]
            assert c["corrupt"] == 0, (rank, key, c)
            # The ring's receive slots (and on first use the communicator's workspace) come from the table.
            assert c["alloc"] >= 1, (rank, key, c)
            assert c["compensated_load"] >= 1, (rank, key, c)  # (a leaf of reduce's tree only loads and sends)
        for key in [k for k in out if k[0] in ("all_reduce", "all_reduce_avg", "reduce_scatter")]:
            assert calls[key]["compensated_combine"] >= 1 and calls[key]["compensated_store"] >= 1, (rank, key)
        for dtype in FLOATS:
            # Out of place the ring reads sendbuf where it lies: no copy of it into recvbuf first (whose bits,
            # checked above, are still the host path's); in place there is nothing to copy either.
            assert calls[("all_reduce_avg", dtype)]["copy"] == 0, (rank, dtype)
            assert calls[("all_reduce", dtype)]["copy"] == 0, (rank, dtype)
        assert final["live"] == 0 and final["alloc"] == final["free"] > 0, (rank, final)  # all freed at close
        assert final["corrupt"] == 0, (rank, final)
    for dtype in FLOATS:
        inputs = make_inputs("mixed", world, COUNT, dtype, seed=7)
        c_ring = simulate("all_reduce", inputs, algorithm="ring", accuracy="compensated")
        for rank in range(world):
            got = guarded[rank][0][("all_reduce", dtype)]
            np.testing.assert_array_equal(got.view(np.uint8), c_ring[rank].view(np.uint8), err_msg=dtype)
