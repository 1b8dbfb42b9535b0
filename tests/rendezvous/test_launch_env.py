"""pycoll.rendezvous.launch_env: every launcher's variables, defaults, explicit overrides and bad values."""

import pytest

from pycoll.rendezvous.launch_env import DEFAULT_MASTER_PORT, LaunchEnv, detect, job_id, job_secret, resolve

pytestmark = pytest.mark.timeout(10)

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid", "PMI_RANK", "PMI_SIZE",
                 "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "SLURM_NNODES", "SLURM_JOB_ID", "SLURM_STEP_ID", "PYCOLL_JOB_ID", "PYCOLL_SECRET",
                 "TORCHELASTIC_RUN_ID")


@pytest.fixture
def clean_env(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_no_launcher_is_a_single_rank(clean_env):
    assert detect() == LaunchEnv(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1",
                                 master_port=DEFAULT_MASTER_PORT, launcher="none")


def test_torchrun_variables(clean_env):
    for var, value in dict(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4",
                           MASTER_ADDR="10.1.2.3", MASTER_PORT="29400", TORCHELASTIC_RUN_ID="abc").items():
        clean_env.setenv(var, value)
    assert detect() == LaunchEnv(3, 8, 1, "10.1.2.3", 29400, "torchrun")


def test_pycoll_run_variables_default_to_loopback():
    env = dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", MASTER_PORT="5000",
               PYCOLL_JOB_ID="j1")
    assert detect(env) == LaunchEnv(1, 2, 1, "127.0.0.1", 5000, "pycoll")


def test_open_mpi_variables():
    env = dict(OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_RANK="0",
               OMPI_COMM_WORLD_LOCAL_SIZE="1", MASTER_ADDR="node0", MASTER_PORT="1234")
    assert detect(env) == LaunchEnv(2, 4, 0, "node0", 1234, "openmpi")


def test_open_mpi_single_host_derives_address_and_a_job_specific_port():
    env = dict(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="1",
               OMPI_COMM_WORLD_LOCAL_SIZE="2", OMPI_MCA_ess_base_jobid="1954676737")
    first = detect(env)
    assert (first.master_addr, first.local_rank) == ("127.0.0.1", 1)
    other_job = detect(dict(env, OMPI_MCA_ess_base_jobid="1954676738"))
    assert first.master_port != other_job.master_port
    assert detect(dict(env, OMPI_COMM_WORLD_RANK="0")).master_port == first.master_port


def test_pmi_variables():
    env = dict(PMI_RANK="5", PMI_SIZE="6", MPI_LOCALRANKID="2", MPI_LOCALNRANKS="6")
    assert detect(env) == LaunchEnv(5, 6, 2, "127.0.0.1", DEFAULT_MASTER_PORT, "pmi")


def test_slurm_variables():
    env = dict(SLURM_PROCID="7", SLURM_NTASKS="16", SLURM_LOCALID="3", SLURM_NNODES="2", MASTER_ADDR="n01",
               MASTER_PORT="4000")
    assert detect(env) == LaunchEnv(7, 16, 3, "n01", 4000, "slurm")


def test_multi_node_slurm_requires_master_addr():
    env = dict(SLURM_PROCID="0", SLURM_NTASKS="4", SLURM_LOCALID="0", SLURM_NNODES="2")
    with pytest.raises(ValueError, match="MASTER_ADDR.*scontrol"):
        detect(env)


def test_single_node_slurm_defaults_to_loopback():
    env = dict(SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="1", SLURM_NNODES="1", SLURM_JOB_ID="77")
    assert detect(env).master_addr == "127.0.0.1"


def test_torchrun_variables_win_over_the_slurm_allocation_around_them():
    env = dict(RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_PORT="9", SLURM_PROCID="0",
               SLURM_NTASKS="1")
    assert (detect(env).rank, detect(env).launcher) == (1, "env")


def test_explicit_arguments_override_the_environment():
    env = dict(RANK="1", WORLD_SIZE="2", MASTER_ADDR="a", MASTER_PORT="1")
    assert resolve(rank=0, world_size=4, master_addr="b", master_port=2, env=env) == \
        LaunchEnv(0, 4, 0, "b", 2, "env")
    assert resolve(rank=2, world_size=3, env={}) == LaunchEnv(2, 3, 2, "127.0.0.1", DEFAULT_MASTER_PORT, "none")


@pytest.mark.parametrize("env, match", [
    (dict(RANK="x", WORLD_SIZE="2"), "RANK must be an integer"),
    (dict(RANK="0"), "WORLD_SIZE is not set"),
    (dict(WORLD_SIZE="2"), "RANK is not set"),
    (dict(RANK="2", WORLD_SIZE="2"), "rank must be in"),
    (dict(RANK="0", WORLD_SIZE="0"), "WORLD_SIZE must be >= 1"),
    (dict(RANK="-1", WORLD_SIZE="2"), "RANK must be >= 0"),
    (dict(RANK="0", WORLD_SIZE="1", MASTER_PORT="70000"), "MASTER_PORT must be"),
    (dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="?"), "LOCAL_RANK must be an integer"),
    (dict(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="two"), "OMPI_COMM_WORLD_SIZE must be an integer"),
    (dict(RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1"), "MASTER_ADDR is not set"),
])
def test_bad_environment_values_name_the_variable(env, match):
    with pytest.raises(ValueError, match=match):
        detect(env)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rank="0", world_size=2), TypeError, "rank"),
    (dict(rank=True, world_size=2), TypeError, "rank"),
    (dict(rank=0, world_size=2.0), TypeError, "world_size"),
    (dict(rank=3, world_size=2), ValueError, "rank must be in"),
    (dict(rank=0, world_size=2, master_port=0), ValueError, "master_port"),
    (dict(rank=0, world_size=2, master_addr=""), TypeError, "master_addr"),
    (dict(rank=1), ValueError, "without world_size"),
])
def test_bad_explicit_arguments_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        resolve(env={}, **kwargs)


def test_job_id_and_secret():
    assert job_id({"PYCOLL_JOB_ID": "abc", "SLURM_JOB_ID": "1"}) == "abc"
    assert job_id({"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"}) == "slurm-12.0"
    assert job_id({}) is None
    assert job_secret({"PYCOLL_SECRET": "s3"}) == b"s3"
    assert job_secret({}) is None
