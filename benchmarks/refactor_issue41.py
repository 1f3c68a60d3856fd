"""Before and after issue #41 (tiers of one shape), side by side.

    python benchmarks/refactor_issue41.py --old 01a9ad3   # the commit before the refactor

Builds a worktree of the old commit and compares it with this tree, each run in its own
process: the project's files one LangChain ``invoke`` passes through on each path (semantic
hit, miss written back, FAQ hit, exact hit: files, hops between files, returns into a file
already left), the import circles, the classes with more than 25 (and 15) methods, the cost of
an L1 hit against LangChain's ``InMemoryCache``, and the differential run of
``refactor_diff.py`` (every call's answer, tier and model calls through both frameworks).
Writes ``benchmarks/results/refactor_issue41.md``.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the old tree beside this one, each run in its own process: as for issue #34
from refactor_issue34 import _packages, _run, _worktree

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "refactor_issue41.md"
ADAPTERS = ("langchain_tricache", "llama_index_tricache")
PATHS = ("semantic hit", "miss stored", "FAQ hit", "exact hit")

# One invoke per path through LangChain's CachedChatModel, traced with sys.setprofile.
_TRACE = r"""
import json, os, sys, tempfile
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_tricache import CachedChatModel
from tricache import Cache
home = tempfile.mkdtemp()
cache = Cache(path=os.path.join(home, "c.sqlite3"), warm=True)
cache.add_faq([("How do I cancel my subscription?", "Open Billing, then Cancel plan.")])
inner = GenericFakeChatModel(messages=iter([AIMessage(f"Answer {i}.") for i in range(20)]))
model = CachedChatModel(inner=inner, tricache=cache)
model.invoke("How do I reset my password?")  # warm every import and table
model.invoke("How can I cancel my subscription?")
roots = [os.path.realpath(p) for p in sys.argv[1:]]
families = os.path.join(roots[0], "semantic", "guards")  # the rule families, counted as one
def walk(call):
    order = []
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
    def measure(seq):
        merged = [p for i, p in enumerate(seq) if not i or seq[i - 1] != p]
        returns = {}
        for i, p in enumerate(merged):
            if p in merged[:i]:
                returns[p] = returns.get(p, 0) + 1
        top = sorted(returns.items(), key=lambda kv: -kv[1])[:3]
        rel = lambda p: os.path.relpath(p, os.path.dirname(roots[0]))
        return [len(set(merged)), max(0, len(merged) - 1), sum(returns.values()),
                [f"{rel(p)} {n}" for p, n in top]]
    grouped = [families if p.startswith(families) else p for p in order]
    return [measure(order), measure(grouped)]
print(json.dumps({
    "semantic hit": walk(lambda: model.invoke("How can I reset my password?")),
    "miss stored": walk(lambda: model.invoke("What is the capital of Peru?")),
    "FAQ hit": walk(lambda: model.invoke("How do I cancel my subscription?")),
    "exact hit": walk(lambda: model.invoke("What is the capital of Peru?")),
}))
"""

# An invoke served from L1 through set_llm_cache, against LangChain's InMemoryCache.
_L1_HIT = r"""
import os, sys, tempfile, time, itertools
from langchain_core.caches import InMemoryCache
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_tricache import TriCache
prompt = [SystemMessage("You are the helpdesk assistant of ACME Cloud. Answer briefly."),
          HumanMessage("How do I rotate the API keys of my organisation without downtime?")]
answer = "Create the new key, roll it out, then revoke the old one. " * 20
def model(cache):
    return GenericFakeChatModel(messages=itertools.repeat(AIMessage(answer)), cache=cache)
tri = model(TriCache(path=os.path.join(tempfile.mkdtemp(), "c.sqlite3"), semantic=False,
                     faq=False))
mem = model(InMemoryCache())
tri.invoke(prompt); mem.invoke(prompt)
def batch(m, n=50):
    start = time.perf_counter()
    for _ in range(n):
        m.invoke(prompt)
    return (time.perf_counter() - start) / n * 1e6
t, m = [], []
for _ in range(21):
    t.append(batch(tri)); m.append(batch(mem))
t.sort(); m.sort()
print(t[10], m[10])
"""


def _modules(tree: Path) -> dict[str, Path]:
    """Every module of the project by its import name (core/ is ``tricache``)."""
    found = {}
    for folder, name in (("core", "tricache"), *((a, a) for a in ADAPTERS)):
        for path in (tree / folder).rglob("*.py"):
            parts = path.relative_to(tree / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((name, *parts))] = path
    return found


def _imports(module: str, path: Path, known: dict[str, Path], typing: bool) -> set[str]:
    """The project modules ``module`` imports when it loads; ``typing``: those imported for
    the type checker only (``if TYPE_CHECKING``) too."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.body if typing else node.orelse)
                continue
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(0, node.level - 1)):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.level and node.module else (
                    base if node.level else node.module or "")  # fmt: skip
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    out.add(full if full in known else target)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(getattr(node, "orelse", []))

    visit(tree.body)
    return {m for m in out if m in known and m != module}


def _circles(tree: Path, typing: bool = False) -> list[list[str]]:
    """Import circles among the project's modules (strongly connected groups of two or more);
    ``typing``: counting the imports made for the type checker only."""
    known = _modules(tree)
    graph = {m: _imports(m, p, known, typing) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            connect(v)
    # a package's __init__ importing its own modules is how Python packages load, not a circle
    return [g for g in groups if not all(m.startswith(min(g, key=len)) for m in g)]


def _big_classes(tree: Path) -> list[tuple[int, str]]:
    """Classes with more than 15 methods in their own body, core and adapters."""
    out = []
    for folder in ("core", *ADAPTERS):
        for path in (tree / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    n = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                            for b in node.body)  # fmt: skip
                    if n > 15:
                        out.append((n, f"{path.relative_to(tree)}:{node.name}"))
    return sorted(out, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the commit before the refactor")
    parser.add_argument("--rounds", type=int, default=3, help="L1 cost rounds, interleaved")
    args = parser.parse_args()
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tricache-refactor-"))
    old = _worktree(args.old, work / "old")
    try:
        trees = {"before": old, "after": ROOT}
        packages = {k: _packages(t, work / f"pkgs-{k}") for k, t in trees.items()}
        roots = {k: [str(t / d) for d in ("core", *ADAPTERS)] for k, t in trees.items()}
        walks = {k: json.loads(_run(_TRACE, t, packages[k], *roots[k])) for k, t in trees.items()}
        shape = {k: (_circles(t), _circles(t, typing=True), _big_classes(t))
                 for k, t in trees.items()}  # fmt: skip
        costs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for _ in range(args.rounds):  # interleaved: the machine's noise falls on both
            for name, tree in trees.items():
                tri, mem = map(float, _run(_L1_HIT, tree, packages[name]).split())
                costs[name].append((tri, mem))
        # twice each: a concurrent step may go either way (which caller leads), in either tree
        diffs = {k: [_run(ROOT / "benchmarks" / "refactor_diff.py", t, packages[k]).splitlines()
                     for _ in range(2)] for k, t in trees.items()}  # fmt: skip
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                       check=False)  # fmt: skip
    _write(args.old, walks, shape, costs, diffs, time.perf_counter() - began)


def _write(old: str, walks: dict, shape: dict, costs: dict, diffs: dict, took: float) -> None:  # type: ignore[type-arg]
    lines = [
        "# Issue #41: tiers of one shape, before and after",
        "",
        f"Command: `python benchmarks/refactor_issue41.py --old {old}` ({took:.0f} s)",
        "",
        "## One LangChain call, followed",
        "",
        "`CachedChatModel.invoke` on a warm embedded `Cache()`, traced (`sys.setprofile`): the",
        "project's files it enters, its hops (a change of file between consecutive calls) and its",
        "returns (into a file it had left); in brackets, with the rule families",
        "(`core/semantic/guards/`) counted as one file. The three files returned to most, after.",
        "",
        "| path | files before | after | hops before | after | returns before | after |"
        " most returned to, after |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for path in PATHS:
        (b, bg), (a, ag) = walks["before"][path], walks["after"][path]
        lines.append(
            f"| {path} | {b[0]} ({bg[0]}) | {a[0]} ({ag[0]}) | {b[1]} | {a[1]} | {b[2]} | "
            f"{a[2]} | {', '.join(ag[3])} |"
        )
    lines += ["", "## Import circles and large classes", ""]
    for name in ("before", "after"):
        circles, typed, big = shape[name]
        over = [f"`{where}` {n}" for n, where in big if n > 25]
        lines += [
            f"- {name}: {len(circles)} import circle(s) at run time"
            + (": " + "; ".join(" ↔ ".join(c) for c in circles) if circles else "")
            + f", {len(typed)} counting the type checker's imports (`if TYPE_CHECKING`)"
            + (": " + "; ".join(" ↔ ".join(c) for c in typed) if typed else "")
            + f"; {len(over)} class(es) over 25 methods"
            + (": " + ", ".join(over) if over else "")
            + f"; {len(big)} over 15.",
        ]
    lines += [
        "",
        "## The cost of an L1 hit",
        "",
        "`GenericFakeChatModel.invoke` through `set_llm_cache`-style `cache=`: median µs of 21",
        "batches of 50 calls, TriCache's L1 and LangChain's `InMemoryCache` alternated in one",
        "process; the median over the rounds, old and new trees interleaved.",
        "",
        "| | TriCache L1 µs | InMemoryCache µs | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, values in costs.items():
        tri = statistics.median(v[0] for v in values)
        mem = statistics.median(v[1] for v in values)
        lines.append(f"| {name} | {tri:.0f} | {mem:.0f} | {tri / mem:.2f}× |")
    (before, before2), (after, after2) = diffs["before"], diffs["after"]
    racy = {i for i, lines_ in enumerate(zip(before, before2, after, after2, strict=False))
            if len(set(lines_[:2])) > 1 or len(set(lines_[2:])) > 1}  # fmt: skip
    changed = [(b, a) for i, (b, a) in enumerate(zip(before, after, strict=False))
               if b != a and i not in racy]  # fmt: skip
    lines += [
        "",
        "## The differential run",
        "",
        f"`benchmarks/refactor_diff.py` through both frameworks with the oracle models, twice "
        f"in each tree: {len(after)} calls (invoke, stream, batch, async, tools, structured "
        f"output, a chain, a query engine); {len(racy)} concurrent steps come out differently "
        f"from one run to the next in the same tree (which caller leads) and are left out; of "
        f"the others, {len(changed)} differ in any field" + (":" if changed else "."),
        "",
    ]
    for b, a in changed:
        lines += [f"- before: `{b}`", f"  after: `{a}`"]
    lines.append("")
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
