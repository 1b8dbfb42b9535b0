"""pycoll.ray: Ray actors on a local Ray cluster (2 CPUs, one per test module) call ray.util.collective's
collectives on a group of backend "PYCOLL" and they run over pycoll -- results checked against NumPy, the
group's communicator on shared memory, bad input a typed error naming the argument, a killed actor a pycoll
error at the others within a deadline. Skips when Ray is not installed (pip install '.[ray]')."""

import importlib.util
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from repo_paths import ROOT

try:
    import ray
    HAVE_RAY = True
except ImportError:
    HAVE_RAY = False


@pytest.mark.timeout(60)
def test_import_without_ray_raises_backend_unavailable_saying_what_to_install(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"  # import ray -> ImportError, as where Ray is absent
            "import pycoll\n"
            "try:\n"
            "    import pycoll.ray\n"
            "except pycoll.BackendUnavailable as exc:\n"
            "    print('BackendUnavailable:', exc)\n")
    # From outside the source tree, whose uncompiled pycoll/ would shadow the installed package.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "BackendUnavailable:" in done.stdout and "pip install 'pycoll-collectives[ray]'" in done.stdout, done.stdout


# Every Ray test goes through the cluster fixture, which skips with this reason (the test above runs anyway).
SKIP_REASON = None if HAVE_RAY else "ray is not installed (pip install '.[ray]')"
if HAVE_RAY:
    import pycoll

    try:
        import pycoll.ray as pray
    except pycoll.BackendUnavailable as exc:  # a Ray without a collective backend registry
        SKIP_REASON, pray = str(exc), None

GROUP_TIMEOUT = 15.0  # seconds: the groups' pycoll timeout (rendezvous and every collective)
GET_TIMEOUT = 60.0    # the driver's deadline on any actor call


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local Ray cluster for the module, on 127.0.0.1, always shut down; its address. Started from a
    directory outside the source tree: Ray's workers put the driver's directory on their path, and the source
    tree's uncompiled pycoll/ would shadow the installed package."""
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    from ray import cloudpickle  # ships this module's functions to the actors by value (tests/ is no package)

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))
    try:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 namespace="pycoll-test-ray")
        try:
            yield ray.get_runtime_context().gcs_address
        finally:
            ray.shutdown()
    finally:
        os.chdir(cwd)


def make_actor_class():
    """The actor class, defined in a function so that Ray ships it by value (tests/ is not importable by the
    workers). num_cpus=0: three actors on a 2-CPU cluster."""

    @ray.remote(num_cpus=0)
    class Member:
        def __init__(self):
            import pycoll.ray  # noqa: F401 -- registers the backend in this process too

        def setup(self, world_size, rank, group_name, timeout, backend="cpu"):
            import pycoll.ray
            group = pycoll.ray.init_collective_group(world_size, rank, group_name=group_name, timeout=timeout,
                                                     backend=backend)
            return group.rank, group.world_size

        def transport(self, group_name):
            import pycoll.ray
            return pycoll.ray.get_group(group_name).transport

        def call(self, fn, *args):
            """fn(*args) here (a function shipped by value), its result or (exception type, message,
            seconds taken)."""
            start = time.monotonic()
            try:
                return "ok", fn(*args)
            except Exception as exc:  # noqa: BLE001 -- reported to the driver, which checks the type
                return "error", (type(exc).__name__, str(exc), time.monotonic() - start,
                                 [c.__name__ for c in type(exc).__mro__])

        def ping(self):
            return True

        def destroy(self, group_name):
            import pycoll.ray
            pycoll.ray.destroy_collective_group(group_name)
            return True

    return Member


def _get(refs):
    return ray.get(refs, timeout=GET_TIMEOUT)


def _ok(results):
    for status, value in results:
        assert status == "ok", value
    return [value for _, value in results]


@pytest.fixture(scope="module")
def group3(cluster):
    """Three actors in the pycoll group "g3". The tests of other groups make theirs from these actors too: an
    actor's process takes seconds to start, and one process may belong to several groups."""
    Member = make_actor_class()
    actors = [Member.remote() for _ in range(3)]
    assert _get([a.setup.remote(3, r, "g3", GROUP_TIMEOUT) for r, a in enumerate(actors)]) == \
        [(r, 3) for r in range(3)]
    yield actors
    try:
        _get([a.destroy.remote("g3") for a in actors])
    finally:
        for a in actors:
            ray.kill(a)


def _data(rank, n=5, dtype=np.float64):
    rng = np.random.default_rng(100 + rank)
    return rng.integers(-50, 50, size=n).astype(dtype)


def _collectives(rank, world):
    """Every collective of ray.util.collective on group g3, from inside an actor; the results as lists."""
    from ray.util import collective as col
    from ray.util.collective.types import ReduceOp

    out = {}
    x = _data(rank)
    col.allreduce(x, group_name="g3")
    out["allreduce_sum"] = x.tolist()
    x = _data(rank, dtype=np.int32)
    col.allreduce(x, group_name="g3", op=ReduceOp.MAX)
    out["allreduce_max"] = x.tolist()
    x = _data(rank, dtype=np.int64) % 5 + 1
    col.allreduce(x, group_name="g3", op=ReduceOp.PRODUCT)
    out["allreduce_prod"] = x.tolist()
    x = _data(rank, dtype=np.float32)
    col.allreduce(x, group_name="g3", op=ReduceOp.MIN)
    out["allreduce_min"] = x.tolist()

    gathered = [np.zeros((2, 3), dtype=np.float32) for _ in range(world)]
    col.allgather(gathered, np.full((2, 3), rank + 0.5, dtype=np.float32), group_name="g3")
    out["allgather"] = [g.tolist() for g in gathered]

    x = _data(rank) if rank == 1 else np.zeros(5)
    col.broadcast(x, src_rank=1, group_name="g3")
    out["broadcast"] = x.tolist()

    blocks = [_data(rank, n=4) + 10 * b for b in range(world)]
    mine = np.zeros(4)
    col.reducescatter(mine, blocks, group_name="g3")
    out["reducescatter"] = mine.tolist()

    x = _data(rank)
    col.reduce(x, dst_rank=2, group_name="g3")
    out["reduce"] = x.tolist()

    col.barrier(group_name="g3")

    # A ring of send/recv: rank r sends to r + 1 and receives from r - 1 (even ranks send first).
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    msg, got = np.arange(6, dtype=np.int64) * (rank + 1), np.zeros(6, dtype=np.int64)
    if rank % 2 == 0:
        col.send(msg, nxt, group_name="g3")
        col.recv(got, prv, group_name="g3")
    else:
        col.recv(got, prv, group_name="g3")
        col.send(msg, nxt, group_name="g3")
    out["recv"] = got.tolist()
    return out


@pytest.mark.timeout(90)
def test_ray_collectives_run_over_pycoll_and_match_numpy(group3):
    world = 3
    results = _ok(_get([a.call.remote(_collectives, r, world) for r, a in enumerate(group3)]))
    xs = [_data(r) for r in range(world)]
    for rank, res in enumerate(results):
        np.testing.assert_array_equal(res["allreduce_sum"], np.sum(xs, axis=0))
        np.testing.assert_array_equal(res["allreduce_max"],
                                      np.max([_data(r, dtype=np.int32) for r in range(world)], axis=0))
        np.testing.assert_array_equal(res["allreduce_prod"],
                                      np.prod([_data(r, dtype=np.int64) % 5 + 1 for r in range(world)], axis=0))
        np.testing.assert_array_equal(res["allreduce_min"],
                                      np.min([_data(r, dtype=np.float32) for r in range(world)], axis=0))
        assert res["allgather"] == [np.full((2, 3), r + 0.5).tolist() for r in range(world)]
        np.testing.assert_array_equal(res["broadcast"], _data(1))
        np.testing.assert_array_equal(res["reducescatter"],
                                      np.sum([_data(r, n=4) + 10 * rank for r in range(world)], axis=0))
        if rank == 2:
            np.testing.assert_array_equal(res["reduce"], np.sum(xs, axis=0))
        else:  # other ranks' buffers are left as they were
            np.testing.assert_array_equal(res["reduce"], xs[rank])
        np.testing.assert_array_equal(res["recv"], np.arange(6) * ((rank - 1) % world + 1))


def _communicator_facts(_):
    import pycoll.ray
    group = pycoll.ray.get_group("g3")
    comm = pycoll.ray.get_communicator("g3")
    x = np.ones(1000, dtype=np.float32)
    comm.all_reduce(x, algorithm="shm_slots")  # the shared-memory transport's own: over shm, or a ValueError
    return {"transport": group.transport, "backend": comm.backend, "hosts": comm.hosts,
            "local_size": comm.local_size, "algorithm": comm.last_algorithm, "sum": float(x[0]),
            "is_pycoll": type(group).__name__}


@pytest.mark.timeout(60)
def test_the_group_runs_over_shared_memory_on_one_host(group3):
    facts = _ok(_get([a.call.remote(_communicator_facts, None) for a in group3]))
    for f in facts:
        assert f == {"transport": "shm", "backend": "cpu", "hosts": 1, "local_size": 3, "algorithm": "shm_slots",
                     "sum": 3.0, "is_pycoll": "PycollGroup"}, f


def _bad_inputs(rank):
    """Every rank makes the same mistakes (so no rank waits on a collective the others refused)."""
    from ray.util import collective as col

    import pycoll.ray
    errors = {}
    for name, call in [
        ("long complex dtype", lambda: col.allreduce(np.ones(3, dtype=np.clongdouble), group_name="g3")),
        ("read-only", lambda: col.allreduce(np.frombuffer(b"\0" * 16, dtype=np.float64), group_name="g3")),
        ("unknown group (pycoll.ray)", lambda: pycoll.ray.get_communicator("no-such-group")),
        ("unknown group (ray)", lambda: col.allreduce(np.ones(3), group_name="no-such-group")),
        ("allgather list shape", lambda: col.allgather([np.zeros(2), np.zeros(3), np.zeros(2)], np.ones(2),
                                                       group_name="g3")),
        ("bad rank", lambda: pycoll.ray.init_collective_group(3, 5, group_name="other")),
        ("bad timeout", lambda: pycoll.ray.init_collective_group(3, 0, group_name="other", timeout=0)),
        ("bad backend", lambda: pycoll.ray.init_collective_group(3, 0, group_name="other", backend="nope")),
    ]:
        try:
            call()
            errors[name] = None
        except Exception as exc:  # noqa: BLE001 -- compared by the driver
            errors[name] = (type(exc).__name__, str(exc))
    x = np.full(3, rank + 1.0)
    col.allreduce(x, group_name="g3")  # the group still works afterwards
    errors["after"] = x.tolist()
    return errors


@pytest.mark.timeout(60)
def test_bad_input_is_a_typed_error_naming_the_argument_and_the_group_survives(group3):
    for errors in _ok(_get([a.call.remote(_bad_inputs, r) for r, a in enumerate(group3)])):
        long_complex = errors["long complex dtype"]
        assert long_complex[0] == "TypeError" and np.dtype(np.clongdouble).name in long_complex[1], errors
        assert errors["read-only"][0] == "ValueError" and "read-only" in errors["read-only"][1], errors
        assert errors["unknown group (pycoll.ray)"][0] == "ValueError", errors
        assert "group_name" in errors["unknown group (pycoll.ray)"][1], errors
        assert "no-such-group" in errors["unknown group (pycoll.ray)"][1], errors
        assert errors["unknown group (ray)"][0] == "RuntimeError", errors  # Ray's own check
        assert "no-such-group" in errors["unknown group (ray)"][1], errors
        assert errors["allgather list shape"][0] == "ValueError", errors
        assert "tensor_list[1]" in errors["allgather list shape"][1], errors
        assert errors["bad rank"][0] == "ValueError" and "rank" in errors["bad rank"][1], errors
        assert errors["bad timeout"][0] == "ValueError" and "timeout" in errors["bad timeout"][1], errors
        assert errors["bad backend"][0] == "BackendUnavailable" and "'nope'" in errors["bad backend"][1], errors
        assert errors["after"] == [6.0, 6.0, 6.0]


def _declared_allreduce(rank):
    from ray.util import collective as col
    x = np.arange(4, dtype=np.float64) * (rank + 1)
    col.allreduce(x, group_name="declared")  # the group is created here, from the driver's declaration
    group = col.get_group_handle("declared")
    return x.tolist(), type(group).__name__, col.get_rank("declared")


@pytest.mark.timeout(90)
def test_driver_side_create_collective_group_with_backend_pycoll(group3):
    from ray.util import collective as col
    actors = group3[:2]
    col.create_collective_group(actors, 2, [1, 0], backend=pray.BACKEND, group_name="declared")
    results = _ok(_get([a.call.remote(_declared_allreduce, r) for r, a in zip([1, 0], actors)]))
    for x, kind, rank in results:
        assert x == (np.arange(4) * 3.0).tolist() and kind == "PycollGroup"
    assert sorted(r for _, _, r in results) == [0, 1]
    _get([a.destroy.remote("declared") for a in actors])


def _allreduce_reporting(_):
    from ray.util import collective as col
    x = np.ones(1 << 16, dtype=np.float32)
    col.allreduce(x, group_name="dying")
    return float(x[0])


@pytest.mark.timeout(120)
def test_a_killed_actor_makes_the_others_raise_a_pycoll_error_within_the_deadline(group3):
    victim = make_actor_class().remote()
    actors = [*group3[:2], victim]
    try:
        _get(victim.ping.remote())  # its process is up before the others' rendezvous deadline runs
        _get([a.setup.remote(3, r, "dying", GROUP_TIMEOUT) for r, a in enumerate(actors)])
        # Ranks 0 and 1 enter an all-reduce; rank 2 is killed instead of joining.
        start = time.monotonic()
        refs = [a.call.remote(_allreduce_reporting, None) for a in actors[:2]]
        time.sleep(0.5)
        ray.kill(actors[2], no_restart=True)
        results = _get(refs)
        elapsed = time.monotonic() - start
        for status, value in results:
            assert status == "error", value
            name, message, seconds, mro = value
            assert "PycollError" in mro and name in ("PeerFailure", "Timeout", "CommunicatorClosed"), value
            assert seconds < GROUP_TIMEOUT + 10, value
        assert elapsed < GROUP_TIMEOUT + 20
        _get([a.destroy.remote("dying") for a in actors[:2]])
    finally:
        ray.kill(victim)


@pytest.mark.timeout(60)
def test_a_rank_whose_rank_0_never_comes_times_out(group3):
    status, value = _get(group3[0].call.remote(_join_alone, None))
    assert status == "error", value
    name, message, seconds, mro = value
    assert name == "Timeout" and "rank 0" in message and seconds < 10, value


def _join_alone(_):
    import pycoll.ray
    pycoll.ray.init_collective_group(2, 1, group_name="nobody-home", timeout=2.0)


@pytest.mark.timeout(90)
def test_a_stale_rendezvous_record_is_re_read_not_waited_on(group3):
    """A record left by an earlier group of the same name (its rank 0 died mid-rendezvous) points at a dead
    port: rank 1 reads it first, fails to connect within its short slice, re-reads, and joins the new group.
    The group forces pycoll's backend "tcp" (init_collective_group's options reach pycoll.init)."""
    import json
    import socket

    from ray.experimental import internal_kv
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]  # nothing listens there once closed
    internal_kv._internal_kv_put(pray._kv_key("stale"), json.dumps(
        {"addr": "127.0.0.1", "port": dead_port, "secret": "00" * 32, "job_id": "ray-stale-old"}).encode(),
        overwrite=True, namespace=pray._KV_NAMESPACE)
    actors = group3[:2]
    late = actors[1].setup.remote(2, 1, "stale", GROUP_TIMEOUT, "tcp")
    time.sleep(1.0)  # rank 1 is polling the stale record by now
    first = actors[0].setup.remote(2, 0, "stale", GROUP_TIMEOUT, "tcp")
    assert _get([first, late]) == [(0, 2), (1, 2)]
    assert _get([a.transport.remote("stale") for a in actors]) == ["tcp", "tcp"]
    assert internal_kv._internal_kv_get(pray._kv_key("stale"), namespace=pray._KV_NAMESPACE) is None
    _get([a.destroy.remote("stale") for a in actors])


def _torch_collectives(rank):
    import torch
    from ray.util import collective as col
    x = torch.arange(4, dtype=torch.float32) * (rank + 1)
    col.allreduce(x, group_name="g3")
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(3)]
    col.allgather(outs, torch.full((2,), rank, dtype=torch.int64), group_name="g3")
    b = torch.full((3,), rank + 1.0, dtype=torch.bfloat16)  # through DLPack: NumPy has no bfloat16
    col.allreduce(b, group_name="g3")
    return x.tolist(), [o.tolist() for o in outs], b.tolist()


@pytest.mark.timeout(60)
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_cpu_torch_tensors(group3):
    for x, outs, b in _ok(_get([a.call.remote(_torch_collectives, r) for r, a in enumerate(group3)])):
        assert x == (np.arange(4) * 6.0).tolist()
        assert outs == [[r, r] for r in range(3)]
        assert b == [6.0, 6.0, 6.0]


@pytest.mark.timeout(120)
def test_the_example_runs(cluster, tmp_path):
    # On the module's cluster, as on a user's running one: starting a cluster of its own would take most of the
    # test's time.
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_ADDRESS=cluster)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "ray_allreduce.py")], capture_output=True,
                          text=True, timeout=110, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "as expected" in done.stdout, done.stdout
