"""Produce bench/results/allreduce_loopback.md: pycoll's all-reduce (every algorithm and auto) against gloo
and Open MPI (TCP) on this machine over loopback, measured side by side in one run with the same method,
plus the raw socket latency floor and bandwidth ceiling.

    python bench/allreduce_peers.py [--worlds 2,4] [-b 4] [-e 64M] [-f 4] [--out bench/results/allreduce_loopback.md]
"""

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pycoll.tools.bench import raw_socket, sweep

ALGORITHMS = ("auto", "ring", "halving_doubling", "mesh", "recursive_doubling")


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if shutil.which("lscpu") else ""
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    versions = []
    # pycoll's distribution is pycoll-collectives ("pycoll" on the package index is another project).
    for pkg, dist in (("pycoll", "pycoll-collectives"), ("numpy", "numpy"), ("torch", "torch"), ("mpi4py", "mpi4py")):
        try:
            versions.append(f"{pkg} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{pkg} not installed")
    mpirun = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0] \
        if shutil.which("mpirun") else "mpirun not installed"
    return (f"- CPU: {model}, {os.cpu_count()} logical cores; {platform.platform()}\n"
            f"- Python {platform.python_version()}; {'; '.join(versions)}; {mpirun}")


def sweep_rows(world, args, json_path):
    cmd = [sys.executable, "-m", "pycoll", "bench", "-n", str(world), "--backend", "tcp", "-b", args.b, "-e", args.e,
           "-f", str(args.f), "-d", "float32", "-o", "sum", "--algorithm", "all", "--out-of-place",
           "--compare", "gloo,mpi-tcp",
           "--json", str(json_path)]
    print("$", " ".join(cmd[2:]), flush=True)
    # PYTHONSAFEPATH: from a source checkout's root, `-m pycoll` must still import the installed package.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"pycoll bench exited with {proc.returncode}")
    skipped = [ln for ln in proc.stdout.splitlines() if "--compare" in ln]
    return json.loads(Path(json_path).read_text()), skipped, " ".join(["pycoll", *cmd[4:-2]])


def _fmt_size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def world_table(rows, world):
    columns = [f"pycoll {a}" for a in ALGORITHMS] + ["gloo", "Open MPI"]

    def column(r):
        return {"gloo": "gloo", "mpi-tcp": "Open MPI"}.get(r["backend"], f"pycoll {r['algorithm']}")

    by_size = {}
    for r in rows:
        if r["world"] == world:
            by_size.setdefault(r["bytes"], {})[column(r)] = r
    lines = [f"### {world} ranks: time (us, slowest rank's median) / busbw (GB/s)", "",
             "| size | " + " | ".join(columns) + " | auto ran | gloo / best pycoll | MPI / best pycoll |",
             "|---:|" + "---:|" * len(columns) + "---|---:|---:|"]
    for nbytes in sorted(by_size):
        cells = by_size[nbytes]
        best = min((c["time_us"] for k, c in cells.items() if k.startswith("pycoll")), default=None)
        row = [_fmt_size(nbytes)]
        for col in columns:
            c = cells.get(col)
            row.append(f"{c['time_us']:.1f} / {c['busbw']:.3f}" if c else "-")
        auto = cells.get("pycoll auto")
        row.append(auto["picked"] if auto else "-")
        for peer in ("gloo", "Open MPI"):
            c = cells.get(peer)
            row.append(f"{c['time_us'] / best:.2f}" if c and best else "-")
        lines.append("| " + " | ".join(row) + " |")
    wrong = sum(r["wrong"] for r in rows if r["world"] == world)
    lines += ["", f"#wrong over every row: {wrong}."]
    return "\n".join(lines)


def socket_table(rows):
    lines = ["| size | ping-pong one way (us) | stream (GB/s) |", "|---:|---:|---:|"]
    lines += [f"| {_fmt_size(r['bytes'])} | {r['pingpong_us']:.1f} | {r['stream_gbps']:.3f} |" for r in rows]
    return "\n".join(lines)


def sweep_arguments(doc, out_name, runs=False):
    """The command line the bench/ table scripts share: --worlds, (--runs,) the size sweep (-b, -e, -f as pycoll
    bench takes them) and --out (bench/results/out_name)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--worlds", default="2,4")
    if runs:
        p.add_argument("--runs", type=int, default=3)
    p.add_argument("-b", default="4")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=int, default=4)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / out_name))
    return p


def main():
    args = sweep_arguments(__doc__, "allreduce_loopback.md").parse_args()
    start = time.monotonic()
    worlds = [int(w) for w in args.worlds.split(",")]
    rows, commands, skipped = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            got, skip, command = sweep_rows(world, args, Path(tmp) / f"w{world}.json")
            rows += got
            skipped += skip
            commands.append(command)
    sizes = sweep.sizes(sweep.parse_size(args.b), sweep.parse_size(args.e), args.f)
    sockets = raw_socket.measure(sizes)
    elapsed = time.monotonic() - start
    doc = [
        "# All-reduce over loopback TCP: pycoll vs gloo vs Open MPI", "",
        f"Produced by `python bench/allreduce_peers.py --worlds {args.worlds} -b {args.b} -e {args.e} -f {args.f}` "
        f"in {elapsed:.0f} s, which ran:", "",
        *[f"    {c}" for c in commands], "",
        machine(), "",
        "Method (the same for every library, pycoll/tools/bench/timing.py): float32 sum, out of place; per size a "
        "warm-up, then timed iterations (200 for small sizes down to 5 at 64 MiB), each one started right after "
        "a barrier; each rank takes the median of its iterations; the time shown is the slowest rank's median. "
        "busbw = size / time x 2(n-1)/n. Every library is checked: #wrong on integer data must be 0. "
        "gloo is torch.distributed's CPU backend over its TCP transport; Open MPI runs with "
        "`--mca pml ob1 --mca btl tcp,self` (TCP only, no shared memory), like pycoll's own sockets. "
        "Ranks share the 2 cores, so 4 ranks are oversubscribed.", "",
        *(f"{s.strip('# ')}" for s in skipped), "",
    ]
    for world in worlds:
        doc += [world_table(rows, world), ""]
    doc += ["### Raw sockets between 2 processes (the floor and the ceiling)", "",
            "Ping-pong: half the round trip of a message of that size (TCP_NODELAY). Stream: one message of "
            "that size, then a 1-byte acknowledgement. No TCP collective can beat the one-way latency, nor move "
            "data faster than the stream.", "", socket_table(sockets), ""]
    Path(args.out).write_text("\n".join(doc))
    print(f"wrote {args.out} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
