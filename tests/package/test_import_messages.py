"""What a new user sees when pycoll is used the wrong way round: importing the source folder instead of the
installed package, and making a Communicator by hand."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

import pycoll


def test_importing_from_the_source_tree_says_what_to_do():
    """From the repository root Python finds the source folder first (sys.path[0] is the current directory), and
    the source folder has no compiled modules: the error says so and how to get the installed package."""
    if Path(pycoll.__file__).resolve().parent == ROOT / "pycoll":
        pytest.skip("pycoll is installed in editable mode: the source tree is the installed package")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    for argv in (["-c", "import pycoll"], ["-m", "pycoll", "--version"]):
        result = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode != 0
        assert "you are importing pycoll from its source tree" in result.stderr, result.stderr
        assert "Run from another directory" in result.stderr and "editable mode" in result.stderr
        assert "No module named" not in result.stderr


def test_the_installed_package_imports_from_elsewhere(tmp_path):
    result = subprocess.run([sys.executable, "-c", "import pycoll; print(pycoll.__version__)"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == pycoll.__version__


def test_a_communicator_made_by_hand_points_to_init():
    with pytest.raises(TypeError, match=r"not created directly: call pycoll\.init\(\).*pycoll\.init_rank"):
        pycoll.Communicator()
