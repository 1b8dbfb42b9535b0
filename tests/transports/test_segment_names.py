"""Shared-memory segment names against another user of the host who creates them first, with real processes:
a job whose every plausible name is taken still starts (each segment's name carries fresh random bits of its
own, and a taken one is drawn again), and seeing one segment's name tells nothing about the others'."""

import contextlib
import os
import re
import select
import time

import pytest
from multiproc import Ranks, assert_all_ok
from shm_watch import SHM_DIR, ShmWatch
from strangers import Stranger, stranger_uid

pytestmark = pytest.mark.timeout(180)

WORLD = 4
ID_JOB = 28  # the unique id's job bytes (native/bootstrap/unique_id.c); old names carried 8 of them in hex
NAME = re.compile(r"pycoll-(\d+)-(\d+)-([0-9a-f]{32})")
ATTEMPTS = 8  # native/bootstrap/init_segments.c: SEGMENT_ATTEMPTS


def _plant(path):
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _siblings(name, pids):
    """Every name a watcher could guess from one it saw, whatever part of it is the job's: each of the other
    ranks and pids in the place of its own, the rest kept."""
    parts = name.split("-")
    if len(parts) != 4 or parts[0] != "pycoll":
        return []
    _, _, middle, last = parts
    return [f"pycoll-{p}-{a}-{b}" for p in pids for r in range(WORLD) for a, b in ((middle, r), (r, last))]


def _attacker(pids, job_tag, armed_w, stop_r):
    """As another user: every name of the old scheme for these pids taken up front (the pids are public and the
    job part shows on the first segment: this attacker wins every race), then, as each pycoll segment appears,
    its siblings. Returns how many names it planted."""
    def attack(_held):
        watch = ShmWatch()
        planted = set()
        for name in [f"pycoll-{p}-{job_tag}-{r}" for p in pids for r in range(WORLD)]:
            _plant(os.path.join(SHM_DIR, name))
            planted.add(name)
        os.write(armed_w, b"x")
        while True:
            seen = watch.names(timeout_s=5.0, also=[stop_r])
            for name in seen:
                for sibling in _siblings(name, pids):
                    if sibling not in planted:
                        _plant(os.path.join(SHM_DIR, sibling))
                        planted.add(sibling)
            if select.select([stop_r], [], [], 0)[0]:
                return {"planted": len(planted)}
    return attack


def _remove_names_of(pids, uid):
    """What the attacker (uid) left under the job's pids."""
    prefixes = tuple(f"pycoll-{p}-" for p in pids)
    for name in os.listdir(SHM_DIR):
        path = os.path.join(SHM_DIR, name)
        with contextlib.suppress(FileNotFoundError):
            if name.startswith(prefixes) and os.lstat(path).st_uid == uid:
                os.unlink(path)


def _wait_for(path, procs, timeout_s=30.0):
    """Until `path` exists (rank 0 wrote the id), failing at once when a rank ended first."""
    end = time.monotonic() + timeout_s
    while not os.path.exists(path):
        assert all(p.poll() is None for p in procs), "a rank ended before the id was written"
        assert time.monotonic() < end, f"no {path} within {timeout_s} s"
        time.sleep(0.005)


def _go(tmp_path):
    (tmp_path / "go").touch()


def test_another_user_who_takes_every_plausible_name_first_cannot_stop_the_job(tmp_path, no_segment_left):
    """Five 4-rank shm jobs, each under attack by user `nobody`, who knows the ranks' pids and the job's tag and
    watches /dev/shm: every job completes its all-reduce with the right sum on every rank (the old names,
    pycoll-<pid>-<job>-<rank>, were all taken: "File exists" on every rank)."""
    uid = stranger_uid()
    for attempt in range(5):
        work = tmp_path / str(attempt)
        work.mkdir()
        with Ranks(WORLD, "segment_names_worker.py", str(work), timeout=60.0) as job:
            pids = [p.pid for p in job.procs]
            _wait_for(work / "id", job.procs)
            job_tag = (work / "id").read_bytes()[ID_JOB:ID_JOB + 8].hex()
            armed_r, armed_w = os.pipe()
            stop_r, stop_w = os.pipe()
            stranger = Stranger(_attacker(pids, job_tag, armed_w, stop_r))
            try:
                os.close(armed_w)
                assert os.read(armed_r, 1) == b"x", "the attacker did not get ready"
                _go(work)
                reports = job.reports(deadline_s=120)
            finally:
                os.write(stop_w, b"x")
                attack = stranger.result()
                stranger.release()
                for fd in (armed_r, stop_r, stop_w):
                    os.close(fd)
                _remove_names_of(pids, uid)
        assert attack.get("planted", 0) >= WORLD * WORLD, attack
        assert_all_ok(reports)
        assert all(rep["result"] == [WORLD * (WORLD + 1) // 2] * 4 for rep in reports.values()), reports


def _run_forced(tmp_path, draws, planted_by_us=True):
    """One 4-rank job whose ranks' first `draws` segment names are forced to names the test made first: the
    reports, and how many of those planted names exist."""
    suffix = os.urandom(16).hex()
    with Ranks(WORLD, "segment_names_worker.py", str(tmp_path), f"{suffix}:{draws}", timeout=30.0) as job:
        planted = [os.path.join(SHM_DIR, f"pycoll-{p.pid}-{r}-{suffix}") for r, p in enumerate(job.procs)]
        try:
            for path in planted:
                _plant(path)
            _wait_for(tmp_path / "id", job.procs)
            _go(tmp_path)
            return job.reports(deadline_s=60)
        finally:
            for path in planted:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def test_a_taken_name_is_drawn_again_and_the_job_starts(tmp_path, no_segment_left):
    """Each rank's first three names are taken before it draws them: it draws again, and the job runs."""
    reports = _run_forced(tmp_path, 3)
    assert_all_ok(reports)
    assert all(rep["result"] == [WORLD * (WORLD + 1) // 2] * 4 for rep in reports.values()), reports


def test_names_taken_at_every_attempt_give_a_clear_error(tmp_path, no_segment_left):
    """Every attempt taken: each rank fails with an error that says so, not a hang nor "remove it"."""
    reports = _run_forced(tmp_path, ATTEMPTS)
    for rep in reports.values():
        assert not rep["ok"], rep
        assert "all taken" in rep["error"] and "/dev/shm" in rep["error"], rep


def test_one_segments_name_tells_nothing_of_the_others(tmp_path, no_segment_left):
    """Two jobs, every segment name seen as it is created: the pid and the rank, then 128 random bits of its
    own -- no part shared between two segments of a job or of two jobs, nothing of the unique id."""
    watch = ShmWatch()
    names, tags, pids = [], [], []
    try:
        for attempt in range(2):
            work = tmp_path / str(attempt)
            work.mkdir()
            with Ranks(WORLD, "segment_names_worker.py", str(work), timeout=30.0) as job:
                pids += [p.pid for p in job.procs]
                _wait_for(work / "id", job.procs)
                tags.append((work / "id").read_bytes()[ID_JOB:ID_JOB + 16].hex())
                _go(work)
                assert_all_ok(job.reports(deadline_s=60))
            names += [n for n in watch.names() if n.startswith(tuple(f"pycoll-{p}-" for p in pids[-WORLD:]))]
    finally:
        watch.close()
    assert len(names) == 2 * WORLD, names
    parsed = [NAME.fullmatch(n) for n in names]
    assert all(parsed), names
    assert sorted((int(m[1]), int(m[2])) for m in parsed) == sorted(
        (pid, r) for j in range(2) for r, pid in enumerate(pids[j * WORLD:(j + 1) * WORLD])), names
    randoms = [m[3] for m in parsed]
    assert len(set(randoms)) == len(randoms), names
    for tag in tags:
        assert not any(tag[i:i + 8] in n for n in names for i in range(0, len(tag) - 7, 2)), (tag, names)
