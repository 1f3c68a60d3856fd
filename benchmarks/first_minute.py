"""The first minute of a user's script: import, warm-up, first lookup, exit, nothing lost.

Every figure is taken in fresh processes (the median of ``--repeat`` runs), side by side with
the peers a user would otherwise have: a bare script, and LangChain's ``InMemoryCache``.

- import: ``import tricache``, each adapter, and the framework it wraps on its own;
- ``Cache(warm=True)``: its wall time, and the first lookup after it (a paraphrase, so the
  embedder and the guards run);
- exit delay: a short script that stores and looks up one answer, from its last line to the
  end of the process (a cache warming up in the background, a warm one, InMemoryCache, none);
- the caller's own work during a background warm-up: a pure-Python loop in the main thread
  for the first 3 s after ``Cache()``, as a share of the same loop in a bare process;
- nothing lost: a process stores answers during its warm-up and ends (with and without
  ``close()``, SQLite and Redis); a second process asks their paraphrases.

    python benchmarks/first_minute.py [--repeat 5] [--redis redis://127.0.0.1:6379/0]

Writes benchmarks/results/first_minute.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"
PY = sys.executable


def _run(code: str, **env: str) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last."""
    environ = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"} | env
    started = time.perf_counter()
    done = subprocess.run([PY, "-c", code], env=environ, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    ended = time.perf_counter()
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = ended - started
    return result


def _median(code: str, repeat: int, key: str, **env: str) -> float:
    return statistics.median(_run(code, **env)[key] for _ in range(repeat))


_LANGCHAIN = (
    "from langchain_core.globals import set_llm_cache\n"
    "from langchain_core.language_models import BaseChatModel"
)
IMPORT = """
import json, time
t = time.perf_counter()
{statement}
print(json.dumps({{"s": time.perf_counter() - t}}))
"""

WARM = """
import json, tempfile, time
t = time.perf_counter()
from tricache import Cache
cache = Cache(path=tempfile.mkdtemp() + "/c.sqlite3", warm=True)
warm = time.perf_counter() - t
cache.update(cache.request("How do I reset my password?"), "Settings > Security.")
t = time.perf_counter()
hit = cache.lookup(cache.request("How can I reset my password?"))
first = time.perf_counter() - t
assert hit is not None
print(json.dumps({"warm": warm, "first": first}))
"""

IN_MEMORY = """
import json, time
t = time.perf_counter()
from langchain_core.caches import InMemoryCache
cache = InMemoryCache()
made = time.perf_counter() - t
cache.update("How do I reset my password?", "llm", [])
t = time.perf_counter()
cache.lookup("How can I reset my password?", "llm")
print(json.dumps({"warm": made, "first": time.perf_counter() - t}))
"""

# a 20-line script: the work, then the time its last line ran (the rest is the exit)
SCRIPT = """
import json, sys, tempfile, time
{setup}
question = "How do I reset my password?"
answer = "Settings > Security."
for i in range(3):
    {work}
print(json.dumps({{"done": time.time()}}), flush=True)
"""
SCRIPTS = {
    "no cache": ("", "pass"),
    "InMemoryCache": (
        "from langchain_core.caches import InMemoryCache\ncache = InMemoryCache()",
        "cache.lookup(question, 'llm') or cache.update(question, 'llm', [])",
    ),
    "TriCache core, background warm-up (default)": (
        "from tricache import Cache\ncache = Cache(path=tempfile.mkdtemp() + '/c.sqlite3')",
        "cache.lookup(cache.request(question)) or cache.update(cache.request(question), answer)",
    ),
    "TriCache core, warm=True": (
        "from tricache import Cache\n"
        "cache = Cache(path=tempfile.mkdtemp() + '/c.sqlite3', warm=True)",
        "cache.lookup(cache.request(question)) or cache.update(cache.request(question), answer)",
    ),
}

LOOP = """
import json, tempfile, time
{setup}
start = time.perf_counter()
counts, n, edge = [], 0, start + 0.25
while time.perf_counter() - start < 3.0:
    for _ in range(2000):
        n += 1
    if time.perf_counter() >= edge:
        counts.append(n); n = 0; edge += 0.25
print(json.dumps({{"first_s": sum(counts[:4]), "three_s": sum(counts)}}))
"""

WRITER = """
import json
from tricache import Cache
cache = Cache({where})
questions = [f"How do I reset the password of account number {{i}}?" for i in range(20)]
for i, q in enumerate(questions):
    cache.update(cache.request(q), f"answer {{i}}")
{end}
print(json.dumps({{"written": len(questions)}}))
"""
READER = """
import json
from tricache import Cache
cache = Cache({where}, warm=True)
found = 0
for i in range(20):
    hit = cache.lookup(cache.request(f"How can I reset the password of account number {{i}}?"))
    found += hit is not None and hit.text == f"answer {{i}}"
cache.clear()
print(json.dumps({{"found": found}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    repeat = args.repeat
    lines = ["# The first minute of a script", ""]
    command = " ".join(["python benchmarks/first_minute.py", *sys.argv[1:]])
    lines += [f"Command: `{command}`"]
    lines += ["", f"Median of {repeat} fresh processes each; {os.cpu_count()} cores.", ""]

    imports = {}
    statements = {
        "bare interpreter": "pass",
        "tricache": "import tricache",
        # what every LangChain chat model brings in (BaseChatModel), and set_llm_cache
        "LangChain": _LANGCHAIN,
        "LangChain + TriCache": _LANGCHAIN + "\nfrom langchain_tricache import TriCache",
        "LlamaIndex": "from llama_index.core import Settings",
        "LlamaIndex + TriCacheLLM": "from llama_index.core import Settings\n"
        "from llama_index_tricache import TriCacheLLM",
    }
    for name, statement in statements.items():
        imports[name] = _median(IMPORT.format(statement=statement), repeat, "s")
        print(f"import: {name}: {imports[name]:.3f} s", flush=True)
    lc = imports["LangChain + TriCache"] - imports["LangChain"]
    li = imports["LlamaIndex + TriCacheLLM"] - imports["LlamaIndex"]
    lines += ["## Import", "", "| imports | s |", "|---|---:|"]
    lines += [f"| {name} | {s:.3f} |" for name, s in imports.items()]
    lines += ["", f"The adapters above their framework: LangChain +{lc:.3f} s, LlamaIndex "
              f"+{li:.3f} s (goal ≤ 0.3 s).", ""]  # fmt: skip

    warm = [_run(WARM) for _ in range(repeat)]
    memory = [_run(IN_MEMORY) for _ in range(repeat)]
    w, f = (statistics.median(r[k] for r in warm) for k in ("warm", "first"))
    mw, mf = (statistics.median(r[k] for r in memory) for k in ("warm", "first"))
    print(f"warm {w:.2f} s, first lookup {f * 1000:.1f} ms", flush=True)
    lines += ["## Warm-up and the first lookup", "",
              "| cache | made (import included) s | first lookup after it ms |", "|---|---:|---:|",
              f"| TriCache `Cache(warm=True)` | {w:.2f} | {f * 1000:.1f} |",
              f"| LangChain `InMemoryCache()` | {mw:.2f} | {mf * 1000:.2f} |", "",
              "Goals: warm-up ≤ 3 s, first lookup after it ≤ 50 ms.", ""]  # fmt: skip

    lines += ["## Exit delay of a short script", "",
              "From the script's last line to the end of its process.", "",
              "| script | exit delay s | whole run s |", "|---|---:|---:|"]  # fmt: skip
    for name, (setup, work) in SCRIPTS.items():
        runs = []
        for _ in range(repeat):
            started = time.time()
            result = _run(SCRIPT.format(setup=setup, work=work))
            runs.append((started + result["wall"] - result["done"], result["wall"]))
        delay, whole = (statistics.median(r[i] for r in runs) for i in (0, 1))
        print(f"exit: {name}: {delay:.3f} s (run {whole:.2f} s)", flush=True)
        lines.append(f"| {name} | {delay:.3f} | {whole:.2f} |")
    lines += ["", "Goal: exit delay ≤ 0.3 s.", ""]

    bare = [_run(LOOP.format(setup="")) for _ in range(repeat)]
    setup = "from tricache import Cache\ncache = Cache(path=tempfile.mkdtemp() + '/c.sqlite3')"
    busy = [_run(LOOP.format(setup=setup)) for _ in range(repeat)]
    shares = {
        k: statistics.median(b[k] for b in busy) / statistics.median(b[k] for b in bare)
        for k in ("first_s", "three_s")
    }
    print(f"caller's loop during the warm-up: {shares}", flush=True)
    lines += ["## The caller's own work during a background warm-up", "",
              "A pure-Python loop in the main thread right after `Cache()` (which returns at "
              "once and warms up in a thread), as a share of the same loop in a bare process:",
              "", "| window | share of a bare process |", "|---|---:|",
              f"| first second | {shares['first_s']:.0%} |",
              f"| first three seconds | {shares['three_s']:.0%} |", ""]  # fmt: skip

    lines += ["## Nothing lost by a process that writes and ends", "",
              "A process stores 20 answers right after `Cache()` (during its warm-up) and ends; "
              "a second process asks their paraphrases.", "",
              "| store | the writer ends | paraphrases found |", "|---|---|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for store in ("SQLite", "Redis"):
            for end in ("cache.close()", "pass"):
                if store == "SQLite":
                    where = f"path={str(Path(tmp) / (uuid.uuid4().hex + '.sqlite3'))!r}"
                else:
                    where = f"redis_url={args.redis!r}, namespace='fm{uuid.uuid4().hex[:8]}'"
                written = _run(WRITER.format(where=where, end=end))["written"]
                found = _run(READER.format(where=where))["found"]
                how = "with close()" if end != "pass" else "without close()"
                print(f"lost: {store} {how}: {found:.0f}/{written:.0f}", flush=True)
                lines.append(f"| {store} | {how} | {found:.0f} / {written:.0f} |")
    lines.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_minute.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
