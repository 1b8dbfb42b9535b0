"""A second install of the same tree without build isolation (docs/development.md) reuses build/: nothing is
compiled again. With isolation pip makes a new build environment each time and scikit-build-core clears the
CMake cache, so docs/development.md documents this way for reinstalls and extras. Slow (one full build): -m stress."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.stress, pytest.mark.timeout(900)]


def _install(tree, target):
    return subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
                           "--target", str(target), "--upgrade", str(tree)],
                          capture_output=True, text=True, timeout=850)


def test_a_second_install_without_isolation_compiles_nothing(tmp_path):
    pytest.importorskip("scikit_build_core", reason="the build requirements are not installed here")
    pytest.importorskip("Cython", reason="the build requirements are not installed here")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    tree = tmp_path / "tree"
    for name in files.stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    first = _install(tree, tmp_path / "site")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "Building C object" in first.stdout + first.stderr
    second = _install(tree, tmp_path / "site")
    log = second.stdout + second.stderr  # pip -v passes the build's output on stderr
    assert second.returncode == 0, log[-3000:]
    assert "clearing cache" not in log
    assert "ninja: no work to do" in log, log[-3000:]
    assert "Building C object" not in log
