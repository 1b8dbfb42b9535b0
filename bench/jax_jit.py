"""pycoll.jax inside jax.jit against the same all-reduce called eagerly from Python and against JAX's own CPU
collectives (gloo), side by side in one run, at 2 ranks on this host: the per-call cost at 4 bytes and the
throughput at 16 MiB (float32 sum).

    python bench/jax_jit.py [--backend cpu] [--calls 2000] [--big-calls 20] [--repeats 7]
    python bench/jax_jit.py --breakdown      # one rank, in this process: where a 4-byte call's time goes

Starts 2 rank processes for pycoll (pycoll.init, PYCOLL_BACKEND) and then 2 for JAX's gloo collectives
(jax.distributed.initialize, jax_cpu_collectives_implementation=gloo, psum under shard_map over the two
processes' CPU devices). Each method runs `calls` back-to-back calls whose results feed the next call (so they
cannot overlap; every method averages, so the values stay 1), then waits for the last; the methods take turns
within each repeat, and the table gives the median over repeats of the mean time per call (rank 0's; ranks
wait for each other every call anyway).

Methods:
  jit pycoll.jax      y = f(y), f = jax.jit(lambda x: pycoll.jax.all_reduce(x, comm, op="avg"))
  jit pycoll.jax, donated  the same with jax.jit(..., donate_argnums=0): the all-reduce runs in place in y's
                      buffer (the custom call aliases its operand to its result)
  jit no collective   y = g(y), g = jax.jit(lambda x: x * 0.5 + 0.5): JAX's dispatch and a new output
                      array of the same size, for reference
  jit ordered io_callback  y = jax.jit(io_callback(identity, ..., ordered=True))(y): no collective, JAX's
                      cost for a compiled program with an ordered effect that leaves XLA (a Python callback)
  eager NumPy         comm.all_reduce(a, op="avg") on a NumPy array, in place (the fast path)
  eager async+wait    comm.all_reduce(a, op="avg", async_op=True).wait(): the progress-thread hand-off the
                      FFI handler uses (native/jax/ffi_handlers.c)
  eager from JAX      y = jnp.asarray(comm.all_reduce(np.array(y), op="avg")): a JAX array out of jit and back
  jit gloo psum       y = h(y), h = jax.jit(shard_map(pmean)) over the 2 processes' devices
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SMALL = 1                      # float32 elements: 4 B
BIG = 16 * 1024 * 1024 // 4    # 16 MiB


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mean_us(fn, y, calls, block):
    block(y)
    start = time.perf_counter()
    for _ in range(calls):
        y = fn(y)
    block(y)
    return (time.perf_counter() - start) / calls * 1e6, y


def pycoll_rank(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import pycoll
    import pycoll.jax as pj

    comm = pycoll.init(timeout=120)
    block = jax.block_until_ready
    # op="avg" keeps the values at 1 however many calls are chained (every method averages).
    f = jax.jit(lambda x: pj.all_reduce(x, comm, op="avg"))
    fd = jax.jit(lambda x: pj.all_reduce(x, comm, op="avg"), donate_argnums=0)
    g = jax.jit(lambda x: x * 0.5 + 0.5)
    from jax.experimental import io_callback
    io = jax.jit(lambda x: io_callback(lambda v: v, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True))

    def eager_numpy(a):
        comm.all_reduce(a, op="avg")
        return a

    def eager_async(a):
        comm.all_reduce(a, op="avg", async_op=True).wait()
        return a

    def eager_from_jax(y):
        return jnp.asarray(comm.all_reduce(np.array(y), op="avg"))

    results = {}
    for label, count, calls in (("4 B", SMALL, args.calls), ("16 MiB", BIG, args.big_calls)):
        methods = {
            "jit pycoll.jax": (f, jnp.ones(count, jnp.float32), block),
            "jit pycoll.jax, donated": (fd, jnp.ones(count, jnp.float32), block),
            "jit no collective": (g, jnp.ones(count, jnp.float32), block),
            "jit ordered io_callback": (io, jnp.ones(count, jnp.float32), block),
            "eager NumPy": (eager_numpy, np.ones(count, np.float32), lambda a: None),
            "eager async+wait": (eager_async, np.ones(count, np.float32), lambda a: None),
            "eager from JAX": (eager_from_jax, jnp.ones(count, jnp.float32), block),
        }
        state = {name: m[1] for name, m in methods.items()}
        samples = {name: [] for name in methods}
        for name, (fn, _, blk) in methods.items():  # warm up: compile, connect, first touch
            _, state[name] = mean_us(fn, state[name], max(2, calls // 10), blk)
        for _ in range(args.repeats):
            for name, (fn, _, blk) in methods.items():
                comm.barrier()
                t, state[name] = mean_us(fn, state[name], calls, blk)
                samples[name].append(t)
        results[label] = {name: statistics.median(s) for name, s in samples.items()}
        # The sums are right, not only fast.
        check = np.asarray(f(jnp.full(count, comm.rank + 1.0, jnp.float32)))
        if not np.all(check == sum(range(1, comm.size + 1)) / comm.size):
            raise SystemExit(f"rank {comm.rank}: pycoll.jax all_reduce gave a wrong sum at {label}")
    comm.close()
    return {"rank": comm.rank, "results": results, "backend": comm.backend}


def gloo_rank(args):
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{os.environ['MASTER_PORT']}", num_processes=size,
                               process_id=rank, initialization_timeout=60)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("r",))
    sharding = NamedSharding(mesh, P("r"))
    h = jax.jit(jax.shard_map(lambda x: jax.lax.pmean(x, "r"), mesh=mesh, in_specs=P("r"), out_specs=P("r")))

    def global_array(local):
        return jax.make_array_from_process_local_data(sharding, local)

    results = {}
    for label, count, calls in (("4 B", SMALL, args.calls), ("16 MiB", BIG, args.big_calls)):
        y = global_array(np.ones(count, np.float32))
        _, y = mean_us(h, y, max(2, calls // 10), jax.block_until_ready)
        samples = []
        for _ in range(args.repeats):
            t, y = mean_us(h, y, calls, jax.block_until_ready)
            samples.append(t)
        results[label] = {"jit gloo psum": statistics.median(samples)}
        check = h(global_array(np.full(count, rank + 1.0, np.float32)))
        local = np.asarray(check.addressable_shards[0].data)
        if not np.all(local == sum(range(1, size + 1)) / size):
            raise SystemExit(f"rank {rank}: gloo psum gave a wrong sum at {label}")
    jax.distributed.shutdown()
    return {"rank": rank, "results": results}


def breakdown(args):
    """One rank in this process (no peer to wait for): where a jitted 4-byte call's time goes."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import io_callback

    import pycoll
    import pycoll.jax as pj

    warnings.simplefilter("ignore")  # a world of one warns that it is one
    comm = pycoll.init(backend=args.backend, rank=0, world_size=1, master_addr="127.0.0.1",
                       master_port=free_port())
    handle = comm._engine.native.handle

    def unordered(x):  # the same handler, without the ordered effect (no token: not ordered across calls)
        return jax.ffi.ffi_call("pycoll_all_reduce", jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True)(
            x, comm=np.int64(handle), op=np.int64(4), root=np.int64(0), accuracy=np.int64(0),
            algorithm=np.int64(0))

    cases = {
        "jit x * 0.5 + 0.5": jax.jit(lambda x: x * 0.5 + 0.5),
        "jit unordered FFI call to pycoll's handler": jax.jit(unordered),
        "jit pycoll.jax.all_reduce (ordered)": jax.jit(lambda x: pj.all_reduce(x, comm, op="avg")),
        "jit io_callback(identity, ordered=True)": jax.jit(lambda x: io_callback(
            lambda v: v, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)),
    }
    samples = {name: [] for name in cases}
    state = {name: jnp.ones(SMALL, jnp.float32) for name in cases}
    for name, fn in cases.items():
        _, state[name] = mean_us(fn, state[name], max(2, args.calls // 10), jax.block_until_ready)
    for _ in range(args.repeats):
        for name, fn in cases.items():
            t, state[name] = mean_us(fn, state[name], args.calls, jax.block_until_ready)
            samples[name].append(t)
    comm.close()
    print(f"jax {jax.__version__}; 1 rank ({args.backend}); 4 B; {args.repeats} repeats of {args.calls} calls")
    print("\n| call (1 rank, 4 B) | us per call |\n|---|---:|")
    for name in cases:
        print(f"| {name} | {statistics.median(samples[name]):.1f} |")


def run_ranks(mode, n, args, backend):
    port = free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYCOLL_BACKEND=backend, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, __file__, "--rank-mode", mode, "--calls", str(args.calls),
               "--big-calls", str(args.big_calls), "--repeats", str(args.repeats)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    reports = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=args.deadline)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                return None, err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
            reports.append(json.loads(lines[-1]))
    except subprocess.TimeoutExpired:
        return None, f"no result within {args.deadline} s"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return reports, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--calls", type=int, default=2000, help="calls per sample at 4 B")
    parser.add_argument("--big-calls", type=int, default=20, help="calls per sample at 16 MiB")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds for each job of 2 ranks")
    parser.add_argument("--breakdown", action="store_true",
                        help="instead: one rank in this process, where a jitted 4-byte call's time goes")
    parser.add_argument("--rank-mode", choices=["pycoll", "gloo"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_mode:
        report = pycoll_rank(args) if args.rank_mode == "pycoll" else gloo_rank(args)
        print(json.dumps(report), flush=True)
        return

    if args.breakdown:
        breakdown(args)
        return
    import jax
    pycoll_reports, why = run_ranks("pycoll", 2, args, args.backend)
    if pycoll_reports is None:
        raise SystemExit(f"the pycoll ranks failed: {why}")
    gloo_reports, gloo_why = run_ranks("gloo", 2, args, args.backend)
    rows = pycoll_reports[0]["results"]
    for label in rows:
        if gloo_reports:
            rows[label].update(gloo_reports[0]["results"][label])
    print(f"jax {jax.__version__}; pycoll backend {pycoll_reports[0]['backend']}; 2 ranks; "
          f"{args.repeats} repeats, {args.calls} calls (4 B) / {args.big_calls} calls (16 MiB) each")
    if gloo_reports is None:
        print(f"jax gloo collectives did not run here: {gloo_why}")
    methods = ["jit pycoll.jax", "jit pycoll.jax, donated", "jit no collective", "jit ordered io_callback",
               "eager NumPy", "eager async+wait", "eager from JAX", "jit gloo psum"]
    print("\n| method | 4 B: us per call | 16 MiB: ms per call | 16 MiB: GB/s (algbw) |")
    print("|---|---:|---:|---:|")
    for m in methods:
        small, big = rows["4 B"].get(m), rows["16 MiB"].get(m)
        if small is None:
            print(f"| {m} | - | - | - |")
            continue
        print(f"| {m} | {small:.1f} | {big / 1e3:.2f} | {16 * 1024 * 1024 / (big * 1e-6) / 1e9:.2f} |")
    base = rows["4 B"]["jit pycoll.jax"], rows["16 MiB"]["jit pycoll.jax"]
    print("\nRatios (other method's time / jit pycoll.jax's; > 1: pycoll.jax is faster):")
    for m in methods[1:]:
        if m in rows["4 B"]:
            print(f"- {m}: 4 B {rows['4 B'][m] / base[0]:.2f}x, 16 MiB {rows['16 MiB'][m] / base[1]:.2f}x")


if __name__ == "__main__":
    main()
