"""A test session that tests/package/test_interrupt.py starts (`pytest tests/scripts/interrupted_session.py`: the name
keeps it out of the normal run) and interrupts as a terminal's Ctrl-C does. Its one test hangs the way tests
of this suite can: rank processes that started children of their own (hang.py), and a thread blocked in a
pycoll wait with a long deadline, which interpreter exit would join. It writes TEST_OUT/ready once everything
runs; the pids are in TEST_OUT/<rank>.pids."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for multiproc

from multiproc import Ranks  # noqa: E402

import pycoll  # noqa: E402

out = os.environ["TEST_OUT"]


def test_hangs_until_interrupted():
    unique_id = pycoll.get_unique_id()
    # Rank 0 of 2 whose rank 1 never comes: waits its whole 120 s deadline, Ctrl-C reaching only the main thread.
    threading.Thread(target=pycoll.init_rank, args=(unique_id, 0, 2), kwargs={"timeout": 120.0}).start()
    with Ranks(2, "hang.py", out, "-1", "0") as ranks:
        while len([n for n in os.listdir(out) if n.endswith(".pids")]) < len(ranks.procs):
            time.sleep(0.05)
        open(os.path.join(out, "ready"), "w").close()
        time.sleep(600)
