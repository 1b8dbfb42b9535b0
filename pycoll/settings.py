"""pycoll's environment variables: each PYCOLL_* variable is declared once, in libpycoll's table
(native/common/settings.h: name, type, default, doc), and every Python read goes through get() here, which has
the C library parse and check the value: one set of rules for Python users and C embedders. A value a variable
cannot take is a SettingError naming the variable and what it expects; an unknown PYCOLL_* variable (a typo,
usually) is warned about once, naming the closest known one. `pycoll config --env` lists them, and the table of
docs/getting_started.md is markdown_table()'s output."""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple

from pycoll._bindings import settings as _settings
from pycoll._bindings.settings import SETTINGS

__all__ = ["Setting", "REGISTRY", "get", "check_values", "unknown", "check_environment", "markdown_table", "describe"]

# Variables of pycoll's own test suite and CI (PYCOLL_TEST_*) and of its benchmarks' peers (PYCOLL_BENCH_*,
# read by pycoll.tools.bench): not the library's, never warned about.
OWN_PREFIXES = ("PYCOLL_TEST_", "PYCOLL_BENCH_")


class Setting(NamedTuple):
    name: str
    type: str  # "text", "path", "int", "float", "flag" or "choice"
    default: str | None  # what an unset or empty variable means, as text; None: the doc says
    choices: tuple
    min: float
    power_of_two: bool
    doc: str

    def expects(self) -> str:
        """What a value must be, for messages (the C library's words)."""
        return _settings.expects(self.name)

    def parse(self, text: str):
        """The typed value of `text`, or SettingError: parsed and checked by libpycoll (native/common/settings.c),
        by the rules and with the message a C embedder gets from pycoll_comm_init_rank."""
        return _settings.parse(self.name, text)


REGISTRY = {row["name"]: Setting(**row) for row in SETTINGS}


def get(name: str, env=None):
    """The value of the PYCOLL_* variable `name` in `env` (default os.environ), typed by its declaration: its
    default when unset or empty, None when it has none. The first read warns about unknown PYCOLL_* names."""
    setting = REGISTRY[name]  # a KeyError here is a variable nobody declared in native/common/settings.h
    check_environment()
    text = (os.environ if env is None else env).get(name) or setting.default
    return None if text is None else setting.parse(text)


def check_values(env=None):
    """Parse every declared variable `env` (default os.environ) sets, in the table's order: the first bad one is
    a SettingError, as pycoll_comm_init_rank refuses it in C (pycoll_settings_check) -- the same one, the same
    words, also for the variables only C reads (PYCOLL_SIMD)."""
    env = os.environ if env is None else env
    for setting in REGISTRY.values():
        if env.get(setting.name):
            setting.parse(env[setting.name])


def unknown(env=None) -> list[tuple[str, str | None]]:
    """(name, the closest known name or None) for each PYCOLL_* variable in `env` that no one declared."""
    env = os.environ if env is None else env
    names = [name for name in sorted(env) if name.startswith("PYCOLL_") and name not in REGISTRY
             and not name.startswith(OWN_PREFIXES)]
    if not names:
        return []
    import difflib  # here, not at the top: only a misspelt name needs it, and every rank imports this module

    return [(name, next(iter(difflib.get_close_matches(name, REGISTRY, n=1, cutoff=0.6)), None)) for name in names]


_checked = []  # once per process


def check_environment():
    """Warn, once per process, about each unknown PYCOLL_* variable in os.environ."""
    if _checked:
        return
    _checked.append(True)
    for name, closest in unknown():
        hint = f"did you mean {closest}?" if closest else "`pycoll config --env` lists the known ones"
        warnings.warn(f"{name} is not a pycoll setting and is ignored; {hint}", stacklevel=3)


def _default_text(setting):
    return "-" if setting.default is None else f"`{setting.default}`"


def markdown_table() -> str:
    """The table of environment variables in docs/getting_started.md (tests/communicator/test_settings.py keeps
    the two the same)."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {_default_text(s)} | {s.doc} |" for s in REGISTRY.values()]
    return "\n".join(rows) + "\n"


def describe(env=None) -> list[tuple[str, str, str, str]]:
    """(name, value now, default, doc) for every setting, for `pycoll config --env`."""
    env = os.environ if env is None else env
    return [(s.name, env.get(s.name) or "(unset)", "-" if s.default is None else s.default, s.doc)
            for s in REGISTRY.values()]
