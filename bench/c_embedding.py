"""A C program's all-reduce (examples/c_allreduce.c over pycoll_comm_init_rank) beside the same all-reduce
from Python (pycoll.init_rank, comm.all_reduce on a NumPy array), side by side in one run: same bootstrap,
same sizes, same number of ranks, alternating, repeated.

    python bench/c_embedding.py [--ranks 2] [--repeats 3]     # prints a Markdown table

Each cell is the median over the repeats of rank 0's median time per call (float32 sum, algorithm auto).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [(4, 4000), (64 << 10, 1000), (1 << 20, 200), (16 << 20, 20)]  # bytes, iterations

PYTHON_RANK = r"""
import os, sys, time
import numpy as np
import pycoll
rank, world, path, nbytes, iters = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if rank == 0:
    with open(path + ".tmp", "wb") as f:
        f.write(pycoll.get_unique_id())
    os.rename(path + ".tmp", path)
else:
    while not os.path.exists(path):
        time.sleep(0.01)
with open(path, "rb") as f:
    unique_id = f.read()
with pycoll.init_rank(unique_id, rank, world, timeout=60) as comm:
    x = np.zeros(max(nbytes // 4, 1), dtype=np.float32)
    comm.all_reduce(x)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        comm.all_reduce(x)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(f"bytes {x.nbytes} median_us {sorted(times)[iters // 2] * 1e6:.2f}")
"""


def run(command, world, workdir, nbytes, iters):
    path = os.path.join(workdir, f"id-{os.urandom(4).hex()}")
    env = dict(os.environ, PYCOLL_SOCKET_IFNAME=os.environ.get("PYCOLL_SOCKET_IFNAME", "lo"))
    procs = [subprocess.Popen([*command, str(r), str(world), path, str(nbytes), str(iters)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(outs))
    line = next(line for line in outs[0].splitlines() if line.startswith("bytes "))
    return float(line.split()[3])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    flags = subprocess.run([sys.executable, "-m", "pycoll", "config", "--cflags", "--libs"], capture_output=True,
                           text=True, check=True).stdout.split()
    with tempfile.TemporaryDirectory() as workdir:
        binary = os.path.join(workdir, "c_allreduce")
        subprocess.run([cc, "-O2", "-std=c11", os.path.join(ROOT, "examples", "c_allreduce.c"), "-o", binary,
                        *flags], check=True)
        script = os.path.join(workdir, "python_rank.py")
        with open(script, "w") as f:
            f.write(PYTHON_RANK)
        results = {}
        for _ in range(args.repeats):
            for nbytes, iters in SIZES:
                results.setdefault(("C", nbytes), []).append(run([binary], args.ranks, workdir, nbytes, iters))
                results.setdefault(("Python", nbytes), []).append(
                    run([sys.executable, script], args.ranks, workdir, nbytes, iters))
    print("| bytes | C (us per call) | Python (us per call) | Python / C |")
    print("| ---: | ---: | ---: | ---: |")
    for nbytes, _ in SIZES:
        c, py = statistics.median(results[("C", nbytes)]), statistics.median(results[("Python", nbytes)])
        print(f"| {nbytes} | {c:.1f} | {py:.1f} | {py / c:.2f} |")
    print()
    print("runs (us):", {f"{k[0]} {k[1]}": [round(v, 1) for v in vs] for k, vs in sorted(results.items())})


if __name__ == "__main__":
    main()
