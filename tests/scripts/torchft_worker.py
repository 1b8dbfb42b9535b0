"""One replica group (one process) of a torchft training job: `python torchft_worker.py PG LIGHTHOUSE REPLICA STOP`,
PG "pycoll" (pycoll.torchft.ProcessGroupPycoll) or "gloo" (torchft's ProcessGroupGloo). torchft's Manager and its
DistributedDataParallel train a small model with SGD on 127.0.0.1 (tests/torchft_job.py
starts the lighthouse and the replicas).

Prints {"ready": true} once its Manager is up, then waits for a line on stdin (so that the first quorum holds
every replica); then one JSON line per committed step: the step, the replicas that took part, CLOCK_MONOTONIC
when it committed and the loss on a held-out batch. At step STOP it prints its parameters (every survivor at the same
step) and trains on until the test ends it. Each step takes at least PACE seconds, so that the test's kill comes well
before STOP."""

import json
import sys
import time
from datetime import timedelta

import torch
from torchft import Manager
from torchft.ddp import DistributedDataParallel
from torchft.process_group import ProcessGroupGloo

from pycoll.torchft import ProcessGroupPycoll, QuorumWork


class GlooWorks(ProcessGroupGloo):
    """torchft's gloo group with its Works handed to the Manager as ProcessGroupPycoll hands pycoll's: as
    shipped (torchft 0.2.0), a gloo Work whose wait() raises after a peer died leaves torchft's DDP hook
    without a future (an AssertionError ends the survivor), so the two are compared on equal terms."""

    def _wrap_work(self, work, opts):
        return QuorumWork(work)


pg_name, lighthouse, replica, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
PACE = 0.05
TIMEOUT = timedelta(seconds=15)
TEACHER = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(12, 1)


def batch(seed):
    x = torch.randn(32, 12, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x, x @ TEACHER


torch.manual_seed(0)  # every replica starts from the same weights
model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Linear(16, 1)).double()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
manager = Manager(
    pg=ProcessGroupPycoll(timeout=TIMEOUT) if pg_name == "pycoll" else GlooWorks(timeout=TIMEOUT),
    load_state_dict=lambda sd: (model.load_state_dict(sd["model"]), opt.load_state_dict(sd["opt"])),
    state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    min_replica_size=2, rank=0, world_size=1, store_addr="127.0.0.1", store_port=store.port,
    lighthouse_addr=lighthouse, replica_id=f"replica_{replica}", hostname="127.0.0.1", timeout=TIMEOUT,
    quorum_timeout=timedelta(seconds=60), connect_timeout=TIMEOUT, init_sync=False)  # equal weights from the seed
ddp = DistributedDataParallel(manager, model)
held_out = batch(10_000)
print('{"ready": true}', flush=True)
sys.stdin.readline()

final = False
while True:  # until the test ends it: a replica that stopped would leave the others without a quorum
    began = time.monotonic()
    manager.start_quorum()  # what torchft's OptimizerWrapper does, keeping should_commit's answer
    opt.zero_grad()
    x, y = batch(1000 * manager.current_step() + replica)  # each replica its own data
    ((ddp(x) - y) ** 2).mean().backward()
    if not manager.should_commit():  # a replica failed during the step: the next quorum goes without it
        continue
    opt.step()
    with torch.no_grad():
        loss = float(((model(held_out[0]) - held_out[1]) ** 2).mean())
    print(json.dumps({"step": manager.current_step(), "n": manager.num_participants(), "t": time.monotonic(),
                      "loss": loss}), flush=True)
    if manager.current_step() >= stop and not final:
        final = True
        print(json.dumps({"final": True, "step": manager.current_step(),
                          "params": [p.detach().reshape(-1).tolist() for p in model.parameters()]}), flush=True)
    time.sleep(max(0.0, PACE - (time.monotonic() - began)))
