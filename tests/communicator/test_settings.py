"""The settings registry (native/common/settings.h, pycoll/settings.py): every PYCOLL_* variable declared once,
read through it in Python and C, documented from it; bad values and unknown names reported."""

import os
import re
import subprocess
import sys
import warnings

import pytest
from repo_paths import ROOT

import pycoll
from pycoll import settings
from pycoll._bindings.abi import STATUS_INVALID


def test_documented_table_is_the_registrys():
    """The table of docs/getting_started.md is `pycoll config --env markdown`'s output: a setting added, renamed
    or redocumented in native/common/settings.h without regenerating it fails here."""
    page = (ROOT / "docs" / "getting_started.md").read_text()
    table = settings.markdown_table()
    assert table in page, "regenerate the table of docs/getting_started.md with `pycoll config --env markdown`"
    documented = set(re.findall(r"^\| `(PYCOLL_[A-Z0-9_]+)` \|", page, re.MULTILINE))
    assert documented == set(settings.REGISTRY)


def _reads_outside_the_registry(path):
    text = path.read_text(errors="replace")
    names = re.findall(r'(?:getenv|environ\.get|environ\[)\(?\s*"(PYCOLL_[A-Z0-9_]+)"', text)
    return [name for name in names if not name.startswith(settings.OWN_PREFIXES)]  # the tests' and benches' own


def test_no_source_reads_a_pycoll_variable_but_through_the_registry():
    sources = [p for folder in ("native", "backends", "pycoll") for p in (ROOT / folder).rglob("*")
               if p.suffix in (".c", ".h", ".py", ".pyx", ".pxi")]
    offenders = {str(p.relative_to(ROOT)): names for p in sources if (names := _reads_outside_the_registry(p))}
    assert offenders == {}


def test_a_value_read_has_its_declared_type_and_default():
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "PYCOLL_SPIN_US": "2.5", "PYCOLL_ALLOW_INSECURE": "1",
           "PYCOLL_SOCKET_IFNAME": ""}
    assert settings.get("PYCOLL_SHM_RING_BYTES", env) == 65536
    assert settings.get("PYCOLL_SPIN_US", env) == 2.5
    assert settings.get("PYCOLL_ALLOW_INSECURE", env) is True
    assert settings.get("PYCOLL_SOCKET_IFNAME", env) is None  # empty is unset, and it has no default
    assert settings.get("PYCOLL_BACKEND", {}) == "cpu"
    from pycoll.rendezvous.store import DEFAULT_MAX_BYTES  # TCPStore(max_bytes=None)'s, the same
    assert settings.get("PYCOLL_STORE_MAX_BYTES", {}) == DEFAULT_MAX_BYTES


@pytest.mark.parametrize(("name", "text", "expects"), [
    ("PYCOLL_SHM_RING_BYTES", "65537", "a whole number of at least 4096 that is a power of two"),
    ("PYCOLL_SHM_RING_BYTES", "2048", "a whole number of at least 4096 that is a power of two"),
    ("PYCOLL_STORE_MAX_BYTES", "lots", "a whole number of at least 1"),
    ("PYCOLL_SPIN_US", "soon", "a number"),
    ("PYCOLL_ALLOW_INSECURE", "yes", "1 (on) or 0 (off)"),
    ("PYCOLL_SIMD", "sse9", "one of scalar, avx2, avx512"),
])
def test_a_bad_value_is_a_setting_error_naming_the_variable_and_what_it_expects(name, text, expects):
    with pytest.raises(pycoll.SettingError) as info:
        settings.get(name, {name: text})
    assert (info.value.name, info.value.value, info.value.expects) == (name, text, expects)
    assert str(info.value) == f"{name}={text!r}: expected {expects}"
    assert isinstance(info.value, ValueError)


def test_a_bad_value_reaches_the_user_at_init(monkeypatch):
    monkeypatch.setenv("PYCOLL_ALGORITHM", "bogus")
    with pytest.raises(pycoll.SettingError, match="PYCOLL_ALGORITHM='bogus': expected one of auto, ring"):
        pycoll.init(rank=0, world_size=1, backend="tcp")


def test_an_unknown_variable_is_warned_about_once_naming_the_closest(monkeypatch):
    monkeypatch.setattr(settings, "_checked", [])
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAM", "eth0")
    monkeypatch.setenv("PYCOLL_TEST_ANYTHING", "1")  # the test suite's own knobs are not the library's
    with pytest.warns(UserWarning) as record:
        settings.get("PYCOLL_BACKEND")
    messages = [str(w.message) for w in record]
    assert messages == ["PYCOLL_SOCKET_IFNAM is not a pycoll setting and is ignored; did you mean "
                        "PYCOLL_SOCKET_IFNAME?"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings.get("PYCOLL_BACKEND")  # once per process


def test_an_unknown_variable_like_no_other_gets_pointed_at_the_list(monkeypatch):
    assert settings.unknown({"PYCOLL_ZZZZZZZZZZZZZZ": "1", "PYCOLL_SIMD": "avx2"}) == [("PYCOLL_ZZZZZZZZZZZZZZ", None)]


def _config(*args, env):
    return subprocess.run([sys.executable, "-m", "pycoll", "config", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd="/")


def test_config_env_lists_every_setting_with_its_value_default_and_doc():
    env = dict(os.environ, PYCOLL_SPIN_US="50", PYCOLL_SPIN_UZ="5")
    out = _config("--env", env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["variable", "value", "default", "meaning"]
    spin = next(line for line in lines if line.startswith("PYCOLL_SPIN_US "))
    assert spin.split()[:3] == ["PYCOLL_SPIN_US", "50", "-"]
    assert settings.REGISTRY["PYCOLL_SPIN_US"].doc in spin
    backend = next(line for line in lines if line.startswith("PYCOLL_BACKEND "))
    assert backend.split()[:3] == ["PYCOLL_BACKEND", "(unset)" if "PYCOLL_BACKEND" not in env else env[
        "PYCOLL_BACKEND"], "cpu"]
    assert {line.split()[0] for line in lines[1:len(settings.REGISTRY) + 1]} == set(settings.REGISTRY)
    assert "PYCOLL_SPIN_UZ is not a pycoll setting (did you mean PYCOLL_SPIN_US?)" in lines
    assert _config("--env", "markdown", env=env).stdout == settings.markdown_table()


def test_the_c_side_reads_through_the_same_table():
    """PYCOLL_HOSTID is read in C (unique_id.c, setting_text): set, it is the host identity; empty, unset."""
    code = "from pycoll._bindings.comm import host_identity; print(host_identity())"
    def identity(value):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                             env=dict(os.environ, PYCOLL_HOSTID=value))
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()
    assert identity("the-same-host") == "the-same-host"
    assert identity("") not in ("", "the-same-host")


@pytest.fixture(scope="module")
def settings_program(tmp_path_factory):
    from c_programs import build

    return build(tmp_path_factory, "settings_test")


@pytest.mark.parametrize(("name", "text"), [("PYCOLL_SIMD", "avx3"), ("PYCOLL_SHM_STREAMING", "maybe"),
                                            ("PYCOLL_SPIN_US", "soon")])
def test_a_bad_value_is_refused_alike_by_the_c_init_and_by_python(settings_program, monkeypatch, name, text):
    """A C embedder's pycoll_comm_init_rank refuses the value with PYCOLL_ERR_INVALID (it used to ignore it),
    and its message is Python's SettingError, word for word, at settings.get and at init."""
    out = subprocess.run([str(settings_program)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, **{name: text}))
    assert out.returncode == 0, out.stdout + out.stderr
    with pytest.raises(pycoll.SettingError) as python:
        settings.get(name, {name: text})
    assert out.stdout.strip() == f"refused: {STATUS_INVALID}: {python.value}"
    monkeypatch.setenv(name, text)
    with pytest.raises(pycoll.SettingError) as at_init:
        pycoll.init(rank=0, world_size=1)
    assert str(at_init.value) == str(python.value)


def test_the_c_init_runs_with_good_values(settings_program):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYCOLL_")}
    out = subprocess.run([str(settings_program)], capture_output=True, text=True, timeout=60,
                         env=dict(env, PYCOLL_SIMD="scalar", PYCOLL_SHM_RING_BYTES="65536"))
    assert (out.returncode, out.stdout.strip()) == (0, "init ok"), out.stdout + out.stderr
