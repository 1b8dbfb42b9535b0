"""`pycoll run` and `python -m pycoll`: prefixed output, exit codes, stopping ranks, no process left behind;
and detect() under a real mpirun / torchrun when they are installed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from multiproc import SCRIPTS as SCRIPTS_DIR

from pycoll.cli import build_parser, main

pytestmark = pytest.mark.timeout(60)

SCRIPTS = str(SCRIPTS_DIR)


def _pycoll(*args, cwd, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "pycoll", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=40, **kwargs)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie is dead, whoever reaps it


def _wait_for_pid_files(out_dir, count, launcher):
    deadline = time.monotonic() + 30
    while len([n for n in os.listdir(out_dir) if n.endswith(".pids")]) < count:
        assert launcher.poll() is None, launcher.communicate()
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.02)


def _recorded_pids(out_dir):
    pids = []
    for name in os.listdir(out_dir):
        if name.endswith(".pids"):
            with open(os.path.join(out_dir, name)) as f:
                pids += [int(p) for p in f.read().split()]
    return pids


def _assert_all_gone(pids):
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _alive(p)] == []


def test_three_ranks_print_prefixed_lines(tmp_path):
    result = _pycoll("run", "-n", "3", "--backend", "tcp", os.path.join(SCRIPTS, "print_rank.py"), "-7", "--x",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for rank in range(3):
        assert (f"[rank {rank}] rank {rank} of 3 local {rank} at 127.0.0.1:" in result.stdout)
        assert f"[rank {rank}] unterminated\n" in result.stdout
        assert f"[rank {rank}] to stderr from {rank}\n" in result.stderr
    assert result.stdout.count("launcher pycoll job True secret True backend tcp args ['-7', '--x']") == 3
    assert all(line.startswith("[rank ") for line in result.stdout.splitlines())
    ports = {line.split("127.0.0.1:")[1].split()[0] for line in result.stdout.splitlines() if "127.0.0.1:" in line}
    assert len(ports) == 1


def test_module_mode_and_explicit_port(tmp_path):
    env = dict(os.environ, PYTHONPATH=SCRIPTS)
    result = _pycoll("run", "-n", "2", "--master-port", "23456", "-m", "print_rank", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "[rank 1] rank 1 of 2 local 1 at 127.0.0.1:23456" in result.stdout


def test_failing_rank_sets_the_exit_code(tmp_path):
    result = _pycoll("run", "-n", "3", os.path.join(SCRIPTS, "print_rank.py"), "2", cwd=tmp_path)
    assert result.returncode == 5
    assert "pycoll run: rank 2 exited with code 5" in result.stderr


@pytest.mark.parametrize("ignore_sigterm", [False, True], ids=["sigterm", "sigkill-after-grace"])
def test_a_failing_rank_stops_the_others_and_leaves_nothing_behind(tmp_path, ignore_sigterm):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pycoll", "run", "-n", "3", "--grace-period", "1",
         os.path.join(SCRIPTS, "hang.py"), str(tmp_path), "1", "1" if ignore_sigterm else "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    out, err = launcher.communicate(timeout=40)
    assert launcher.returncode == 3, err
    assert "pycoll run: rank 1 exited with code 3; stopping the other ranks" in err
    assert out.count("started") == 3
    assert time.monotonic() - start < 20
    pids = _recorded_pids(tmp_path)
    assert len(pids) == 6  # three ranks and a child of each
    _assert_all_gone(pids)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_launcher_stops_every_rank(tmp_path, signum):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pycoll", "run", "-n", "3", "--grace-period", "2",
         os.path.join(SCRIPTS, "hang.py"), str(tmp_path), "-1", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_pid_files(tmp_path, 3, launcher)
    launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=20)
    assert launcher.returncode == 128 + signum
    assert f"received {signal.Signals(signum).name}" in err
    _assert_all_gone(_recorded_pids(tmp_path))


def test_killing_the_launcher_outright_still_stops_the_ranks(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pycoll", "run", "-n", "2", os.path.join(SCRIPTS, "hang.py"), str(tmp_path), "-1",
         "0"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_pid_files(tmp_path, 2, launcher)
    launcher.kill()
    launcher.wait()
    rank_pids = [int(open(tmp_path / f"{r}.pids").read().split()[0]) for r in range(2)]
    try:
        _assert_all_gone(rank_pids)  # PR_SET_PDEATHSIG
    finally:
        for pid in set(_recorded_pids(tmp_path)) - set(rank_pids):  # the ranks' own children are theirs to stop
            os.kill(pid, signal.SIGKILL)


def test_rank_killed_by_a_signal_gives_128_plus_the_signal(tmp_path):
    script = tmp_path / "suicide.py"
    script.write_text("import os, signal\nif os.environ['RANK'] == '0':\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    result = _pycoll("run", "-n", "2", str(script), cwd=tmp_path)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0 was killed by SIGKILL" in result.stderr


def test_job_timeout(tmp_path):
    result = _pycoll("run", "-n", "2", "--timeout", "1", "--grace-period", "1", os.path.join(SCRIPTS, "hang.py"),
                     str(tmp_path), "-1", "0", cwd=tmp_path)
    assert result.returncode == 124
    assert "ran past --timeout 1 s" in result.stderr
    _assert_all_gone(_recorded_pids(tmp_path))


def test_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "-n", "0", "x.py"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["run", "-n", "2"])
    assert "give the program to run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


@pytest.mark.parametrize("args, want", [
    (["-n", "abc"], "argument -n/--nproc: expected a whole number of at least 1, got 'abc'"),
    (["-n", "0"], "argument -n/--nproc: expected a whole number of at least 1, got 0"),
    (["-n", "2", "--master-port", "http"], "argument --master-port: expected a port number in [1, 65535], got 'http'"),
    (["-n", "2", "--timeout", "soon"], "argument --timeout: expected a number of seconds greater than 0, got 'soon'"),
])
def test_bad_option_values_name_the_option_and_what_it_expects(capsys, args, want):
    with pytest.raises(SystemExit) as exc:
        main(["run", *args, "x.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert want in err
    assert "invalid" not in err and "_positive" not in err and "_port" not in err


def test_subcommands_are_registered():
    parser = build_parser()
    assert parser.parse_args(["run", "-n", "2", "s.py", "-n", "5"]).program == ["s.py", "-n", "5"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed (apt-get install openmpi-bin)")
def test_detect_under_mpirun(tmp_path):
    script = tmp_path / "detect.py"
    # One write per line: both ranks share mpirun's pipe, and print() may write the newline separately.
    script.write_text("import dataclasses, json, sys\nfrom pycoll.rendezvous.launch_env import detect, job_id\n"
                      "sys.stdout.write(json.dumps(dict(dataclasses.asdict(detect()), job=job_id())) + '\\n')\n"
                      "sys.stdout.flush()\n")
    result = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable,
                             str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=40)
    assert result.returncode == 0, result.stderr
    rows = sorted((json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")),
                  key=lambda row: row["rank"])
    assert [(r["rank"], r["world_size"], r["local_rank"], r["launcher"]) for r in rows] == \
        [(0, 2, 0, "openmpi"), (1, 2, 1, "openmpi")]
    assert rows[0]["master_addr"] == rows[1]["master_addr"] == "127.0.0.1"
    assert rows[0]["master_port"] == rows[1]["master_port"]
    assert rows[0]["job"] == rows[1]["job"] is not None


def _torchrun():
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return path if os.path.exists(path) else shutil.which("torchrun")


@pytest.mark.skipif(_torchrun() is None, reason="torchrun not installed (pip install torch==2.13.0)")
def test_store_and_mesh_under_torchrun(tmp_path):
    script = tmp_path / "rendezvous.py"
    script.write_text(
        "import json, os\n"
        "from pycoll.rendezvous.launch_env import detect, job_id\n"
        "from pycoll.rendezvous.store import create_store, gather\n"
        "from pycoll.bootstrap import create_native, share_unique_id\n"
        "env = detect()\n"
        "store = create_store(env, timeout=30)\n"
        "names = gather(store, 'names', env.rank, env.world_size, str(env.rank).encode(), 30)\n"
        "unique_id = share_unique_id(store, env.rank, 30, env.master_addr, None)\n"
        "native = create_native(unique_id, env.rank, env.world_size, timeout=30, transport='tcp')\n"
        "report = dict(rank=env.rank, launcher=env.launcher, names=[n.decode() for n in names],\n"
        "              transport=native.transport, job_id=job_id())\n"
        "native.close(5.0)\n"
        "with open(f'rank{env.rank}.json', 'w') as f:\n"
        "    json.dump(report, f)\n"
        "store.close()\n")
    result = subprocess.run([_torchrun(), "--standalone", "--nproc-per-node", "2", str(script)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=50)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in rows] == [0, 1]
    assert all(r["launcher"] == "torchrun" and r["names"] == ["0", "1"] and r["transport"] == "tcp" for r in rows)


def test_the_rank_that_failed_first_is_named_not_the_lowest(tmp_path):
    # Rank 2 fails; ranks 0, 1 and 3 fail 5 ms later, like the peers of a crashed rank: usually inside one of
    # the launcher's polling intervals. The kernel's exit order is read through pidfds, which keeps it in most
    # jobs (about 12 of 13 here with the machine otherwise idle, fewer when other work holds the cores, since the
    # launcher's thread must run within those 5 ms); a rank-order scan names rank 0 in nearly every job. So three
    # jobs of at most five must name rank 2.
    named = []
    for attempt in range(5):
        out = tmp_path / str(attempt)
        out.mkdir()
        result = _pycoll("run", "-n", "4", os.path.join(SCRIPTS, "fail_first.py"), str(out), "2", cwd=tmp_path)
        named.append(result.returncode == 7 and
                     "pycoll run: rank 2 exited with code 7; stopping the other ranks" in result.stderr)
        if sum(named) == 3:
            break
    assert sum(named) >= 3, named
