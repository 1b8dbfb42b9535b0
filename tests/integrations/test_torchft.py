"""pycoll.torchft.ProcessGroupPycoll (docs/torch.md): torchft's Manager and its DistributedDataParallel on 3
replica groups over pycoll, with torchft's own lighthouse, on 127.0.0.1; one replica killed (kill -9) mid
training. The survivors' next quorum goes without it, the group is reconfigured over pycoll, and training goes
on: the held-out loss keeps falling and the survivors end with equal weights."""

import time

import pytest

pytest.importorskip("torchft", reason="torchft is not installed (the torchft extra)")
from torchft_job import TorchftJob, lighthouse_program  # noqa: E402

if lighthouse_program() is None:
    pytest.skip("torchft's torchft_lighthouse program is not installed", allow_module_level=True)

N, VICTIM = 3, 2


@pytest.mark.timeout(330)
def test_torchft_over_pycoll_survives_a_killed_replica():
    survivors = [r for r in range(N) if r != VICTIM]
    with TorchftJob(N, "pycoll", stop=100) as job:
        job.start(time.monotonic() + 240)  # 3 processes importing torch: over a minute on 2 busy cores
        deadline = time.monotonic() + 80
        before = {r: job.commits_until(r, lambda c: c["n"] == N and c["step"] >= 3, deadline) for r in range(N)}
        killed = job.kill(VICTIM)
        after = {r: job.commits_until(r, lambda c: c.get("final"), deadline) for r in survivors}
    for r in survivors:
        commits = after[r][:-1]
        shrunk = [c for c in commits if c["n"] == N - 1]
        assert len(shrunk) >= 5, (r, before[r], commits)  # trained on without the dead replica
        assert all(c["n"] == N - 1 for c in commits[commits.index(shrunk[0]):]), (r, commits)
        # the held-out loss fell before the kill and kept falling after it
        assert before[r][-1]["loss"] < before[r][0]["loss"], (r, before[r])
        assert shrunk[-1]["loss"] < shrunk[0]["loss"] < before[r][-1]["loss"], (r, commits)
    assert after[survivors[0]][-1]["step"] == after[survivors[1]][-1]["step"]
    assert after[survivors[0]][-1]["params"] == after[survivors[1]][-1]["params"], "the survivors' weights differ"
    recovered = max(next(c for c in after[r] if c["n"] == N - 1)["t"] for r in survivors) - killed
    print(f"\ntorchft over pycoll: every survivor committed a step without the killed replica {recovered:.2f} s "
          "after the kill")
