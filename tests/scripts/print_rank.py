"""Prints this rank's view of the launcher environment; rank FAIL_RANK (argv[1], optional) exits with 5."""

import os
import sys

from pycoll.rendezvous.launch_env import detect, job_id

env = detect()
print(f"rank {env.rank} of {env.world_size} local {env.local_rank} at {env.master_addr}:{env.master_port} "
      f"launcher {env.launcher} job {job_id() is not None} secret {bool(os.environ.get('PYCOLL_SECRET'))} "
      f"backend {os.environ.get('PYCOLL_BACKEND')} args {sys.argv[1:]}")
print(f"to stderr from {env.rank}", file=sys.stderr)
sys.stdout.write("unterminated")
if len(sys.argv) > 1 and env.rank == int(sys.argv[1]):
    sys.exit(5)
