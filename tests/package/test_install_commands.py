"""Every `pip install` the documentation shows installs what it means to: one that names pycoll by name names its
distribution (pyproject.toml's [project] name; "pycoll" on the package index is an unrelated project), and every
extra it asks for, by name or from the checkout (".[test]"), is one pyproject.toml declares."""

import re
import shlex
from pathlib import Path

import pytest
from repo_paths import ROOT, markdown_files

PYPROJECT = (ROOT / "pyproject.toml").read_text()
# The other project's name on the package index: a command naming it installs that project, not this one.
TAKEN = "pycoll"
# Options of pip install that take a value (the value is no requirement).
VALUED = {"-r", "--requirement", "-c", "--constraint", "-t", "--target", "-d", "--dest", "-i", "--index-url",
          "--extra-index-url", "-f", "--find-links", "--prefix", "--root", "-C", "--config-settings", "--python"}
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
LOCAL = re.compile(r"^(\.{1,2}|/)[^\[]*(?:\[([^\]]*)\])?$")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_name(text=PYPROJECT):
    return re.search(r'^\[project\]\n(?:.*\n)*?name\s*=\s*"([^"]+)"', text, re.M).group(1)


def declared_extras(text=PYPROJECT):
    section = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[)", text, re.M | re.S).group(1)
    return set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9_-]*)\s*=", section, re.M))


def install_commands(text):
    """The argument lists of the `pip install` commands of a Markdown text (code blocks, code spans and prose),
    each cut where its shell command ends (&&, ;, |, a comment, a parenthesis, the end of a code span)."""
    commands = []
    for match in re.finditer(r"\bpip install\b([^\n`]*)", text):
        lexer = shlex.shlex(match.group(1), posix=True, punctuation_chars=True)
        lexer.wordchars += "[],!"
        args = []
        try:
            for token in lexer:
                if token and set(token) <= set("();<>|&"):
                    break
                args.append(token)
        except ValueError:  # an unclosed quote: the command runs on past this line; keep what came before
            pass
        commands.append(args)
    return commands


def requirements(args):
    """The requirements of one pip install argument list (options and their values left out)."""
    reqs, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-e", "--editable"):
            continue
        elif arg.startswith("-"):
            skip = arg in VALUED
        else:
            reqs.append(arg)
    return reqs


def problems(text, dist, extras):
    """What is wrong with the install commands of one text (empty when nothing is)."""
    out = []
    for args in install_commands(text):
        command = "pip install " + " ".join(args)
        for req in requirements(args):
            local = LOCAL.match(req)
            if local:
                asked = local.group(2)
            else:
                named = REQUIREMENT.match(req)
                if named is None:
                    continue
                name, asked = canonical(named.group(1)), named.group(2)
                if name == canonical(TAKEN):
                    out.append(f"{command!r}: {TAKEN!r} on the package index is another project; name {dist!r}")
                    continue
                if name != canonical(dist):
                    continue  # a third-party package (numpy, ray, ...)
            unknown = sorted({e.strip() for e in (asked or "").split(",") if e.strip()} - extras)
            if unknown:
                out.append(f"{command!r}: no extra {', '.join(unknown)} in pyproject.toml")
    return out


def test_the_checker_finds_what_it_must():
    text = ('```\npip install "pycoll[jax]"   # JAX\npip install ".[test]" && pytest\n```\n'
            "Then `pip install pycoll`, `pip install 'dist-name[ray,nope]'`, (pip install numpy) and\n"
            "`pip install --no-build-isolation -Ccmake.define.X=ON \".[tset]\"`; `pip install -e .` and\n"
            "`pip install -U 'ray>=2.60'` are fine, so are `pip install Dist_Name[jax]` and "
            "`pip install \".[test]\"`.\n")
    found = "\n".join(problems(text, "dist-name", {"test", "jax", "ray"}))
    assert "'pip install pycoll[jax]': 'pycoll' on the package index" in found
    assert "'pip install pycoll': 'pycoll'" in found
    assert "'pip install dist-name[ray,nope]': no extra nope" in found
    assert "no extra tset" in found
    assert len(found.splitlines()) == 4, found
    assert install_commands("`pip install \".[test]\" && ruff check .`") == [[".[test]"]]


def test_the_distribution_is_not_the_taken_name():
    assert canonical(distribution_name()) != canonical(TAKEN)
    assert {"test", "jax", "ray"} <= declared_extras()


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_install_commands_name_the_distribution_and_its_extras(path):
    found = problems(path.read_text(encoding="utf-8"), distribution_name(), declared_extras())
    assert not found, "\n".join(found)


def test_the_docs_show_installs_by_name_and_from_the_checkout():
    """The check above has something to check: the docs show both kinds of command."""
    commands = [req for path in markdown_files() for args in install_commands(path.read_text(encoding="utf-8"))
                for req in requirements(args)]
    assert any(canonical(REQUIREMENT.match(r).group(1)) == canonical(distribution_name())
               for r in commands if REQUIREMENT.match(r))
    assert any(LOCAL.match(r) and "[" in r for r in commands)


def test_python_sources_name_the_distribution():
    """Error messages, skip reasons and examples that tell a user what to install name the distribution too."""
    pattern = re.compile(r"""pip install [\\"']*""" + TAKEN + r"""(?![\w-])""")
    offenders = [f"{p.relative_to(ROOT)}:{n}" for folder in ("pycoll", "examples", "tests", "bench")
                 for p in sorted((ROOT / folder).rglob("*.py")) if p != Path(__file__).resolve()
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders
