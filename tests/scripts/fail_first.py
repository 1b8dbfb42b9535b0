"""A job where one rank fails first and the others fail right after it, as peers of a crashed rank do.

argv: OUT_DIR FAIL_RANK. Rank FAIL_RANK writes its pid to OUT_DIR/first.pid and exits with 7; every other rank
waits for that process to be gone (or a zombie), then exits with 1 MARGIN_MS (argv[3], default 5) later: so soon
that a launcher polling every 20 ms usually finds several dead ranks on one pass, as when the peers of a crashed
rank fail with PeerFailure.
"""

import os
import sys
import time

out_dir, fail_rank = sys.argv[1], int(sys.argv[2])
margin_s = float(sys.argv[3] if len(sys.argv) > 3 else 5) / 1000
rank = int(os.environ["RANK"])
path = os.path.join(out_dir, "first.pid")
if rank == fail_rank:
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    os._exit(7)
deadline = time.monotonic() + 30
while not os.path.exists(path) and time.monotonic() < deadline:
    time.sleep(0.001)
pid = int(open(path).read())


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # reaped between the open and the read
        return True


while not gone(pid) and time.monotonic() < deadline:
    time.sleep(0.0005)
time.sleep(margin_s)
os._exit(1)
