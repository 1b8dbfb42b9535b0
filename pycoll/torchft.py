"""torchft's reconfigurable process group over pycoll: `pycoll.torchft.ProcessGroupPycoll`, for torchft's Manager
(and so its DistributedDataParallel, LocalSGD and DiLoCo) in place of torchft's `ProcessGroupGloo`::

    from torchft import Manager
    from pycoll.torchft import ProcessGroupPycoll
    manager = Manager(pg=ProcessGroupPycoll(), min_replica_size=1, load_state_dict=..., state_dict=...)

torchft reconfigures the group on every quorum change: `configure(store_addr, replica_id, rank, world_size,
...)` aborts the group it had and makes a new one of the quorum's replicas, here a pycoll communicator (shared
memory on one host, else TCP) that meets through the quorum's prefixed store, as ProcessGroupGloo does with
gloo. Collectives run on pycoll's torch backend (pycoll.torch's PycollProcessGroup): CPU tensors on the
communicator, CUDA tensors on a pycoll NCCL one made on first use. `errored()` reports the error of the first
collective that failed, which torchft's Manager checks before it commits a step. torchft is an optional extra
(`pip install ".[torchft]"`); the rest of pycoll never imports it.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torchft.process_group import ProcessGroupWrapper

from pycoll.torch.process_group import create_process_group


class ProcessGroupPycoll(ProcessGroupWrapper):
    """torchft's ProcessGroup interface (configure, abort, shutdown, errored, the collectives) over pycoll.
    `timeout`: how long the group's collectives and its forming wait, as torchft's ProcessGroupGloo."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)

    def _create_pg(self, store, rank, world_size):
        # torchft hands each quorum a store under its own prefix: the new communicator meets there, and ranks of
        # an earlier quorum cannot reach it.
        return create_process_group(store, rank, world_size, self._timeout)

    def _wrap_work(self, work, opts):
        return QuorumWork(work)

    def getBackendName(self) -> str:
        return "torchft-pycoll"

    def errored(self):
        """The error of the first collective of the current group that failed, else None (torchft then skips
        the step and reconfigures at the next quorum)."""
        pg = self._pg
        return pg.failure if pg is not None else None


class QuorumWork(dist.Work):
    """A collective's Work as torchft's Manager takes it: wait() waits, and returns False where the collective
    failed rather than raising, and the error travels in the future. torchft's Manager chains its callbacks on
    the future only after wait() has returned, and takes a failure from that future (it then skips the step and
    reconfigures); a wait() that raised would leave DDP's gradient hook without a future."""

    def __init__(self, work):
        super().__init__()
        self._work = work

    def wait(self, timeout=None):
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception:  # noqa: BLE001 -- in the future, and in errored()
            return False

    def get_future(self):
        return self._work.get_future()

    def is_completed(self):
        return self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()
