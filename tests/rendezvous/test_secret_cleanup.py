"""Stale per-port secret files (pycoll.rendezvous.user_secret) are removed by the next job that opens the
directory; those a running store holds, those read within the age limit and anything that is not a secret file
of this user are kept."""

import fcntl
import os
import threading
import time

import pytest
from multiproc import Ranks, assert_all_ok

from pycoll.rendezvous import secret_cleanup, user_secret

pytestmark = pytest.mark.timeout(60)

OLD = time.time() - 2 * secret_cleanup.STALE_AFTER_S


@pytest.fixture
def secrets_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    user_secret.read_or_create(1)  # makes the directory
    return user_secret.directory()


def _file(directory, name, *, old, content=b"x" * user_secret.SECRET_HEX_CHARS):
    path = os.path.join(directory, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(content)
    if old:
        os.utime(path, (OLD, OLD))
    return path


def test_stale_files_go_and_live_young_or_foreign_ones_stay(secrets_dir, tmp_path):
    go = tmp_path / "go"
    with Ranks(2, "rdv_worker.py", "late", env={"TEST_LATE": "1", "TEST_GO_FILE": str(go)}, timeout=30) as ranks:
        live = user_secret.secret_path(ranks.port)
        ranks.wait_ready([0])
        deadline = time.monotonic() + 20
        while not os.path.exists(live) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # rank 0's store is up and holds its file
        os.utime(live, (OLD, OLD))  # a job running for hours
        stale = _file(secrets_dir, "store-2.secret", old=True)
        young = _file(secrets_dir, "store-3.secret", old=False)
        abandoned = _file(secrets_dir, ".store-4.secret.123.abcd", old=True)  # a publisher that died
        other = _file(secrets_dir, "notes", old=True)
        target = _file(tmp_path, "elsewhere", old=True)
        os.symlink(target, os.path.join(secrets_dir, "store-5.secret"))
        user_secret.read_or_create(6)  # the next job
        left = set(os.listdir(secrets_dir))
        go.touch()
        reports = ranks.reports(deadline_s=40)
    assert_all_ok(reports)  # the job whose file was old but held used it throughout
    assert os.path.basename(live) in left
    assert not os.path.exists(stale) and not os.path.exists(abandoned)
    assert os.path.exists(young) and os.path.exists(other) and os.path.exists(target)
    assert "store-5.secret" in left  # a link is neither followed nor removed
    # Once its job is over nothing holds the live port's file: when old, the next job removes it.
    os.utime(live, (OLD, OLD))
    user_secret.read_or_create(6)
    assert not os.path.exists(live)


def test_a_file_read_recently_is_kept_and_the_cost_is_bounded(secrets_dir):
    reread = _file(secrets_dir, "store-7.secret", old=True)
    user_secret.read_or_create(7)  # a job re-initialising on port 7 reads it: marked in use
    names = [f"store-{100 + i}.secret" for i in range(secret_cleanup.MAX_REMOVALS + 4)]
    for i, name in enumerate(names):
        path = _file(secrets_dir, name, old=True)
        os.utime(path, (OLD + i, OLD + i))
    user_secret.read_or_create(8)
    assert os.path.exists(reread)
    left = sorted(n for n in os.listdir(secrets_dir) if n in names)
    assert left == names[secret_cleanup.MAX_REMOVALS:]  # the oldest went first, and no more than the bound


def test_a_reader_never_uses_a_file_removed_under_it(secrets_dir):
    first = user_secret.read_or_create(9)
    path = user_secret.secret_path(9)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a cleanup in the middle of removing it
    got = []
    reader = threading.Thread(target=lambda: got.append(user_secret.read_or_create(9)))
    reader.start()
    time.sleep(0.2)
    assert not got  # the reader waits for the removal to finish
    os.unlink(path)
    os.close(fd)
    reader.join(10)
    assert got and got[0] != first  # a new secret, published after the removal
    assert user_secret.read_or_create(9) == got[0]
