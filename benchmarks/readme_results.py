"""The README and the docs quote stored results, never a hand-typed copy of them.

A quoted part of README.md or of a page under docs/ sits between two markers naming its
source, a results file under benchmarks/results/ and, after ``#``, the section of it (a
heading's text, lower case, words joined by ``-``; none: the file's first section), from its
heading to the next heading:

    <!-- results: benchmarks/results/first_minute.md#warm-up-and-the-first-lookup -->
    ...the section, as the command that made it wrote it...
    <!-- /results -->

``python benchmarks/readme_results.py`` copies every quoted section from its file again, in
every one of those files; ``--check`` says which differ (tests/test_docs.py runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_QUOTE = re.compile(r"(<!-- results: (\S+?) -->\n)(.*?)(<!-- /results -->)", re.S)


def files() -> list[Path]:
    """README.md and every Markdown page under docs/: the files that may quote results."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def section(source: str) -> str:
    """The text a marker names (``path#anchor``): under its heading, up to the next one."""
    path, _, anchor = source.partition("#")
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    marks = [(i, re.match(r"(#+)\s+(.*)", line)) for i, line in enumerate(lines)]
    headings = [(i, len(m.group(1)), _slug(m.group(2))) for i, m in marks if m]
    if not headings:
        raise ValueError(f"{path}: no heading")
    if anchor:
        found = [i for i, _, slug in headings if slug == anchor]
        if not found:
            raise ValueError(f"{path}: no section #{anchor}")
        start = found[0]
    else:
        start = headings[0][0]
    end = next((i for i, _, _ in headings if i > start), len(lines))
    return "\n".join(lines[start + 1 : end]).strip() + "\n"


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def quoted(text: str) -> str:
    """``text`` (a README or a page) with every quoted section copied again from its source."""
    return _QUOTE.sub(lambda m: m.group(1) + section(m.group(2)) + m.group(4), text)


def stale(text: str) -> list[str]:
    """The sources whose quote in ``text`` differs from what they hold now."""
    return [m.group(2) for m in _QUOTE.finditer(text) if m.group(3) != section(m.group(2))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="say what differs; change nothing")
    args = parser.parse_args()
    differ = 0
    for path in files():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        if args.check:
            for source in stale(text):
                print(f"{name} quotes {source} differently from the file")
                differ += 1
        elif (new := quoted(text)) != text:
            path.write_text(new, encoding="utf-8")
            print(f"{name}: quotes copied again")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
