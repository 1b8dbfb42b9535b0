"""The C layers only look down (docs/architecture.md, "Layers"): every `#include "..."` in native/ and backends/
names a file that exists, in its own layer or one below it. A helper two layers share lives in the lower one, so
an include that points up a layer -- a transport reaching into the algorithms, an algorithm into the
communicator -- fails here, naming the file, the line and both layers. Pure Python: it reads the sources."""

import os
import re

import pytest
from repo_paths import ROOT

pytestmark = pytest.mark.timeout(30)

NATIVE = os.path.join(ROOT, "native")
# Lowest first. include: the public C ABI (native/include/pycoll); backends: the vendor family, beside the
# transports (a vendor's point-to-point and memory table), which nothing in native/ includes.
LAYERS = ("include", "common", "kernels", "transport", "backends", "algorithms", "comm", "bootstrap", "jax")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)


def layer_of(path):
    """The layer of a source file (a path relative to ROOT), or None for a folder that has none."""
    parts = path.split(os.sep)
    if parts[0] == "backends":
        return "backends"
    layer = parts[1] if parts[0] == "native" and len(parts) > 2 else None
    return layer if layer in LAYERS else None


def sources():
    for top in ("native", "backends"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def resolve(source, target):
    """Where the compiler finds `#include "target"` from source: its own folder, then native/ and native/include
    (the library's include path); None where no file is there."""
    for base in (os.path.dirname(os.path.join(ROOT, source)), NATIVE, os.path.join(NATIVE, "include")):
        path = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(path):
            return os.path.relpath(path, ROOT)
    return None


def includes():
    """(source, line number, included text, resolved path) for every quoted include."""
    for source in sources():
        with open(os.path.join(ROOT, source), encoding="utf-8") as f:
            text = f.read()
        for match in INCLUDE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield source, line, match.group(1), resolve(source, match.group(1))


def test_every_source_folder_is_a_layer():
    unplaced = sorted({os.path.dirname(source) for source in sources() if layer_of(source) is None})
    assert not unplaced, f"folders in no layer (add them to LAYERS, in order): {unplaced}"


def test_every_include_names_a_file():
    missing = [f"{source}:{line}: \"{target}\"" for source, line, target, path in includes() if path is None]
    assert not missing, "includes of files that do not exist:\n" + "\n".join(missing)


def test_includes_never_point_up_a_layer():
    upward = []
    for source, line, target, path in includes():
        low, high = layer_of(source), path and layer_of(path)
        if low in LAYERS and high in LAYERS and LAYERS.index(high) > LAYERS.index(low):
            upward.append(f"{source}:{line}: \"{target}\" ({low} includes {high}, a layer above it)")
    assert not upward, f"layers (lowest first): {' < '.join(LAYERS)}\n" + "\n".join(upward)
