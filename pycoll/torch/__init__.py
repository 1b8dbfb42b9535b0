"""`import pycoll.torch` registers "pycoll" as a torch.distributed backend for CPU and CUDA tensors, so
PyTorch's own `init_process_group("pycoll")`, `DistributedDataParallel`, `new_group`, DeviceMesh, functional
collectives, DTensor and FSDP2 run over pycoll::

    import torch.distributed as dist
    import pycoll.torch  # noqa: F401 -- registers the backend
    dist.init_process_group("pycoll")                  # under torchrun, or with MASTER_ADDR/PORT, RANK, ...
    model = torch.nn.parallel.DistributedDataParallel(model)

Each process group is a pycoll communicator (backend "cpu": shared memory on one host, else TCP) that meets
through torch's own store, plus, on its first call with CUDA tensors, a pycoll NCCL communicator for them.
Collectives run as pycoll non-blocking collectives; their Works are completed by one Python thread per group,
in call order, and raise pycoll's error where one occurred (process_group.py). torch is an optional extra:
the rest of pycoll never imports it.

`pycoll.torch.shrink_group(ranks_to_exclude, group=None, ...)` is torch's `dist.shrink_group` for pycoll groups
(torch's own needs a C++ backend): the survivors of a lost rank go on in a smaller group (shrink.py).

`pycoll.torch.dump_trace()` writes pycoll's trace dumps of this process's groups and torch's flight-recorder dump
of this rank into PYCOLL_TRACE_DIR (also done when a collective first fails), which
`python -m torch.distributed.flight_recorder.fr_trace` reads (flight_recorder.py).
"""

import torch.distributed as dist

from pycoll.torch.flight_recorder import dump_trace
from pycoll.torch.process_group import BACKEND_NAME, DEVICES, PycollProcessGroup, PycollWork, create_process_group
from pycoll.torch.shrink import SHRINK_ABORT, SHRINK_DEFAULT, shrink_group

if BACKEND_NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND_NAME, create_process_group, devices=DEVICES)

__all__ = ["BACKEND_NAME", "SHRINK_ABORT", "SHRINK_DEFAULT", "PycollProcessGroup", "PycollWork", "dump_trace",
           "shrink_group"]
