"""Failures injected at random points (tests/scripts/fault_stress_worker.py): during init, inside every collective
kind, inside GradientBuckets and non-blocking calls, inside a shrink; any rank, rank 0 (the store's host)
included; over shared memory and TCP. After each: no survivor hung past the deadline, none got a wrong result,
the survivors agree on who is left and all-reduce the right sum, and no segment in /dev/shm and no process of
the job is left.

The default run injects a short form, each kind once per transport (seconds). The stress run, behind
`-m stress`, injects PYCOLL_TEST_FAULTS failures (default 500) at random kinds, ranks and instants, half over
each transport (PYCOLL_TEST_FAULTS_SEED picks them), and prints a tally (run it with -s to see it)."""

import collections
import json
import os
import random
import time
import uuid

import pytest
from multiproc import Ranks, segments_of

N = 4
TIMEOUT = 10.0  # the communicators' deadline
# A rank that dies before it registered is indistinguishable from a slow starter: the others wait for it until
# the deadline (Timeout), so the init faults run under a shorter one.
INIT_TIMEOUT = 4.0
DEADLINE_S = 3 * TIMEOUT + 20  # a survivor still running after this has hung
WORKER = "fault_stress_worker.py"
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier", "all_to_all",
               "gather", "scatter", "send_recv", "all_reduce_rmsnorm")
KINDS = ("init", *(f"coll:{c}" for c in COLLECTIVES), "buckets", "async", "shrink")
# The short form: each kind once, rank 0 (the store's host) among the victims; delays in ms.
SHORT = (("init", 2, 30.0), ("coll:all", 0, 150.0), ("buckets", 1, 80.0), ("async", 3, 60.0),
         ("shrink", 2, 40.0, 0, 2.0), ("coll:all", 3, 5.0))
SIGALRM_DEATH = -14  # the victim's end: the kernel's default action for SIGALRM


def job_processes(token):
    """The pids of live processes whose environment carries the job's token (its ranks and anything they
    started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if token in f.read():
                    found.append(int(pid))
        except OSError:  # gone meanwhile, or a process of another user
            pass
    return found


def inject(backend, kind, victim, delay_ms, victim2=-1, delay2_ms=0.0):
    """Run one job with one fault; the list of what went wrong (empty: nothing) and the survivors' reports."""
    token = uuid.uuid4().hex
    env = {"PYCOLL_BACKEND": backend, "PYCOLL_TEST_FAULT_JOB": token}
    what = f"{backend} {kind} victim {victim} at {delay_ms:.0f} ms" + (
        f", victim {victim2} {delay2_ms:.1f} ms into the shrink" if victim2 >= 0 else "")
    problems, reports = [], {}
    with Ranks(N, WORKER, kind, str(victim), str(delay_ms), str(victim2), str(delay2_ms), env=env,
               timeout=INIT_TIMEOUT if kind == "init" else TIMEOUT) as job:
        end = time.monotonic() + DEADLINE_S
        for r, p in enumerate(job.procs):
            try:
                out, err = p.communicate(timeout=max(0.1, end - time.monotonic()))
            except Exception:  # noqa: BLE001 -- subprocess.TimeoutExpired: the rank hung
                problems.append(f"{what}: rank {r} still running after {DEADLINE_S:.0f} s (hang)")
                continue
            if r == victim:
                if p.returncode != SIGALRM_DEATH:
                    problems.append(f"{what}: the victim exited {p.returncode} before its death: {err[-800:]}")
                continue
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if r == victim2:  # dies during or after the shrink: its death is all it must do
                continue
            if p.returncode != 0 or not lines:
                problems.append(f"{what}: rank {r} exited {p.returncode}: {out[-400:]} {err[-1200:]}")
                continue
            reports[r] = json.loads(lines[0])
            if len(lines) > 1:
                problems.append(f"{what}: rank {r}: {json.loads(lines[-1]).get('close_error')}")
        pids = [p.pid for p in job.procs]
    problems += check_reports(what, kind, victim, reports)
    left = segments_of(pids)
    if left:
        problems.append(f"{what}: segments left in /dev/shm: {sorted(left)}")
    stray = job_processes(token.encode())
    if stray:
        problems.append(f"{what}: processes of the job left: {stray}")
    return problems, reports


def check_reports(what, kind, victim, reports):
    problems = []
    for r, rep in reports.items():
        if rep["wrong"]:
            problems.append(f"{what}: rank {r} got wrong results: {rep['wrong'][:3]}")
        if "init_error" in rep:
            if kind != "init" or rep["init_error"] not in ("PeerFailure", "Timeout"):
                problems.append(f"{what}: rank {r}: init raised {rep['init_error']}: {rep['message']}")
            continue
        if rep.get("error") not in ("PeerFailure", "CommunicatorClosed", "CommunicatorRevoked"):
            problems.append(f"{what}: rank {r} saw {rep.get('error')} {rep.get('message', '')}")
        if rep.get("sum") is None:
            problems.append(f"{what}: rank {r} did not recover: {rep.get('shrink_error')} {rep.get('again')}")
            continue
        if victim in rep["members"]:
            problems.append(f"{what}: rank {r} kept the dead rank: {rep['members']}")
        if rep["sum"] != sum(m + 1.0 for m in rep["members"]):
            problems.append(f"{what}: rank {r}: sum {rep['sum']} over members {rep['members']}")
    recovered = [rep for rep in reports.values() if rep.get("sum") is not None]
    # Every survivor that recovered ended in the same communicator (a victim of the shrink may be in it or not).
    if len({tuple(rep["members"]) for rep in recovered}) > 1:
        problems.append(f"{what}: the survivors disagree on who is left: "
                        f"{ {r: rep['members'] for r, rep in reports.items()} }")
    # A rank that came through init must not be left without a communicator while another has one.
    if recovered and any("init_error" in rep for rep in reports.values()):
        problems.append(f"{what}: some ranks failed init, others recovered: {reports}")
    return problems


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_each_kind_of_fault_once(backend):
    problems = []
    for fault in SHORT:
        problems += inject(backend, *fault)[0]
    assert not problems, "\n".join(problems)


def plan(count, seed):
    """count faults: (backend, kind, victim, delay ms[, victim2, delay2 ms]) at random, half on each transport."""
    rng = random.Random(seed)
    faults = []
    for i in range(count):
        kind = rng.choice(KINDS)
        victim = rng.randrange(N)
        # init: from its first instant to past its end (it takes 0.2-1.5 s on two busy cores); loops: a few to
        # many calls in.
        delay = rng.uniform(0, 1500) if kind == "init" else rng.uniform(1, 200)
        fault = (("shm", "tcp")[i % 2], kind, victim, delay)
        if kind == "shrink":
            fault += (rng.choice([r for r in range(N) if r != victim]), rng.uniform(0, 15))
        faults.append(fault)
    return faults


@pytest.mark.stress
@pytest.mark.timeout(6 * 3600)
def test_random_faults():
    count = int(os.environ.get("PYCOLL_TEST_FAULTS", "500"))
    seed = int(os.environ.get("PYCOLL_TEST_FAULTS_SEED", "1"))
    problems, seen, started = [], collections.Counter(), time.monotonic()
    for i, fault in enumerate(plan(count, seed)):
        found, reports = inject(*fault)
        problems += found
        for line in found:  # as they come: a long run shows its findings before its end
            print(f"\n[{i + 1}/{count}] {line}", flush=True)
        seen[fault[:2]] += 1
        for rep in reports.values():
            seen["error " + str(rep.get("error") or rep.get("init_error"))] += 1
            if rep.get("again"):
                seen["shrank again"] += 1
    print(f"\n{count} faults (seed {seed}) in {time.monotonic() - started:.0f} s; {len(problems)} problems")
    for key, n in sorted(seen.items(), key=str):
        print(f"  {key}: {n}")
    assert not problems, "\n".join(problems)
