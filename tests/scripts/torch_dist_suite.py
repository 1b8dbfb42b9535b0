"""Runs tests of torch's own distributed test base (torch/testing/_internal/distributed/distributed_test.py,
the suite behind torch's test/distributed/test_distributed_spawn.py) through its hook for out-of-tree
backends: the backend's name is added to DistTestCases.backend_feature["plugin"], ["ddp"] and ["subgroup"]
before the suite is imported, as torch's UCC plugin does.

    python torch_dist_suite.py BACKEND WORLD_SIZE spawn|fork RESULTS.json TEST_NAME_PATTERN...

(shell-style patterns: test_all_reduce* runs every all-reduce test).

BACKEND: "pycoll"; "gloo", for comparison; or "pycoll-behind-gloo-gates": pycoll, with the suite imported as
for gloo, so that the tests it restricts to gloo by name run too (then told the backend is pycoll).
"spawn" starts each test's ranks as test_distributed_spawn.py does: fresh interpreters, which import torch and
the suite again (over 10 s a test on a busy machine); "fork" forks them from this process, which has both.
Writes {test name: {"outcome": "passed" | "failed" | "skipped", "detail": the reason or the error's last
lines, "seconds": ...}}. Spawned ranks import this file again (as __mp_main__), so everything the ranks need
happens at import; only the runner sits under __main__."""

import os
import sys

if __name__ == "__main__":
    (os.environ["PYCOLL_TEST_TORCH_SUITE_BACKEND"], os.environ["WORLD_SIZE"],
     os.environ["PYCOLL_TEST_TORCH_SUITE_START"]) = sys.argv[1:4]
BEHIND_GLOO_GATES = os.environ["PYCOLL_TEST_TORCH_SUITE_BACKEND"] == "pycoll-behind-gloo-gates"
os.environ["BACKEND"] = "gloo" if BEHIND_GLOO_GATES else os.environ["PYCOLL_TEST_TORCH_SUITE_BACKEND"]

import torch
from torch.testing._internal.common_distributed import DistTestCases

import pycoll.torch  # noqa: F401 -- registers "pycoll" (in the spawned ranks too)

for feature in ("plugin", "ddp", "subgroup"):
    DistTestCases.backend_feature[feature].add("pycoll")

from torch.testing._internal.distributed import distributed_test
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

if BEHIND_GLOO_GATES:
    distributed_test.BACKEND = os.environ["BACKEND"] = "pycoll"


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ["PYCOLL_TEST_TORCH_SUITE_START"] == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


def main():
    import fnmatch
    import json
    import time
    import traceback
    import unittest

    results_path, patterns = sys.argv[4], sys.argv[5:]
    names = [n for n in dir(DistributedTest._DistTestBase)
             if n.startswith("test_") and any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    results = {}

    class Recorder(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            self._start = time.monotonic()

        def _record(self, test, outcome, detail=""):
            results[test._testMethodName] = {"outcome": outcome, "detail": detail[-1500:],
                                             "seconds": round(time.monotonic() - self._start, 2)}
            with open(results_path, "w") as f:  # after every test, so a killed run still reports
                json.dump(results, f, indent=1)

        def addSuccess(self, test):
            self._record(test, "passed")

        def addSkip(self, test, reason):
            self._record(test, "skipped", reason)

        def addFailure(self, test, err):
            self._record(test, "failed", "".join(traceback.format_exception(*err)))

        addError = addFailure

        def addExpectedFailure(self, test, err):
            self._record(test, "failed", "expected failure")

        def addUnexpectedSuccess(self, test):
            self._record(test, "passed")

    suite = unittest.TestSuite(TestDistBackendWithSpawn(name) for name in names)
    suite.run(Recorder())


if __name__ == "__main__":
    main()
