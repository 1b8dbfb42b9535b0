"""Other users of the same host against a job started without PYCOLL_SECRET: they can neither read the unique id
(from the store, the per-user secret file, a FileStore or the C example's id file), nor join as a rank, nor stall
the job by connecting and saying nothing. The stranger is a real process of user `nobody` (forked, then setuid),
so these tests need root; they skip otherwise."""

import json
import os
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from c_programs import run_ranks
from multiproc import Ranks, assert_all_ok
from proc_sockets import LISTEN, tcp_sockets
from strangers import Stranger, stranger_uid

from pycoll.errors import AuthenticationError, PycollError
from pycoll.rendezvous import user_secret
from pycoll.rendezvous.store import FileStore, TCPStore

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"




def _attempt(call):
    """The name of the exception ``call()`` raised, with the start of its message, or "succeeded"."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 -- the test compares names
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return "succeeded"


def _listening_ports(pid):
    """The TCP ports process ``pid`` listens on (read as root from /proc)."""
    return sorted({int(local.rsplit(":", 1)[1], 16) for state, local, _ in tcp_sockets(pid) if state == LISTEN})


def _read_id_from_the_store(port):
    """What a stranger tries first: the store as it was before, with no secret, claiming rank 1."""
    with TCPStore(HOST, port, is_server=False, timeout=3.0, rank=1) as store:
        return store.get("pycoll/rdv/0/pycoll/unique_id", timeout=1.0)


def test_another_user_cannot_read_the_id_join_or_stall_a_local_job(tmp_path, monkeypatch):
    stranger_uid()
    monkeypatch.delenv("PYCOLL_SECRET", raising=False)
    go = tmp_path / "go"
    with Ranks(2, "rdv_worker.py", "late", env={"TEST_LATE": "1", "TEST_GO_FILE": str(go)}, timeout=30) as ranks:
        ranks.wait_ready([0])
        secret_file = user_secret.secret_path(ranks.port)
        with TCPStore(HOST, ranks.port, is_server=False, timeout=20.0,
                      secret=user_secret.read_or_create(ranks.port)) as probe:
            probe.get("pycoll/rdv/0/pycoll/unique_id", timeout=20.0)  # rank 0 is in the bootstrap, waiting
        ports = _listening_ports(ranks.procs[0].pid)  # the store's and the C bootstrap root's
        assert ranks.port in ports and len(ports) >= 2, ports

        def attack(held):
            report = {
                "read secret file": _attempt(lambda: Path(secret_file).read_bytes()),
                "list secret directory": _attempt(lambda: os.listdir(os.path.dirname(secret_file))),
                "read id without a secret": _attempt(lambda: _read_id_from_the_store(ranks.port)),
                "join with a guessed secret": _attempt(lambda: TCPStore(HOST, ranks.port, is_server=False,
                                                                        timeout=3.0, secret=b"guess", rank=1)),
            }
            for port in ports:  # connect to every listener of rank 0 and say nothing
                held.append(socket.create_connection((HOST, port), timeout=3.0))
            report["silent connections"] = len(held)
            return report

        stranger = Stranger(attack)
        try:
            report = stranger.result()
            go.touch()  # rank 1 joins while the stranger's silent connections are open
            reports = ranks.reports(deadline_s=40)
        finally:
            stranger.release()
    print(json.dumps(report, indent=1), f"late rank's init: {reports[1]['init_s']:.2f} s")
    assert report["read secret file"].startswith("PermissionError"), report
    assert report["list secret directory"].startswith("PermissionError"), report
    assert report["read id without a secret"].startswith("AuthenticationError"), report
    assert report["join with a guessed secret"].startswith("AuthenticationError"), report
    assert report["silent connections"] == len(ports), report
    assert_all_ok(reports)
    # Under the listeners' 5 s handshake deadline: nobody waited for the silent connections to be dropped.
    assert reports[1]["init_s"] < 4.0, reports[1]


def test_the_per_user_secret_is_private_and_shared_by_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    first, again = user_secret.read_or_create(4242), user_secret.read_or_create(4242)
    assert first == again and len(first) == user_secret.SECRET_HEX_CHARS
    assert user_secret.read_or_create(4243) != first  # one per port
    path = user_secret.secret_path(4242)
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(os.path.dirname(path))) == ["store-4242.secret", "store-4243.secret"]


def test_a_secret_directory_others_can_reach_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = user_secret.directory()
    os.mkdir(directory, 0o755)
    os.chmod(directory, 0o755)
    with pytest.raises(PycollError, match=r"mode 0755: other users can reach it.*PYCOLL_SECRET"):
        user_secret.read_or_create(4242)
    os.rmdir(directory)
    os.symlink(tmp_path, directory)  # a link in a shared /tmp may be a stranger's
    with pytest.raises(PycollError, match="symbolic link"):
        user_secret.read_or_create(4242)


def test_a_secret_directory_another_user_made_first_is_refused(tmp_path, monkeypatch):
    uid = stranger_uid()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = user_secret.directory()
    os.mkdir(directory, 0o700)
    os.chown(directory, uid, uid)
    with pytest.raises(PycollError, match=f"owned by uid {uid}, not by this user"):
        user_secret.read_or_create(4242)


def test_file_store_is_private_and_refuses_values_without_the_secret(tmp_path):
    stranger_uid()
    path = tmp_path / "store"
    store = FileStore(path, timeout=5.0, secret=b"s3cret")
    store.set("pycoll/unique_id", b"the id")
    store.add("n", 1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    for name in os.listdir(path):
        assert stat.S_IMODE(os.stat(path / name).st_mode) == 0o600, name
    other = FileStore(path, timeout=5.0, secret=b"another")
    with pytest.raises(AuthenticationError, match="'pycoll/unique_id'.*fails the secret check"):
        other.get("pycoll/unique_id")
    value_file = next(p for p in path.iterdir() if p.name != ".lock" and p.read_bytes().endswith(b"the id"))
    value_file.write_bytes(value_file.read_bytes()[:-6] + b"forged")  # altered in place
    with pytest.raises(AuthenticationError, match="fails the secret check"):
        store.get("pycoll/unique_id")

    def attack(held):
        return {"list": _attempt(lambda: os.listdir(path)),
                "read": _attempt(value_file.read_bytes),
                "plant": _attempt(lambda: (path / "planted").write_bytes(b"x"))}

    stranger = Stranger(attack)
    report = stranger.result()
    stranger.release()
    assert all(v.startswith("PermissionError") for v in report.values()), report


def test_the_jobs_secret_reaches_a_file_store_handed_to_init(tmp_path):
    # init(store=FileStore(...), secret=...) or PYCOLL_SECRET: the rendezvous's values are authenticated even
    # though the FileStore was made without the secret (they were stored bare before).
    from types import SimpleNamespace

    from pycoll.rendezvous.store import RENDEZVOUS_PREFIX, rendezvous

    path = tmp_path / "store"
    _, meeting = rendezvous(SimpleNamespace(rank=0, world_size=2), FileStore(path, timeout=5.0), secret=b"job")
    assert meeting is not None
    key = f"{RENDEZVOUS_PREFIX}/arrivals"
    assert int(FileStore(path, timeout=5.0, secret=b"job").get(key)) == 1
    with pytest.raises(AuthenticationError, match="fails the secret check"):
        FileStore(path, timeout=5.0, secret=b"another").get(key)
    own = FileStore(path, timeout=5.0, secret=b"own")
    assert own.with_secret(b"job") is own  # a store's own secret is kept


def test_file_store_refuses_a_directory_others_can_reach(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    with pytest.raises(PycollError, match="mode 0775: other users can reach it.*chmod 700"):
        FileStore(shared)


def test_c_example_writes_the_id_for_this_user_only(example, tmp_path):
    uid = stranger_uid()
    tmp_path.chmod(0o755)  # the stranger may look into the directory, only the file's mode protects the id
    id_path = tmp_path / "job.id"
    results = run_ranks(example, 2, id_path)
    assert all(code == 0 for code, _ in results), results
    assert stat.S_IMODE(os.stat(id_path).st_mode) == 0o600
    stranger = Stranger(lambda held: {"read": _attempt(id_path.read_bytes)})
    report = stranger.result()
    stranger.release()
    assert report["read"].startswith("PermissionError"), report

    # A file another user planted (say, with an id of their own job) is not read.
    planted = tmp_path / "planted.id"
    planted.write_bytes(id_path.read_bytes())
    os.chown(planted, uid, uid)
    rank1 = subprocess.run([str(example), "1", "2", str(planted)], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, TIMEOUT_S="2"), check=False)
    assert rank1.returncode != 0 and "not a private file of this user" in rank1.stderr, rank1.stderr



def test_another_users_runtime_directory_is_not_used(tmp_path, monkeypatch):
    uid = stranger_uid()
    theirs = tmp_path / "run-user-other"
    theirs.mkdir()
    os.chown(theirs, uid, uid)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(theirs))  # as sudo may pass it on
    assert os.path.dirname(user_secret.directory()) == tempfile.gettempdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert os.path.dirname(user_secret.directory()) == str(tmp_path)
