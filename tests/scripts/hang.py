"""A rank that starts a child and then sleeps: for checking that `pycoll run` leaves no process behind.

argv: OUT_DIR FAIL_RANK IGNORE_SIGTERM. Each rank writes "<pid> <child pid>" to OUT_DIR/<rank>.pids; rank
FAIL_RANK exits with 3 once every rank has written its file. With IGNORE_SIGTERM=1 the rank and its child
ignore SIGTERM, so only SIGKILL stops them.
"""

import os
import signal
import subprocess
import sys
import time

out_dir, fail_rank, ignore_sigterm = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child across exec
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
path = os.path.join(out_dir, f"{rank}.pids")
with open(path + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(path + ".tmp", path)
print("started", flush=True)
if rank == fail_rank:
    while len([n for n in os.listdir(out_dir) if n.endswith(".pids")]) < world:
        time.sleep(0.01)
    sys.exit(3)
time.sleep(600)
