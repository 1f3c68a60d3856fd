"""Before and after issue #34 (one request flow for every adapter), side by side.

    python benchmarks/refactor_issue34.py --old 998d3a3   # the commit before the refactor

Builds a worktree of the old commit and compares it with this tree: lines in the adapters,
copies of the flow in them, the files one LangChain call passes through (a semantic hit, a
miss written back), the cost of an L1 hit through each framework (old and new interleaved,
each in its own process), and the differential run of ``refactor_diff.py`` (every call's
answer, tier and model calls).  Writes ``benchmarks/results/refactor_issue34.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "refactor_issue34.md"
ADAPTERS = ("langchain_tricache", "llama_index_tricache")
# what a hand-written flow around the model call is made of, in an adapter
FLOW_MARKS = {
    "coalescing turns": r"\.a?turn\(",
    "lookups": r"\.a?lookup\(",
    "write-backs": r"\.a?update(_answer)?\(",
    "freshness stamps": r"\bbegan\b",
    "FAQ special cases": r"tier == \"faq\"",
}

_TRACE = r"""
import os, sys, tempfile
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_tricache import CachedChatModel
from tricache import Cache
home = tempfile.mkdtemp()
cache = Cache(path=os.path.join(home, "c.sqlite3"), warm=True)
inner = GenericFakeChatModel(messages=iter([AIMessage(f"Answer {i}.") for i in range(10)]))
model = CachedChatModel(inner=inner, tricache=cache)
model.invoke("How do I reset my password?")  # warm every import and table
roots = [os.path.realpath(p) for p in sys.argv[1:]]
def walk(call):
    seen, order = [], []
    def profile(frame, event, arg):
        if event == "call":
            path = os.path.realpath(frame.f_code.co_filename)
            if any(path.startswith(r) for r in roots) and (not order or order[-1] != path):
                order.append(path)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    back = sum(1 for i, p in enumerate(order) if p in order[:i])
    return len(set(order)), back
print(walk(lambda: model.invoke("How can I reset my password?")))      # a semantic hit
print(walk(lambda: model.invoke("What is the capital of Peru?")))      # a miss, written back
"""

_JUDGED = r"""
import os, tempfile
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_tricache import CachedChatModel
from tricache import Cache
from tricache.semantic.guards.cacheable import is_cacheable
judged = []
def cacheable(question):
    judged.append(question)
    return is_cacheable(question)
cache = Cache(path=os.path.join(tempfile.mkdtemp(), "c.sqlite3"), cacheable=cacheable, warm=True)
inner = GenericFakeChatModel(messages=iter([AIMessage(f"Answer {i}.") for i in range(4)]))
model = CachedChatModel(inner=inner, tricache=cache)
model.invoke("How do I reset my password?")  # warm
judged.clear()
model.invoke("What is the capital of Peru?")  # a miss, written back and indexed
print(len(judged))
"""

_L1_HIT = r"""
import os, sys, tempfile, time
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import MockLLM
from langchain_tricache import CachedChatModel
from llama_index_tricache import TriCacheLLM
from tricache import Cache
cache = Cache(path=os.path.join(tempfile.mkdtemp(), "c.sqlite3"), semantic=False, faq=False)
inner = GenericFakeChatModel(messages=iter([AIMessage("Sure.")]))
lc = CachedChatModel(inner=inner, tricache=cache)
li = TriCacheLLM(MockLLM(max_tokens=4), cache=cache)
question = [ChatMessage(role="user", content="How do I reset my password?")]
lc.invoke("How do I reset my password?"); li.chat(question)
def per_call(fn, n=400):
    best = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - start) / n * 1e6)
    return min(best)
print(per_call(lambda: lc.invoke("How do I reset my password?")),
      per_call(lambda: li.chat(question)))
"""


def _worktree(commit: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where),
                    commit], check=True)  # fmt: skip
    return where


def _packages(tree: Path, where: Path) -> Path:
    """A folder that makes ``tricache`` and the adapters importable from ``tree``."""
    where.mkdir(parents=True, exist_ok=True)
    for name, folder in (("tricache", "core"), *((a, a) for a in ADAPTERS)):
        (where / name).symlink_to(tree / folder)
    return where


def _run(code: str | Path, tree: Path, packages: Path, *args: str) -> str:
    """Run ``code`` (a script's text, or its path) in ``tree`` with its packages."""
    env = {**os.environ, "PYTHONPATH": str(packages), "TRICACHE_HOME": tempfile.mkdtemp()}
    script = [str(code)] if isinstance(code, Path) else ["-c", code]
    done = subprocess.run([sys.executable, *script, *args], cwd=tree, env=env,
                          capture_output=True, text=True, check=True, timeout=900)  # fmt: skip
    return done.stdout


def _lines(tree: Path) -> int:
    return sum(
        sum(1 for line in path.read_text().splitlines() if line.strip())
        for adapter in ADAPTERS
        for path in (tree / adapter).glob("*.py")
    )


def _marks(tree: Path) -> dict[str, int]:
    text = "\n".join(p.read_text() for a in ADAPTERS for p in (tree / a).glob("*.py"))
    return {name: len(re.findall(pattern, text)) for name, pattern in FLOW_MARKS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the commit before the refactor")
    args = parser.parse_args()
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tricache-refactor-"))
    old = _worktree(args.old, work / "old")
    try:
        trees = {"before": old, "after": ROOT}
        packages = {k: _packages(t, work / f"pkgs-{k}") for k, t in trees.items()}
        rows = []
        for name, tree in trees.items():
            walks = [json.loads(line.replace("(", "[").replace(")", "]")) for line in
                     _run(_TRACE, tree, packages[name], *(str(tree / d) for d in
                          ("core", *ADAPTERS))).split("\n") if line.strip()]  # fmt: skip
            judged = int(_run(_JUDGED, tree, packages[name]))
            rows.append((name, _lines(tree), _marks(tree), walks, judged))
        costs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for _ in range(3):  # interleaved: the machine's noise falls on both
            for name, tree in trees.items():
                lc, li = map(float, _run(_L1_HIT, tree, packages[name]).split())
                costs[name].append((lc, li))
        diffs = {}
        for name, tree in trees.items():
            script = tree / "benchmarks" / "refactor_diff.py"
            if not script.exists():  # the old tree predates the script: run this one there
                script.write_text((ROOT / "benchmarks" / "refactor_diff.py").read_text())
            diffs[name] = _run(script, tree, packages[name]).splitlines()
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                       check=False)  # fmt: skip
    _write(args.old, rows, costs, diffs, time.perf_counter() - began)


def _write(old: str, rows: list, costs: dict, diffs: dict, took: float) -> None:  # type: ignore[type-arg]
    marks = list(FLOW_MARKS)
    lines = [
        "# Issue #34: one request flow for every adapter, before and after",
        "",
        f"Command: `python benchmarks/refactor_issue34.py --old {old}` ({took:.0f} s)",
        "",
        "## The adapters",
        "",
        "Non-blank lines in `langchain_tricache/` and `llama_index_tricache/`, and the pieces of a",
        "hand-written flow around the model call they contain (each a regular expression over",
        "their source: `" + "`, `".join(FLOW_MARKS.values()) + "`).",
        "",
        "| | lines | " + " | ".join(marks) + " |",
        "|---|---:|" + "---:|" * len(marks),
    ]
    for name, count, found, *_ in rows:
        lines.append(f"| {name} | {count} | " + " | ".join(str(found[m]) for m in marks) + " |")
    lines += [
        "",
        "## One LangChain call, followed",
        "",
        "`CachedChatModel.invoke`, traced (`sys.setprofile`): the project's files it enters,",
        "and how often it comes back to a file it had left; and how often a miss written back",
        "(and indexed) has its question judged cacheable (`Cache(cacheable=)` counted).",
        "",
        "| | semantic hit: files | returns | miss written back: files | returns | judged |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, _, _, walks, judged in rows:
        (hit_files, hit_back), (miss_files, miss_back) = walks
        lines.append(
            f"| {name} | {hit_files} | {hit_back} | {miss_files} | {miss_back} | {judged} |"
        )
    lines += [
        "",
        "## The cost of an L1 hit",
        "",
        "Microseconds per call (best of 5 × 400 calls, 3 rounds, old and new interleaved).",
        "",
        "| | LangChain `CachedChatModel.invoke` | LlamaIndex `TriCacheLLM.chat` |",
        "|---|---:|---:|",
    ]
    medians = {}
    for name, values in costs.items():
        lc = statistics.median(v[0] for v in values)
        li = statistics.median(v[1] for v in values)
        medians[name] = (lc, li)
        lines.append(f"| {name} | {lc:.0f} | {li:.0f} |")
    ratio = [medians["after"][i] / medians["before"][i] for i in (0, 1)]
    lines.append(f"| after / before | {ratio[0]:.2f} | {ratio[1]:.2f} |")
    before, after = diffs["before"], diffs["after"]
    changed = [(b, a) for b, a in zip(before, after, strict=False) if b != a]
    lines += [
        "",
        "## The differential run",
        "",
        f"`benchmarks/refactor_diff.py` through both frameworks with the oracle models: "
        f"{len(after)} calls (invoke, stream, batch, async, tools, structured output, a chain, "
        f"a query engine); {len(changed)} differ in any field" + (":" if changed else "."),
        "",
    ]
    for b, a in changed:
        lines += [f"- before: `{b}`", f"  after: `{a}`"]
    lines.append("")
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
