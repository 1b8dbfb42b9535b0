"""Sphinx configuration of pycoll's documentation (Markdown through myst-parser, API pages through autodoc).

Build (strict: a warning fails it), from the repository root, with pycoll installed (pip install ".[docs]"):

    sphinx-build -W --keep-going -n -b html docs build/docs

Pages outside docs/ (backends/README.md, bench/README.md, bench/results/*.md) are included, not copied, so
there is one copy of every text. No page links outside the repository (tests/package/test_docs.py checks it).
"""

import importlib.util
import inspect

# autodoc imports the installed pycoll (its compiled modules exist only there), never the source folder: run
# sphinx-build, not "python -m sphinx" from the repository root, which would put the source folder first.

project = "pycoll"
author = "the pycoll authors"
copyright = "the pycoll authors"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# The recorded tables of bench/results/ (included as they stand, one page each) go from a "#" title straight to
# "###" tables; MyST reports every such jump. That is their style, not a broken page, so that one check is off.
suppress_warnings = ["myst.header"]
myst_heading_anchors = 3  # "api.md#command-line"-style links to headings, as on a Git host
# In docstrings (reStructuredText), `x` is code, as in the Markdown pages.
default_role = "code"

# autodoc: the signatures as written in the source, members in source order, nothing reached over the network.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Only pycoll's own docstrings: a method that overrides torch's (pycoll.torch) without one of its own shows none.
autodoc_inherit_docstrings = False
# torch and ray are optional extras: without one, the reference of pycoll.torch or pycoll.ray is built against a
# stand-in module. Not jax: pycoll.jax registers its rules in jax's tables at import, which a stand-in refuses,
# so the docs extra installs jax.
autodoc_mock_imports = [name for name in ("torch", "ray") if importlib.util.find_spec(name) is None]

# Nitpicky (-n): every cross-reference must resolve. No intersphinx (it would link outside the repository), so
# the few names of other projects that signatures mention are listed here, by name: the standard C types of the
# C ABI page's declarations and the Python standard library's types in annotations.
nitpick_ignore = [("c:identifier", name) for name in ("int32_t", "int64_t", "uint32_t", "uint64_t", "size_t")]
nitpick_ignore += [("py:class", "pathlib.Path")]

html_theme = "alabaster"
html_theme_options = {"show_powered_by": False}
html_show_sourcelink = False
html_static_path = []


def _skip_overrides_without_docstring(app, what, name, obj, skip, options):
    """A method pycoll defines without a docstring of its own is left out, not shown with the docstring of the
    method it overrides (pycoll.torch's methods over torch's ProcessGroup would show torch's text)."""
    if what == "class" and inspect.isfunction(obj) and obj.__module__.startswith("pycoll") and not obj.__doc__:
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_overrides_without_docstring)
