"""Another local user against a FileStore whose path runs through a directory she can write to (like /tmp): she
can neither have it use a link of hers, nor redirect it by swapping the link after the store checked the
directory. The stranger is a real process of user `nobody` (test_local_users.Stranger), so these tests need
root; they skip otherwise."""

import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
from multiproc import Ranks, assert_all_ok
from strangers import Stranger, stranger_uid

from pycoll.errors import PycollError, Timeout
from pycoll.rendezvous.store import FileStore

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def shared():
    """A directory every user can write to, outside pytest's private tmp_path so that the stranger reaches it."""
    path = Path(tempfile.mkdtemp(prefix="pycoll-shared-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _contents(directory):
    return {p.name: p.read_bytes() for p in Path(directory).iterdir()}


def _her_store(hers):
    """The stranger's own store directory, with her own values in it (what she would have a victim read)."""
    def attack(held):
        store = FileStore(hers, timeout=1.0)
        store.set("pycoll/unique_id", b"her id")
        store.add("n", 100)
        return sorted(os.listdir(hers))
    stranger = Stranger(attack)
    listing = stranger.result()
    stranger.release()
    assert "crashed" not in listing, listing
    return listing


def _swap_link(link, target):
    """The stranger replaces ``link`` by a link of hers to ``target``."""
    def attack(held):
        os.unlink(link)
        os.symlink(target, link)
        return os.readlink(link)
    stranger = Stranger(attack)
    report = stranger.result()
    stranger.release()
    assert report == str(target), report


def test_a_link_another_user_planted_is_refused(shared, tmp_path):
    uid = stranger_uid()
    shared.chmod(0o1777)  # like /tmp
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    job = shared / "job"

    def plant(held):
        os.symlink(victim, job)  # a link needs no access to its target
        return os.lstat(job).st_uid
    stranger = Stranger(plant)
    assert stranger.result() == uid
    stranger.release()
    with pytest.raises(PycollError, match=rf"{job} is a symbolic link owned by uid {uid}, not by this user"):
        FileStore(job, timeout=1.0)


def test_a_swapped_link_never_redirects_an_open_store(shared, tmp_path):
    uid = stranger_uid()
    shared.chmod(0o777)  # not sticky: she may replace an entry of another user's
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    job, hers = shared / "job", shared / "hers"
    os.symlink(victim, job)  # the victim's own link: accepted
    store = FileStore(job, timeout=1.0)
    store.set("mine", b"before")
    _her_store(hers)
    planted = _contents(hers)
    _swap_link(job, hers)
    assert os.lstat(job).st_uid == uid

    with pytest.raises(Timeout):
        store.get("pycoll/unique_id", timeout=0.3)  # hers is never read
    assert not store.check(["pycoll/unique_id"])
    assert store.add("n", 1) == 1  # not 101
    store.set("after", b"x")
    assert store.get("mine") == b"before"
    copy = store.with_secret(b"job")  # what init makes of a FileStore without a secret: the same directory
    copy.set("signed", b"v")
    assert FileStore(victim, timeout=1.0, secret=b"job").get("signed") == b"v"
    child = os.fork()
    if child == 0:  # pragma: no cover -- a forked child uses the inherited descriptor
        store.set("child", b"c")
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert store.get("child") == b"c"
    assert _contents(hers) == planted  # nothing written into her directory
    assert len(_contents(victim)) == 6  # mine, n, after, signed, child, and add()'s lock
    with pytest.raises(PycollError, match=str(job)):
        pickle.loads(pickle.dumps(store))  # reopened, the path leads elsewhere now: refused
    store.close()
    with pytest.raises(PycollError, match="closed"):
        store.get("mine")


def test_a_pickled_store_reopens_the_same_directory(tmp_path):
    store = FileStore(tmp_path / "store", timeout=1.0)
    store.set("k", b"v")
    again = pickle.loads(pickle.dumps(store))
    assert again.get("k") == b"v"
    again.close()
    store.close()
    os.rename(tmp_path / "store", tmp_path / "moved")
    os.mkdir(tmp_path / "store", 0o700)
    with pytest.raises(PycollError, match="no longer the directory the store was made with"):
        pickle.loads(pickle.dumps(store))


def test_a_job_forms_on_its_own_directory_when_the_link_is_swapped(shared, tmp_path):
    stranger_uid()
    shared.chmod(0o777)
    directory = tmp_path / "job-store"
    directory.mkdir(mode=0o700)
    job, hers, go = shared / "job", shared / "hers", tmp_path / "go"
    os.symlink(directory, job)
    _her_store(hers)
    planted = _contents(hers)
    with Ranks(2, "rdv_worker.py", "file_store", env={"TEST_STORE": str(job), "TEST_GO_FILE": str(go)},
               timeout=20) as ranks:
        ranks.wait_ready([0, 1])  # both stores are open
        _swap_link(job, hers)
        go.touch()
        reports = ranks.reports(deadline_s=60)
    assert_all_ok(reports)
    assert [reports[r]["sum"] for r in (0, 1)] == [3.0, 3.0], reports
    assert _contents(hers) == planted
    assert len(_contents(directory)) > 1  # the rendezvous ran there
