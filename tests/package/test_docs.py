"""The documentation: every link of the project's Markdown stays inside the repository and resolves there; the
Sphinx site (docs/) builds with warnings as errors; the type stubs of the Cython modules match the modules.

The link rule is the project's: "The project documents itself (README, docs/): no link of the project may point
outside its repository." So a URL with a scheme (http, https, ftp, mailto, ...) anywhere in these files fails,
code blocks included, and every relative link must name a file of the repository (and, for a Markdown file
with a #fragment, one of its headings).
"""

import ast
import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT, markdown_files

DOCS = ROOT / "docs"
BINDINGS = ["abi", "buffer", "comm", "jax_ffi", "kernels", "settings", "sim", "testing", "vendor"]


def need(module, reason):
    """Import module, or skip -- unless PYCOLL_TEST_REQUIRE_DOCS=1 (CI's docs step), where a missing tool fails."""
    if os.environ.get("PYCOLL_TEST_REQUIRE_DOCS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason)


# An address of something outside the repository: "https://x", "http://x", "ftp://x", "mailto:a@b", "file:/x",
# "www.x.y" ... (not every "scheme://": torch's init_method="env://" names no place).
URL = re.compile(r"\b(?:(?:https?|ftps?|sftp|ssh|git|svn|rsync|s3|gs|wss?)://|mailto:|file:/|(?:git@|www\.)"
                 r"[a-z0-9-]+\.[a-z]{2,})\S*", re.I)
FENCE = re.compile(r"^(\s*)(```|~~~)")
INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.I)
AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>")


def external_urls(text):
    """Every URL-like string of text, wherever it is (prose, links, code)."""
    return [m.group(0) for m in URL.finditer(text)]


def _without_code(text, inline=True):
    """text with fenced code blocks and (inline=True) code spans blanked (a link inside code is not a link)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(re.sub(r"`+[^`]*`+", "", line) if inline else line)
    return "\n".join(out)


def link_targets(text):
    """The targets of the Markdown links, link reference definitions, autolinks and HTML href/src of text."""
    body = _without_code(text)
    targets = [m.group(1) for m in INLINE_LINK.finditer(body)]
    targets += [m.group(1) for line in body.splitlines() for m in [REFERENCE_DEF.match(line)] if m]
    targets += [m.group(1) for m in HTML_LINK.finditer(body)]
    targets += [m.group(1) for m in AUTOLINK.finditer(body)]
    return targets


def heading_slugs(path):
    """The anchors a Git host (and MyST's heading anchors) give the headings of a Markdown file."""
    slugs = set()
    for line in _without_code(path.read_text(encoding="utf-8"), inline=False).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            title = re.sub(r"[`*_]", "", m.group(1)).strip().lower()
            slugs.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return slugs


def link_problems(path, text, root=ROOT):
    """What is wrong with the links of one Markdown file of the repository at root (empty when nothing is)."""
    urls = external_urls(text)
    problems = [f"{path}: URL leaves the repository: {url}" for url in urls]
    for target in link_targets(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            if not any(target in url or url in target for url in urls):
                problems.append(f"{path}: link leaves the repository: {target}")
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path if not file_part else path.parent / file_part).resolve()
        if root not in dest.parents and dest != root:
            problems.append(f"{path}: link {target!r} points outside the repository")
        elif not dest.exists():
            problems.append(f"{path}: link {target!r}: {dest.relative_to(root)} does not exist")
        elif fragment and dest.suffix == ".md" and fragment not in heading_slugs(dest):
            problems.append(f"{path}: link {target!r}: no heading #{fragment} in {dest.relative_to(root)}")
    return problems


def test_the_checker_finds_what_it_must(tmp_path):
    """The link check itself, on a repository of two pages: an outside URL (in a link, an autolink, HTML or a
    code block), a missing file, a missing heading and a path out of the repository are each reported; good
    links are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "api.md").write_text("# API\n\n## Command line\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Title\n\nSee [the site](https://example.org/x), <http://example.org>, [api](api.md), "
                    "[cli](api.md#command-line), [gone](gone.md), [here](#title), [there](api.md#no-such), "
                    "[up](../../etc/passwd), <a href=\"ftp://h/f\">f</a>\n\n```\ncurl https://example.org/c\n```\n")
    problems = "\n".join(link_problems(page, page.read_text(), root=tmp_path))
    for bad in ["https://example.org/x", "http://example.org", "https://example.org/c", "ftp://h/f", "'gone.md'",
                "#no-such", "'../../etc/passwd' points outside"]:
        assert bad in problems, bad
    for good in ["'api.md'", "'api.md#command-line'", "'#title'"]:
        assert good not in problems, good
    assert len(problems.splitlines()) == 7


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(path):
    problems = link_problems(path, path.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_every_benchmark_results_file_has_its_docs_page():
    """docs/benchmarks/<name>.md includes bench/results/<name>.md, one page per recorded table."""
    missing = []
    for results in sorted((ROOT / "bench" / "results").glob("*.md")):
        page = DOCS / "benchmarks" / results.name
        if not page.exists() or f"../../bench/results/{results.name}" not in page.read_text():
            missing.append(results.name)
    assert not missing, f"bench/results files without a docs/benchmarks page that includes them: {missing}"


def test_index_has_an_embedding_section_of_existing_pages():
    text = (DOCS / "index.md").read_text()
    sections = re.findall(r"```\{toctree\}\n((?:[^`]*\n)*?)```", text)
    captions = {re.search(r":caption: (.*)", s).group(1): s for s in sections}
    assert "Embedding" in captions
    for section in sections:
        for entry in section.splitlines():
            if entry.strip() and not entry.startswith(":") and "*" not in entry:
                assert (DOCS / f"{entry.strip()}.md").exists(), f"toctree entry {entry.strip()!r} has no page"


@pytest.mark.timeout(300)
def test_strict_sphinx_build(tmp_path):
    """sphinx-build -W --keep-going -n: a warning (a broken reference, an autodoc failure, a missing include)
    fails the build. The built site has no link out of the repository either."""
    need("sphinx", "the docs extra is not installed (pip install '.[docs]')")
    need("myst_parser", "the docs extra is not installed (pip install '.[docs]')")
    out = tmp_path / "html"
    # From tmp_path, so that "python -m sphinx" imports the installed pycoll, not the source folder.
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                             "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    outside = set()
    for page in out.rglob("*.html"):
        for target in HTML_LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("javascript:"):
                outside.add(f"{page.relative_to(out)}: {target}")
    assert not outside, "\n".join(sorted(outside))
    assert (out / "reference.html").read_text().count('class="sig ') > 30  # autodoc produced the API


# An autodoc directive of the reference page: ".. autofunction:: pycoll.init_rank", ".. automodule:: pycoll.errors".
AUTODOC = re.compile(r"^\.\. auto(function|class|data|exception|attribute|method|module)::\s*(\S+)\s*$", re.M)


def reference_entries(text):
    """(the names the reference page documents one by one, the modules it documents with every member)."""
    names, modules = set(), set()
    for match in AUTODOC.finditer(text):
        kind, name = match.groups()
        if kind != "module":
            names.add(name)
            continue
        options = text[match.end():].split("```", 1)[0]
        if re.search(r"^\s*:members:\s*$", options, re.M):  # ":members:" alone: every public member
            modules.add(name)
        else:
            names.update(f"{name}.{m.strip()}" for m in re.findall(r":members:(.*)", options)[0].split(",")
                         if m.strip())
    return names, modules


def module_all(path):
    """The names of a module's __all__, read from its source (pycoll.jax and pycoll.ray need their optional
    extras to import)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} has no __all__")


def test_every_public_name_has_a_reference_entry():
    """Every name of pycoll.__all__, pycoll.jax's and pycoll.ray's has its own entry on docs/reference.md
    (an autodoc directive, or, for the op constants, the Ops section), and GradientBuckets' members have
    docstrings for autodoc to show."""
    import pycoll

    text = (DOCS / "reference.md").read_text(encoding="utf-8")
    names, modules = reference_entries(text)
    missing = []
    for name in pycoll.__all__:
        obj = getattr(pycoll, name)
        if isinstance(obj, str):  # SUM, PROD, ...: documented as text
            if f"`pycoll.{name}`" not in text:
                missing.append(f"pycoll.{name}")
            continue
        home = getattr(obj, "__module__", None)
        if not ({f"pycoll.{name}", f"{home}.{getattr(obj, '__qualname__', name)}"} & names or home in modules):
            missing.append(f"pycoll.{name}")
    for module in ("jax", "ray"):
        missing += [f"pycoll.{module}.{name}" for name in module_all(ROOT / "pycoll" / f"{module}.py")
                    if f"pycoll.{module}.{name}" not in names and f"pycoll.{module}" not in modules]
    assert not missing, f"public names without an entry on docs/reference.md: {', '.join(missing)}"
    undocumented = [n for n, v in vars(pycoll.GradientBuckets).items()
                    if not n.startswith("_") and not getattr(v, "__doc__", None)]
    assert not undocumented, f"GradientBuckets members without a docstring: {undocumented}"


def test_reference_entries_reads_the_directives():
    names, modules = reference_entries("```{eval-rst}\n.. autofunction:: pycoll.init\n```\n"
                                       "```{eval-rst}\n.. automodule:: pycoll.errors\n   :members:\n```\n"
                                       "```{eval-rst}\n.. automodule:: pycoll.tools.simulate\n"
                                       "   :members: simulate\n```\n"
                                       "```{eval-rst}\n.. autoclass:: pycoll.ray.PycollGroup\n   :members: a, b\n```\n")
    assert names == {"pycoll.init", "pycoll.tools.simulate.simulate", "pycoll.ray.PycollGroup"}
    assert modules == {"pycoll.errors"}


def test_c_examples_of_the_docs_compile_against_the_headers(tmp_path):
    """Every ```c block of docs/ compiles (-std=c11 -Wall -Wextra -Werror) against native/include, so a renamed or
    changed call in the headers fails here until the page follows."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    blocks = [(page, block) for page in sorted(DOCS.rglob("*.md"))
              for block in re.findall(r"^```c\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)]
    assert blocks, "docs/c_abi.md has a C example"
    for i, (page, block) in enumerate(blocks):
        source = tmp_path / f"example{i}.c"
        source.write_text(block)
        result = subprocess.run([compiler, "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Werror",
                                 f"-I{ROOT / 'native' / 'include'}", str(source)], capture_output=True, text=True)
        assert result.returncode == 0, f"{page.relative_to(ROOT)}, C block {i}:\n{result.stderr}"


def _stub_names(tree):
    """{name: member names or None} of a stub's top level; the members of each class."""
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else n.target.id
                                for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                or isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = None
        elif isinstance(node, ast.ImportFrom):  # only "import X as X" is a re-export in a stub
            names.update({a.asname: None for a in node.names if a.asname and a.asname == a.name})
    return names


@pytest.mark.parametrize("module", BINDINGS)
def test_stub_names_match_the_compiled_module(module):
    """Each pycoll/_bindings/<module>.pyi declares exactly the public names of the compiled module, and of each
    of its classes: a function added, removed or renamed in the .pyx fails here until the stub follows."""
    mod = importlib.import_module(f"pycoll._bindings.{module}")
    stub = _stub_names(ast.parse((ROOT / "pycoll" / "_bindings" / f"{module}.pyi").read_text()))
    public = {n for n in stub if not n.startswith("_")}
    runtime = {n for n in dir(mod) if not n.startswith("_") and not inspect.ismodule(getattr(mod, n))}
    assert public == runtime, f"only in the stub: {public - runtime}; only in the module: {runtime - public}"
    for name, members in stub.items():
        cls = getattr(mod, name)
        if members is None or getattr(cls, "__module__", None) != mod.__name__:
            continue
        have = {n for n in vars(cls) if not n.startswith("_")}
        declared = {n for n in members if not n.startswith("_")}
        assert declared == have, f"{name}: only in the stub: {declared - have}; only in the class: {have - declared}"


@pytest.mark.timeout(300)
def test_stubs_pass_mypy_stubtest():
    """mypy's stubtest compares every signature of the stubs with the compiled modules' (where mypy is installed,
    as in the docs extra). The allowlist holds only what Cython adds to every module."""
    need("mypy.stubtest", "mypy is not installed (pip install '.[docs]')")
    result = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--allowlist",
                             str(ROOT / "tests" / "stubtest_allowlist.txt"),
                             *[f"pycoll._bindings.{m}" for m in BINDINGS]],
                            cwd=ROOT / "tests", capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr


def test_py_typed_and_stubs_are_package_data():
    """py.typed and the stubs sit in the package folder that scikit-build-core copies into the wheel
    (wheel.packages = ["pycoll"]); where pycoll is installed from a wheel, they are there too."""
    assert (ROOT / "pycoll" / "py.typed").exists()
    for module in BINDINGS:
        assert (ROOT / "pycoll" / "_bindings" / f"{module}.pyi").exists()
    import pycoll
    installed = Path(pycoll.__file__).resolve().parent
    if installed != ROOT / "pycoll":  # not an editable install: the wheel's copy
        assert (installed / "py.typed").exists()
        assert sorted(p.name for p in (installed / "_bindings").glob("*.pyi")) == sorted(f"{m}.pyi" for m in BINDINGS)


# ---- the README: a newcomer's five minutes ------------------------------------------------------------------
README = ROOT / "README.md"
TEST_COMMAND = 'pip install ".[test]" && ruff check . && pytest'


def test_readme_opens_with_the_two_commands():
    """The README's first lines are its two commands: one installs and runs a real job, the other is the test
    command .ci/run runs (there with -q, without build isolation and with warnings as errors)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] == "```bash" and lines[5] == "```", lines[:6]
    assert lines[3].startswith("pip install . && pycoll run -n ")
    assert lines[4].split("#")[0].strip() == TEST_COMMAND
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r'^pip install [^\n]*"\.\[test\]" && ruff check \. && pytest$', ci, re.M)


def test_readme_is_short():
    """Under 200 lines of at most 120 characters: the rest lives in docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines"
    long = [n for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


def _pages():
    return sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "index")


def test_readme_page_index_lists_every_page():
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md\)", README.read_text(encoding="utf-8")))
    missing = [p for p in _pages() if p not in linked]
    assert not missing, f"docs pages the README's page index does not list: {missing}"


def test_every_page_is_in_a_toctree():
    text = (DOCS / "index.md").read_text()
    entries = {line.strip() for section in re.findall(r"```\{toctree\}\n((?:[^`]*\n)*?)```", text)
               for line in section.splitlines() if line.strip() and not line.startswith(":")}
    missing = [p for p in _pages() if p not in entries]
    assert not missing, f"docs pages in no toctree of docs/index.md: {missing}"
