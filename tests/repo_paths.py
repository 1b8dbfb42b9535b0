"""Where the tests find the repository's other parts (docs/, examples/, bench/, native/, backends/): from the
root of the checkout, whichever folder of tests/ the test is in."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def markdown_files():
    """The project's Markdown: README.md, docs/ (all of it), the backends' and benchmarks' READMEs and the
    recorded benchmark tables (included in the docs)."""
    files = [ROOT / "README.md", ROOT / "backends" / "README.md", ROOT / "bench" / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "bench" / "results").glob("*.md"))
    return [f for f in files if f.exists() and "_build" not in f.parts]
