"""Who am I in this job? Reads rank, world size and the rendezvous address from the launcher's environment.

Launchers are tried in this order; the first whose rank or size variable is set wins:

=========  ==========================  ==========================  ===============================
launcher   rank / size                 local rank                  "all ranks on one host" when
=========  ==========================  ==========================  ===============================
env        RANK / WORLD_SIZE           LOCAL_RANK                  LOCAL_WORLD_SIZE == WORLD_SIZE
openmpi    OMPI_COMM_WORLD_RANK/_SIZE  OMPI_COMM_WORLD_LOCAL_RANK  OMPI_COMM_WORLD_LOCAL_SIZE == size
pmi        PMI_RANK / PMI_SIZE         MPI_LOCALRANKID             MPI_LOCALNRANKS == size
slurm      SLURM_PROCID / SLURM_NTASKS SLURM_LOCALID               SLURM_NNODES == 1
=========  ==========================  ==========================  ===============================

("env" is reported as "pycoll" under ``pycoll run`` and "torchrun" under torchrun.) With none set the job is a
single rank (launcher "none").

Rendezvous address: MASTER_ADDR / MASTER_PORT when set. Otherwise MASTER_ADDR defaults to 127.0.0.1 only when
the job is known to live on one host (world size 1, or the table's last column holds); a multi-host job without
MASTER_ADDR is a ValueError, because no launcher-neutral way finds rank 0's host (under Slurm that needs
scontrol). MASTER_PORT defaults to a port derived from the launcher's job id (so two mpirun/srun jobs sharing a
host do not collide, and every rank derives the same one), else 29500.
"""

import dataclasses
import os
import warnings
import zlib

from pycoll import settings

DEFAULT_MASTER_PORT = 29500
_DERIVED_PORT_SPAN = 10000
_LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class LaunchEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str
    # Whether a launcher says every rank runs on this host (the table's last column; never assumed without
    # one): informative, so not part of equality.
    single_host: bool = dataclasses.field(default=False, compare=False)


@dataclasses.dataclass(frozen=True)
class _Launcher:
    name: str
    rank_var: str
    size_var: str
    local_rank_vars: tuple
    local_size_var: str  # compared with the world size ("one host"); SLURM_NNODES is compared with 1


_LAUNCHERS = (
    _Launcher("env", "RANK", "WORLD_SIZE", ("LOCAL_RANK",), "LOCAL_WORLD_SIZE"),
    _Launcher("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", ("OMPI_COMM_WORLD_LOCAL_RANK",),
              "OMPI_COMM_WORLD_LOCAL_SIZE"),
    _Launcher("pmi", "PMI_RANK", "PMI_SIZE", ("MPI_LOCALRANKID", "PMI_LOCAL_RANK"), "MPI_LOCALNRANKS"),
    _Launcher("slurm", "SLURM_PROCID", "SLURM_NTASKS", ("SLURM_LOCALID",), "SLURM_NNODES"),
)


def detect(env=None):
    """The LaunchEnv of this process, read from ``env`` (default os.environ)."""
    return resolve(env=env)


def resolve(rank=None, world_size=None, master_addr=None, master_port=None, env=None):
    """Like detect(), but each argument that is not None overrides what the environment says."""
    env = os.environ if env is None else env
    rank = _check_int_arg("rank", rank)
    world_size = _check_int_arg("world_size", world_size)
    master_port = _check_int_arg("master_port", master_port)
    if master_addr is not None and (not isinstance(master_addr, str) or not master_addr):
        raise TypeError(f"master_addr must be a non-empty str, got {master_addr!r}")

    launcher = _find_launcher(env)
    name, single_host, local_rank = "none", True, None
    if launcher is not None:
        name = _launcher_name(launcher, env)
        if rank is None:
            rank = _read_int(env, launcher.rank_var, minimum=0)
        if world_size is None:
            world_size = _read_int(env, launcher.size_var, minimum=1)
        local_rank = _read_local_rank(env, launcher)
        single_host = _is_single_host(env, launcher, world_size)
    if world_size is None:
        world_size = 1 if rank in (None, 0) else None
        if world_size is None:
            raise ValueError(f"rank={rank} was given without world_size and no launcher variable sets it")
    if rank is None:
        rank = 0 if world_size == 1 else None
        if rank is None:
            raise ValueError(f"world_size={world_size} was given without rank and no launcher variable sets it")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if local_rank is None:
        # Without a local-rank variable the rank is right for the usual single-host job.
        local_rank = rank if single_host else 0

    if master_addr is None:
        master_addr = env.get("MASTER_ADDR") or None
    if master_addr is None:
        if world_size > 1 and not single_host:
            raise ValueError(f"MASTER_ADDR is not set: this {name} job spans several hosts, so set MASTER_ADDR "
                             "to rank 0's host (under Slurm: export MASTER_ADDR=$(scontrol show hostnames "
                             "\"$SLURM_JOB_NODELIST\" | head -n 1))")
        master_addr = _LOOPBACK
    if master_port is None:
        master_port = (_read_int(env, "MASTER_PORT", minimum=1, maximum=65535) if env.get("MASTER_PORT")
                       else _default_port(env))
    elif not 0 < master_port < 65536:
        raise ValueError(f"master_port must be in [1, 65535], got {master_port}")
    return LaunchEnv(rank=rank, world_size=world_size, local_rank=local_rank, master_addr=master_addr,
                     master_port=master_port, launcher=name, single_host=launcher is not None and single_host)


_warned_single_rank = False


def warn_if_single_rank(env, rank=None, world_size=None):
    """Warn once per process when init() found no launcher and was given no rank or world_size: a script
    started with plain `python` then runs alone, which is easily mistaken for a job of several ranks."""
    global _warned_single_rank
    if env.launcher != "none" or rank is not None or world_size is not None or _warned_single_rank:
        return
    _warned_single_rank = True
    warnings.warn("pycoll.init() found no launcher environment (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, "
                  "SLURM_*) and no rank/world_size, so it runs as a single rank. To start several: "
                  "pycoll run -n 4 script.py, torchrun --nproc-per-node 4 script.py or "
                  "mpirun -n 4 python script.py", UserWarning, stacklevel=3)


def job_id(env=None):
    """An id every rank of this job agrees on, from the launcher (None when it gives none)."""
    env = os.environ if env is None else env
    if settings.get("PYCOLL_JOB_ID", env):
        return settings.get("PYCOLL_JOB_ID", env)
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun-" + env["TORCHELASTIC_RUN_ID"]
    if env.get("OMPI_MCA_ess_base_jobid"):
        return "openmpi-" + env["OMPI_MCA_ess_base_jobid"]
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    return None


def job_secret(env=None):
    """The job's shared secret (PYCOLL_SECRET, set by ``pycoll run``) as bytes, or None."""
    env = os.environ if env is None else env
    value = settings.get("PYCOLL_SECRET", env)
    return value.encode() if value else None


def _find_launcher(env):
    for launcher in _LAUNCHERS:
        if env.get(launcher.rank_var) or env.get(launcher.size_var):
            return launcher
    return None


def _launcher_name(launcher, env):
    if launcher.name != "env":
        return launcher.name
    if settings.get("PYCOLL_JOB_ID", env):
        return "pycoll"
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    return "env"


def _read_local_rank(env, launcher):
    for var in launcher.local_rank_vars:
        if env.get(var):
            return _read_int(env, var, minimum=0)
    return None


def _is_single_host(env, launcher, world_size):
    if world_size == 1:
        return True
    value = env.get(launcher.local_size_var)
    if not value:
        return False
    count = _read_int(env, launcher.local_size_var, minimum=1)
    return count == 1 if launcher.name == "slurm" else count == world_size


def _default_port(env):
    jid = job_id(env)
    if jid is None:
        return DEFAULT_MASTER_PORT
    return DEFAULT_MASTER_PORT + zlib.crc32(jid.encode()) % _DERIVED_PORT_SPAN


def _read_int(env, var, minimum, maximum=None):
    text = env.get(var)
    if text is None or text == "":
        raise ValueError(f"{var} is not set")
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise ValueError(f"{var} must be an integer, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"[{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{var} must be {bound}, got {value}")
    return value


def _check_int_arg(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value
