"""Another user of the same host, for the tests of what pycoll shares on it (the unique id, secrets, stores,
segment names, failure sockets): a real process of user `nobody` (forked, then setuid). That needs root: the
tests skip otherwise."""

import json
import os
import pwd
import time

import pytest


def stranger_uid():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a process as another user")
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user 'nobody' to act as another user")


class Stranger:
    """A child process that becomes user `nobody` and runs ``attack()`` (its JSON-able result comes back by
    result()), then holds what it opened until release()."""

    def __init__(self, attack):
        uid = stranger_uid()
        self._result_r, result_w = os.pipe()
        hold_r, self._hold_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover -- the child
            code = 0
            try:
                os.close(self._result_r)
                os.close(self._hold_w)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                held = []
                report = attack(held)
                os.write(result_w, json.dumps(report).encode() + b"\n")
                os.read(hold_r, 1)  # until release()
            except BaseException as exc:  # noqa: BLE001 -- reported to the test
                os.write(result_w, json.dumps({"crashed": repr(exc)}).encode() + b"\n")
                code = 1
            os._exit(code)
        os.close(result_w)
        os.close(hold_r)

    def result(self, timeout=30.0):
        end = time.monotonic() + timeout
        data = b""
        while not data.endswith(b"\n") and time.monotonic() < end:
            chunk = os.read(self._result_r, 65536)
            if not chunk:
                break
            data += chunk
        return json.loads(data)

    def release(self):
        os.close(self._hold_w)
        os.close(self._result_r)
        _, status = os.waitpid(self.pid, 0)
        return status
