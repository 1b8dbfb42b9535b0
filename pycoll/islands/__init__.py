"""One communicator across host, CUDA and NPU ranks: backend="auto".

Each rank brings the memory its arrays are in (init(device=...) or PYCOLL_DEVICE: host, cuda, npu); the ranks of
one kind on one host form an island, which runs its vendor's collectives (pycoll's own on host memory, NCCL on
CUDA, HCCL on NPUs). A collective across islands runs in three steps: inside each island, then between the
islands' leaders over pycoll's host transports on host-staged copies, then inside each island again. The modules:

kinds.py           a memory kind -> the backend its island runs
formation.py       who is in which island, the same description on every rank (Communicator.islands)
store.py           the store view each island's vendor communicator exchanges its id through
staging.py         copies between device and host memory, and device scratch, through the vendor's runtime
schedules.py       each collective across islands, as steps over the islands' and the leaders' engines
messages.py        send and recv across islands, on host-staged copies over every rank's host communicator
crossing.py        hierarchical or host-staged flat for a fast-mode reduction: a cost model of the call's bytes
engine.py          the engine behind a backend="auto" communicator: builds the communicators, checks each call
communicator.py    the Communicator of backend="auto" (its `islands`)
"""

from pycoll.islands.formation import Island, Islands

__all__ = ["Island", "Islands"]
