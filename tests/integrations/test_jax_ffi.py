"""pycoll.jax: pycoll collectives inside jax.jit through XLA FFI custom calls (native/jax/ffi_handlers.c).

Multi-process tests start real ranks on 127.0.0.1 running this file as a script (`python test_jax_ffi.py
SCENARIO`, the worker at the bottom); each rank prints one JSON line that the test checks. The single-rank
tests run in the test process itself."""

import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

HAVE_JAX = importlib.util.find_spec("jax") is not None and importlib.util.find_spec("jaxlib") is not None
# jaxlib aborts at import under the ASan runtime (.ci/sanitize.sh preloads it: its __cxa_throw interceptor finds
# no real __cxa_throw), so there only the tests that need no jax run.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")

if __name__ != "__main__":
    from multiproc import Ranks, free_port

# Every test but the two that drive the C handlers directly with ctypes (those need no jax: they run in the
# sanitizer build too).
needs_jax = pytest.mark.skipif(not HAVE_JAX or UNDER_ASAN,
                               reason="jaxlib cannot load under ASan" if UNDER_ASAN else
                               "jax is not installed (pip install \".[jax]\")")


# ---- in-process tests: one rank (the solo fixture: integrations/conftest.py) ------------------------------
@pytest.mark.timeout(60)
@needs_jax
def test_a_program_compiled_with_a_closed_communicator_raises_instead_of_using_freed_memory():
    import jax
    import jax.numpy as jnp

    import pycoll
    import pycoll.jax as pj

    comm = pycoll.init(backend="tcp", rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port(),
                       timeout=20)
    f = jax.jit(lambda x: pj.all_reduce(x, comm))
    np.testing.assert_array_equal(f(jnp.ones(3)), np.ones(3))  # compiled with comm's id
    comm.close()
    # Another communicator now, which may get the freed one's address: the compiled program must not reach it.
    other = pycoll.init(backend="tcp", rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port(),
                        timeout=20)
    try:
        with pytest.raises(Exception, match="pycoll closed: .*is closed") as caught:
            jax.block_until_ready(f(jnp.ones(3)))
        with pytest.raises(pycoll.CommunicatorClosed):
            pj.raise_pycoll_error(caught.value)
    finally:
        other.close()


@pytest.mark.timeout(60)
@needs_jax
def test_single_rank_every_collective_inside_jit(solo):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj

    x = jnp.arange(12, dtype=jnp.float32).reshape(4, 3) - 5

    @jax.jit
    def f(x):
        return (pj.all_reduce(x * 2, solo), pj.all_reduce(x, solo, op="max"), pj.broadcast(x + 1, solo),
                pj.reduce(x, solo), pj.all_gather(x, solo), pj.all_gather(x, solo, tiled=True),
                pj.reduce_scatter(x[None], solo), pj.reduce_scatter(x, solo, tiled=True), pj.all_to_all(x, solo))

    ar, mx, bc, rd, ag, agt, rs, rst, a2a = f(x)
    xn = np.asarray(x)
    np.testing.assert_array_equal(ar, xn * 2)
    np.testing.assert_array_equal(mx, xn)
    np.testing.assert_array_equal(bc, xn + 1)
    np.testing.assert_array_equal(rd, xn)
    assert ag.shape == (1, 4, 3) and agt.shape == (4, 3) and rs.shape == (4, 3) and rst.shape == (4, 3)
    np.testing.assert_array_equal(ag[0], xn)
    np.testing.assert_array_equal(rs, xn)
    np.testing.assert_array_equal(a2a, xn)
    # Inside control flow and remat, and under vmap for the elementwise ones.
    loop = jax.jit(lambda v: jax.lax.fori_loop(0, 3, lambda i, w: pj.all_reduce(w, solo) + 1, v))
    np.testing.assert_array_equal(loop(jnp.zeros(2)), [3, 3])
    branch = jax.jit(lambda v: jax.lax.cond(v[0] > 0, lambda w: pj.all_reduce(w, solo) * 2, lambda w: w, v))
    np.testing.assert_array_equal(branch(jnp.ones(2)), [2, 2])
    remat = jax.jit(jax.grad(jax.checkpoint(lambda v: jnp.sum(jnp.sin(pj.all_reduce(v, solo))))))
    np.testing.assert_allclose(remat(jnp.ones(2)), np.cos(np.ones(2)), rtol=1e-6)
    np.testing.assert_array_equal(jax.vmap(lambda v: pj.broadcast(v, solo))(x), xn)
    with pytest.raises(NotImplementedError, match="vmap"):
        jax.vmap(lambda v: pj.all_to_all(v, solo))(x[:, :, None])
    # Outside jit too (the primitive compiles itself).
    np.testing.assert_array_equal(pj.all_reduce(jnp.ones(3, jnp.int32), solo), np.ones(3, np.int32))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "float16", "bfloat16", "float32"])
@needs_jax
def test_single_rank_dtypes(solo, dtype):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj
    x = jnp.arange(7).astype(dtype)
    got = jax.jit(lambda v: pj.all_reduce(v, solo, op="sum"))(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), np.arange(7))


@pytest.mark.timeout(60)
@needs_jax
def test_collectives_are_threaded_on_one_token_in_program_order(solo):
    # Ordering is carried by a token: each custom call takes the previous call's token and returns the next, so
    # XLA cannot reorder them whatever their data dependencies. Independent collectives, listed in the lowered
    # module in the order the function made them, each consuming the token the one before produced.
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj

    def f(x, y):
        b = pj.broadcast(y, solo)          # 1st
        a = pj.all_reduce(x, solo)         # 2nd
        c = pj.all_gather(y, solo)         # 3rd
        return c, a, b
    text = jax.jit(f).lower(jnp.ones(3), jnp.ones(2)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call @pycoll_" in line]
    assert [c.split("@pycoll_")[1].split("(")[0] for c in calls] == ["broadcast", "all_reduce", "all_gather"]
    tokens = []
    for line in calls:
        result = line.split("=")[0].strip()            # "%0:2"
        operand = line.split("(")[1].split(",")[0]     # the token operand
        assert "!stablehlo.token" in line.split(":")[-1], line
        tokens.append((result.split(":")[0], operand))
    for (prev_result, _), (_, operand) in zip(tokens, tokens[1:]):
        assert operand == f"{prev_result}#0", (prev_result, operand)
    assert all("has_side_effect = true" in c for c in calls)


@pytest.mark.timeout(60)
@needs_jax
def test_single_rank_gradients_follow_the_transpose_rules(solo):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj
    x = jnp.arange(6.0).reshape(2, 3)
    w = jnp.linspace(-1, 1, 6).reshape(2, 3)
    for fn in (lambda v: pj.all_reduce(v, solo), lambda v: pj.all_reduce(v, solo, op="avg"),
               lambda v: pj.broadcast(v, solo), lambda v: pj.reduce(v, solo),
               lambda v: pj.all_gather(v, solo, tiled=True), lambda v: pj.reduce_scatter(v, solo, tiled=True),
               lambda v: pj.all_to_all(v, solo)):
        g = jax.jit(jax.grad(lambda v: jnp.sum(fn(v) * w)))(x)
        np.testing.assert_allclose(g, w)  # every one is the identity at one rank
        jv = jax.jvp(fn, (x,), (w,))[1]
        np.testing.assert_allclose(jv, w)
    with pytest.raises(NotImplementedError, match="max"):
        jax.grad(lambda v: jnp.sum(pj.all_reduce(v, solo, op="max")))(x)


@pytest.mark.timeout(60)
@needs_jax
def test_bad_arguments_raise_typed_errors_naming_them(solo):
    import jax.numpy as jnp

    import pycoll
    import pycoll.jax as pj
    x = jnp.ones(4)
    with pytest.raises(TypeError, match="comm"):
        pj.all_reduce(x, "not a communicator")
    with pytest.raises(TypeError, match="x.*complex64"):
        pj.all_reduce(jnp.ones(3, jnp.complex64), solo)
    with pytest.raises(TypeError, match="x.*bool"):
        pj.all_reduce(jnp.ones(3, bool), solo)
    with pytest.raises(ValueError, match="op"):
        pj.all_reduce(x, solo, op="xor")
    with pytest.raises(ValueError, match="accuracy"):
        pj.all_reduce(x, solo, accuracy="exact")
    with pytest.raises(ValueError, match="root"):
        pj.broadcast(x, solo, root=1)
    with pytest.raises(TypeError, match="root"):
        pj.broadcast(x, solo, root=0.0)
    with pytest.raises(ValueError, match="x.*leading dimension"):
        pj.reduce_scatter(jnp.ones((2, 3)), solo)       # tiled=False: leading dimension must be 1 rank
    with pytest.raises(ValueError, match="x"):
        pj.all_to_all(jnp.float32(1), solo)
    # A vendor-backed communicator (its collectives do not run in libpycoll): TypeError naming comm.
    from pycoll.comm import Communicator
    vendor = Communicator.__new__(Communicator)
    vendor._engine = types.SimpleNamespace()           # what a NCCL/HCCL engine has: no native communicator
    vendor._backend = types.SimpleNamespace(name="nccl")
    with pytest.raises(TypeError, match="comm.*'nccl'"):
        pj.all_reduce(x, vendor)
    # A closed communicator.
    closed = pycoll.init(backend="tcp", rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port())
    closed.close()
    with pytest.raises(pycoll.CommunicatorClosed):
        pj.all_reduce(x, closed)


@pytest.mark.timeout(60)
def test_without_jax_import_says_what_to_install(tmp_path):
    # A jax that cannot be imported: pycoll.jax raises BackendUnavailable naming the extra.
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise ImportError('No module named jax (hidden by the test)')\n")
    code = ("import pycoll\n"
            "try:\n    import pycoll.jax\nexcept pycoll.BackendUnavailable as e:\n    print('OK', e)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50,
                         cwd=tmp_path)  # outside the source tree: its uncompiled pycoll/ would shadow the install
    assert out.stdout.startswith("OK") and 'pip install "pycoll-collectives[jax]"' in out.stdout, \
        out.stdout + out.stderr


# ---- the C handlers against call frames of the wrong shape (a mismatched jaxlib) ---------------------------------
def _frame_kit():
    """ctypes mirrors of the FFI structs the handlers read (native/jax/xla_ffi_subset.h), a fake XLA_FFI_Api whose
    Error_Create records the message, and the all_reduce handler as a C function."""
    import ctypes as C

    from pycoll._bindings import jax_ffi

    class Version(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("major", C.c_int), ("minor", C.c_int)]

    class ErrorArgs(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("message", C.c_char_p), ("errc", C.c_int)]

    create_t = C.CFUNCTYPE(C.c_void_p, C.POINTER(ErrorArgs))

    class Api(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("version", Version),
                    ("internal", C.c_void_p), ("error_create", create_t)]

    class List(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("size", C.c_int64),
                    ("types", C.c_void_p), ("items", C.c_void_p)]

    class Attrs(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("size", C.c_int64),
                    ("types", C.c_void_p), ("names", C.c_void_p), ("attrs", C.c_void_p)]

    class Frame(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("ext", C.c_void_p), ("api", C.POINTER(Api)), ("ctx", C.c_void_p),
                    ("stage", C.c_int32), ("args", List), ("rets", List), ("attrs", Attrs)]

    class Extension(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("type", C.c_int32), ("next", C.c_void_p)]

    class Metadata(C.Structure):
        _fields_ = [("struct_size", C.c_size_t), ("version", Version), ("traits", C.c_uint32)]

    class MetadataExtension(C.Structure):
        _fields_ = [("base", Extension), ("metadata", C.POINTER(Metadata))]

    messages = []

    @create_t
    def error_create(args):
        messages.append((args.contents.message.decode(), args.contents.errc))
        return 1  # any non-NULL pointer: the handler only passes it back

    get = C.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = C.c_void_p, [C.py_object, C.c_char_p]
    handler = C.CFUNCTYPE(C.c_void_p, C.POINTER(Frame))(get(jax_ffi.handler("all_reduce"), None))

    def frame(major=0):
        api = Api(struct_size=C.sizeof(Api), version=Version(C.sizeof(Version), None, major, 3),
                  error_create=error_create)
        f = Frame(struct_size=C.sizeof(Frame), api=C.pointer(api), stage=3)
        for part in (f.args, f.rets):
            part.struct_size = C.sizeof(List)
        f.attrs.struct_size = C.sizeof(Attrs)
        f._keep = api
        return f

    return types.SimpleNamespace(C=C, handler=handler, frame=frame, messages=messages, Extension=Extension,
                                 Metadata=Metadata, MetadataExtension=MetadataExtension, Version=Version)


@pytest.mark.timeout(60)
def test_handler_refuses_call_frames_of_another_ffi_version_with_a_message():
    k = _frame_kit()
    C = k.C
    f = k.frame(major=1)  # an FFI API of another major version
    assert k.handler(C.byref(f)) == 1
    assert "FFI API is version 1.3" in k.messages[-1][0], k.messages
    f = k.frame()
    f.struct_size = 24  # a call frame older than the one the handlers were written against
    assert k.handler(C.byref(f)) == 1
    assert "call frame is smaller" in k.messages[-1][0], k.messages
    f = k.frame()
    f.args.struct_size = 8
    assert k.handler(C.byref(f)) == 1
    assert "argument lists are smaller" in k.messages[-1][0], k.messages
    f = k.frame()  # well formed, but no arrays and no `comm`: refused, nothing called
    assert k.handler(C.byref(f)) == 1
    assert "one array argument and one array result" in k.messages[-1][0], k.messages
    f = k.frame()
    f.stage = 0
    assert k.handler(C.byref(f)) == 1
    assert "unexpected stage" in k.messages[-1][0], k.messages


@pytest.mark.timeout(60)
def test_handler_answers_the_metadata_query_with_its_ffi_version():
    k = _frame_kit()
    C = k.C
    meta = k.Metadata(struct_size=C.sizeof(k.Metadata))
    ext = k.MetadataExtension(base=k.Extension(C.sizeof(k.MetadataExtension), 1, None), metadata=C.pointer(meta))
    f = k.frame()
    f.ext = C.addressof(ext)
    count = len(k.messages)
    assert k.handler(C.byref(f)) is None and len(k.messages) == count  # success: no error created
    assert (meta.version.major, meta.version.minor, meta.traits) == (0, 3, 0)
    meta.struct_size = 8  # a metadata struct too small to hold the answer
    assert k.handler(C.byref(f)) == 1
    assert "metadata query has an unexpected layout" in k.messages[-1][0], k.messages


# ---- multi-process tests -------------------------------------------------------------------------------------
def _job(n, scenario, backend, timeout=20.0, ranks=None):
    with Ranks(n, os.path.abspath(__file__), scenario, timeout=timeout,
               env={"PYCOLL_BACKEND": backend, "JAX_PLATFORMS": "cpu"}) as job:
        return job.reports(ranks=ranks, deadline_s=90)


@pytest.mark.timeout(120)
@needs_jax
def test_three_ranks_collectives_order_and_gradients_inside_jit():
    reports = _job(3, "collectives", "cpu")
    for rank, rep in reports.items():
        assert rep["failures"] == [], (rank, rep["failures"])
        assert rep["checked"] >= 20, rep  # every check ran


@pytest.mark.timeout(120)
@needs_jax
def test_mismatch_and_dead_peer_come_back_as_errors_naming_the_problem():
    reports = _job(2, "faults", "tcp", timeout=10.0)
    for rank, rep in reports.items():
        # Ranks disagree on the element count: each rank's jitted call raises pycoll's mismatch message.
        assert "mismatch" in rep["mismatch"] and "float32 x 4" in rep["mismatch"], rep
        assert "float32 x 5" in rep["mismatch"], rep  # both sides named
        assert rep["mismatch_type"] == "MismatchError", rep
    # After the mismatch every rank's communicator is broken: the next jitted collective fails at once.
    for rep in reports.values():
        assert rep["after"] in ("CommunicatorClosed", "MismatchError", "PeerFailure"), rep


@pytest.mark.timeout(120)
@needs_jax
def test_a_dead_peer_fails_the_jitted_call_instead_of_hanging():
    reports = _job(2, "dead_peer", "tcp", timeout=10.0, ranks=[0])  # rank 1 dies on purpose
    rep = reports[0]
    assert rep["type"] in ("PeerFailure", "Timeout"), rep
    assert "rank 1" in rep["message"] or "peer" in rep["message"].lower(), rep
    assert rep["seconds"] < 15, rep


# ---- the worker: one rank of a multi-process test --------------------------------------------------------------
def _worker(scenario):
    import time

    import jax
    import jax.numpy as jnp

    import pycoll
    import pycoll.jax as pj

    timeout = float(os.environ.get("TEST_TIMEOUT", "20"))
    comm = pycoll.init(timeout=timeout)
    rank, size = comm.rank, comm.size
    report = {"rank": rank}
    failures = []
    checked = 0

    def check(name, got, want, exact=True):
        nonlocal checked
        checked += 1
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape and (np.array_equal(got, want) if exact else
                                          np.allclose(got, want, rtol=1e-5, atol=1e-6))
        if not ok:
            failures.append(f"{name}: got {got.tolist()} want {want.tolist()}")

    def data(r, shape, dtype=np.float32):
        n = int(np.prod(shape))
        return (np.arange(n) % 11 + 3 * r - 4).astype(dtype).reshape(shape)

    if scenario == "collectives":
        shape = (size * 2, 3)
        mine = data(rank, shape)
        every = [data(r, shape) for r in range(size)]

        @jax.jit
        def step(x):
            return (pj.all_reduce(x, comm), pj.all_reduce(x, comm, op="max"), pj.all_reduce(x, comm, op="avg"),
                    pj.reduce_scatter(x, comm, tiled=True), pj.all_gather(x[:2], comm),
                    pj.all_gather(x[:2], comm, tiled=True), pj.broadcast(x, comm, root=1),
                    pj.reduce(x, comm, root=2), pj.all_to_all(x, comm))

        ar, mx, avg, rs, ag, agt, bc, rd, a2a = step(jnp.asarray(mine))
        total = sum(every)
        check("all_reduce sum", ar, total)
        check("all_reduce max", mx, np.maximum.reduce(every))
        check("all_reduce avg", avg, total / size, exact=False)
        check("reduce_scatter", rs, total[rank * 2:(rank + 1) * 2])
        check("all_gather", ag, np.stack([e[:2] for e in every]))
        check("all_gather tiled", agt, np.concatenate([e[:2] for e in every]))
        check("broadcast", bc, every[1])
        check("reduce", rd, total if rank == 2 else np.zeros(shape))
        check("all_to_all", a2a, np.concatenate([every[r][rank * 2:(rank + 1) * 2] for r in range(size)]))

        # Integer and half types, exact.
        for dtype in ("int32", "bfloat16", "float16", "int8"):
            xi = data(rank, (5,), np.float32)
            got = jax.jit(lambda v: pj.all_reduce(v, comm))(jnp.asarray(xi).astype(dtype))
            check(f"all_reduce {dtype}", got, sum(data(r, (5,), np.float32) for r in range(size)))
            assert str(got.dtype) == dtype

        # Order: the same collectives in the same program order, but each rank passes its arguments and takes its
        # results in a different order (a different HLO per rank). Only the token keeps their order the same.
        p = data(rank, (5,))
        q = data(rank, (7,))

        def body(p, q):
            a = pj.all_reduce(p, comm)
            b = pj.all_gather(q, comm, tiled=True)
            c = pj.broadcast(q * 2, comm, root=0)
            return a, b, c
        if rank % 2:
            a, b, c = jax.jit(lambda q, p: body(p, q)[::-1])(q, p)[::-1]
        else:
            a, b, c = jax.jit(body)(p, q)
        check("ordered all_reduce", a, sum(data(r, (5,)) for r in range(size)))
        check("ordered all_gather", b, np.concatenate([data(r, (7,)) for r in range(size)]))
        check("ordered broadcast", c, data(0, (7,)) * 2)

        # Separate jitted calls dispatched back to back without waiting (JAX runs them asynchronously): the
        # ordered effect's runtime token keeps them in call order.
        f1 = jax.jit(lambda v: pj.all_reduce(v, comm))
        f2 = jax.jit(lambda v: pj.broadcast(v, comm, root=size - 1))
        outs = [f(jnp.asarray(data(rank, (4,)) + i)) for i, f in enumerate([f1, f2, f1, f2, f1])]
        for i, out in enumerate(outs):
            want = (sum(data(r, (4,)) + i for r in range(size)) if i % 2 == 0 else data(size - 1, (4,)) + i)
            check(f"async call {i}", out, want)
        # And an eager pycoll call after them is in order too (it waits for the jitted ones).
        jax.block_until_ready(outs)
        z = data(rank, (3,)).astype(np.float64)
        comm.all_reduce(z)
        check("eager after jit", z, sum(data(r, (3,)) for r in range(size)))

        # A split: ranks of equal parity, in one jitted function with a collective on the whole job.
        half = comm.split(rank % 2)
        both = jax.jit(lambda v: (pj.all_reduce(v, half), pj.all_reduce(v, comm)))(jnp.asarray(data(rank, (4,))))
        check("split all_reduce", both[0], sum(data(r, (4,)) for r in range(size) if r % 2 == rank % 2))
        check("root after split", both[1], sum(data(r, (4,)) for r in range(size)))

        # Gradients through jit, against their closed forms.
        w = [data(r, (6,)) / 7 for r in range(size)]
        x6 = jnp.asarray(data(rank, (6,)))

        def grad(fn):
            return jax.jit(jax.grad(lambda v: jnp.sum(fn(v) * w[rank])))(x6)
        check("grad all_reduce", grad(lambda v: pj.all_reduce(v, comm)), sum(w), exact=False)
        check("grad all_reduce avg", grad(lambda v: pj.all_reduce(v, comm, op="avg")), sum(w) / size, exact=False)
        check("grad broadcast", grad(lambda v: pj.broadcast(v, comm, root=1)),
              sum(w) if rank == 1 else np.zeros(6), exact=False)
        check("grad reduce", grad(lambda v: pj.reduce(v, comm, root=0)), w[0], exact=False)
        wg = [data(r, (6 * size,)) / 5 for r in range(size)]
        gx = jax.jit(jax.grad(lambda v: jnp.sum(pj.all_gather(v, comm, tiled=True) * wg[rank])))(x6)
        check("grad all_gather", gx, sum(wg)[rank * 6:(rank + 1) * 6], exact=False)
        xs = jnp.asarray(data(rank, (2 * size,)))
        ws = [data(r, (2,)) / 3 for r in range(size)]
        gs = jax.jit(jax.grad(lambda v: jnp.sum(pj.reduce_scatter(v, comm, tiled=True) * ws[rank])))(xs)
        check("grad reduce_scatter", gs, np.concatenate(ws), exact=False)
        gt = jax.jit(jax.grad(lambda v: jnp.sum(pj.all_to_all(v, comm) * ws[rank].repeat(size))))(xs)
        check("grad all_to_all", gt, np.concatenate([ws[r].repeat(size)[rank * 2:(rank + 1) * 2]
                                                     for r in range(size)]), exact=False)
        # A training step: gradient of a loss on this rank's data, averaged over the ranks, inside one jit.
        wt = jnp.ones(3)

        @jax.jit
        def train_step(wt, xb):
            g = jax.grad(lambda wt: jnp.mean((xb @ wt - 1.0) ** 2))(wt)
            return wt - 0.1 * pj.all_reduce(g, comm, op="avg")
        xb = jnp.asarray(data(rank, (4, 3)) / 10)
        new = train_step(wt, xb)
        want = np.ones(3) - 0.1 * np.mean([np.asarray(jax.grad(lambda wt: jnp.mean((jnp.asarray(
            data(r, (4, 3)) / 10) @ wt - 1.0) ** 2))(wt)) for r in range(size)], axis=0)
        check("train step", new, want, exact=False)
        everyone = comm.all_gather_object(np.asarray(new).tolist())
        check("train step same on every rank", np.asarray(everyone), np.asarray([everyone[0]] * size))

    elif scenario == "faults":
        n = 4 + rank  # the ranks disagree on the element count
        try:
            jax.block_until_ready(jax.jit(lambda v: pj.all_reduce(v, comm))(jnp.ones(n)))
            report["mismatch"] = "no error"
            report["mismatch_type"] = None
        except Exception as exc:  # noqa: BLE001 -- the jitted call's error, converted below
            report["mismatch"] = str(exc)
            try:
                pj.raise_pycoll_error(exc)
            except pycoll.PycollError as typed:
                report["mismatch_type"] = type(typed).__name__
            except Exception as other:  # noqa: BLE001
                report["mismatch_type"] = type(other).__name__
        try:
            jax.block_until_ready(jax.jit(lambda v: pj.all_reduce(v, comm) + 1)(jnp.ones(3)))
            report["after"] = "no error"
        except Exception as exc:  # noqa: BLE001
            try:
                pj.raise_pycoll_error(exc)
            except Exception as typed:  # noqa: BLE001
                report["after"] = type(typed).__name__

    elif scenario == "dead_peer":
        if rank == 1:
            comm.barrier()
            os._exit(0)  # dies without closing
        comm.barrier()
        time.sleep(0.5)
        start = time.monotonic()
        try:
            jax.block_until_ready(jax.jit(lambda v: pj.all_reduce(v, comm))(jnp.ones(1000)))
            report["type"] = "no error"
            report["message"] = ""
        except Exception as exc:  # noqa: BLE001
            report["message"] = str(exc)
            try:
                pj.raise_pycoll_error(exc)
            except Exception as typed:  # noqa: BLE001
                report["type"] = type(typed).__name__
        report["seconds"] = time.monotonic() - start

    report["failures"] = failures
    report["checked"] = checked
    print(json.dumps(report), flush=True)
    try:
        comm.close()
    except pycoll.PycollError:
        pass  # a broken communicator (the fault scenarios) may report its error again at close
    os._exit(0)


if __name__ == "__main__":
    _worker(sys.argv[1])
