"""Issue #38, items 1–12: each promise the red team broke, measured on real stores the way it
broke it — a row per item with what was done and the figure that must be 0 (or within bound).

Run by ``benchmarks/reliability.py`` (its section "Every path (issue 38)"); alone:

    python benchmarks/every_path.py            # writes benchmarks/results/every_path.{md,json}
    python benchmarks/every_path.py --quick    # fewer entries and processes

Real Redis (127.0.0.1:6379, a namespace of its own per scenario, deleted after), SQLite files
in a temporary directory, LangChain and LlamaIndex classes with stand-in models
(tests/oracles.py; a *versioned* one answers with the version of its data, so an answer
served after the version moved is stale), and the ``tricache`` command in processes of its
own where the item is about a fresh process.  The tests assert each promise
(tests/test_review.py, test_entries.py, test_options_everywhere.py, test_faq.py,
test_deletes_everywhere.py, test_error_answers.py, test_store_bound.py).
"""

# ruff: noqa: E402, I001  (tests/ goes on sys.path before its helpers are imported)
from __future__ import annotations

import argparse
import asyncio
import html
import json
import multiprocessing
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from pydantic import PrivateAttr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the oracle models and the process helpers

from conftest import REDIS_URL, free_port
from oracles import ChatOracle, LlamaOracle, TextOracle
from procs import hold_until_deleted, langchain_app, write_and_exit, write_entries

from langchain_tricache import CachedChatModel, TriCache, tenant
from llama_index_tricache import TriCacheLLM
from tricache import Cache, Exact, TtlPolicy, entry_options

Row = dict[str, Any]
RESULTS = Path(__file__).parent / "results"
GRACE_S = 1.5  # other processes: refresh_s (0.5 s) and a poll, with room for a loaded machine
spawn = multiprocessing.get_context("spawn")


def _row(item: int, scenario: str, done: str, measure: str, value: int, goal: int = 0) -> Row:
    """One item's row: ``value`` must be at most ``goal`` (0 unless a bound is measured)."""
    return {"item": item, "scenario": scenario, "done": done, "measure": measure,
            "value": int(value), "goal": goal}  # fmt: skip


@contextmanager
def _redis_namespace() -> Iterator[str]:
    """A namespace of its own on the shared Redis, its keys deleted afterwards."""
    namespace = f"ep{uuid.uuid4().hex[:10]}"
    try:
        yield namespace
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"tricache:*{namespace}*", count=1000):
            client.delete(key)
        client.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``tricache`` command, in a process of its own."""
    return subprocess.run(["tricache", *args], capture_output=True, text=True, timeout=300)


def _in_a_new_process(code: str, *args: str) -> Any:
    """Run ``code`` (which prints one JSON line last) in a fresh Python; returns that value."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# Stand-in models that answer with the version of their data ---------------------------------
class VersionedChat(ChatOracle):
    """The chat oracle, its answer ending in `` v<n>``: ``bump()`` is the data changing."""

    _version: int = PrivateAttr(default=1)

    def bump(self) -> None:
        self._version += 1

    def respond(self, messages: Any, stop: list[str] | None = None, **kwargs: Any) -> AIMessage:
        message = super().respond(messages, stop, **kwargs)
        return message.model_copy(update={"content": f"{message.content} v{self._version}"})


class VersionedText(TextOracle):
    _version: int = PrivateAttr(default=1)

    def bump(self) -> None:
        self._version += 1

    def respond(self, prompt: str, stop: list[str] | None = None, **kwargs: Any) -> str:
        return f"{super().respond(prompt, stop, **kwargs)} v{self._version}"


class VersionedLlama(LlamaOracle):
    _version: int = PrivateAttr(default=1)

    def bump(self) -> None:
        self._version += 1

    def respond(self, messages: Any, **kwargs: Any) -> LlamaMessage:
        message = super().respond(messages, **kwargs)
        return LlamaMessage(role=message.role, content=f"{message.content} v{self._version}")


def _text(out: Any) -> str:
    if isinstance(out, list):
        return " | ".join(_text(o) for o in out)
    return str(getattr(out, "content", None) or getattr(out, "text", None) or out)


def _old(text: str, version: int) -> bool:
    """Whether ``text`` was answered from data older than ``version``."""
    found = re.findall(r" v(\d+)\b", text)
    return any(int(v) < version for v in found)


# Items 1 and 2: the review page and the admin commands, each in a process of its own ----------
STORED = "How do I reset my password on the website?"
PARAPHRASE = "How can I reset my password on the website?"
GLOBEX = "How could I reset my password on the website?"  # another tenant's paraphrase
OTHER = ("How do I change my email address?", "How can I change my email address?")

ENTRY_CODE = """
import json, sys
from tricache import Cache
with Cache(redis_url=sys.argv[1], namespace=sys.argv[2], faq=False) as cache:
    try:
        entry = cache.entry(sys.argv[3])
        print(json.dumps({"ok": entry is not None and entry.question == sys.argv[4]}))
    except Exception as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
"""


def _decisions(page: str) -> list[dict[str, Any]]:
    """The review page's rows: rowid, question, namespace, outcome."""
    rows = []
    for chunk in page.split('<tr id="d')[1:]:
        rowid = int(chunk.split('"', 1)[0])
        question = re.search(r'class="question">(.*?)\s*<div', chunk, re.S)
        namespace = re.search(r'<div class="small">(.*?)</div>', chunk, re.S)
        rows.append({"rowid": rowid, "question": html.unescape(question.group(1).strip())
                     if question else "", "namespace": html.unescape(namespace.group(1).strip())
                     if namespace else "", "served": "class=\"served\"" in chunk})  # fmt: skip
    return rows


class _NewApp:
    """A new process of the app (``procs.langchain_app``): what it is served now."""

    def __init__(self, caches: dict[str, dict[str, Any]]) -> None:
        self.inbox, self.outbox = spawn.Queue(), spawn.Queue()
        self.process = spawn.Process(target=langchain_app, args=(caches, self.inbox, self.outbox))
        self.process.start()
        assert self.outbox.get(timeout=180) == "ready"

    def tier(self, cache: str, who: str, question: str) -> str:
        self.inbox.put((cache, who, question))
        return str(self.outbox.get(timeout=120)["tier"])

    def close(self) -> None:
        self.inbox.put(None)
        self.process.join(60)
        if self.process.is_alive():
            self.process.kill()


def review_verdicts(work: Path) -> list[Row]:
    """The app (LangChain over Redis, this process) serves paraphrases in two tenants and two
    namespaces; ``tricache review`` runs in a process of its own and is sent "not the same"
    over HTTP (its page's token) on a hit of each namespace; ``tricache entries show`` and
    ``Cache.entry()`` run in new processes.  Then the app and a new process of it ask again."""
    with _redis_namespace() as ns, _redis_namespace() as other_ns:
        options = {"redis_url": REDIS_URL, "namespace": ns}
        other = {"redis_url": REDIS_URL, "namespace": other_ns}
        main, second = TriCache(**options), TriCache(**other)
        set_llm_cache(main)
        models = {"main": ChatOracle(), "other": ChatOracle(cache=second)}

        def ask(cache: str, who: str, question: str) -> dict[str, Any]:
            with tenant(who):
                message = models[cache].invoke(question)
            return dict(message.response_metadata.get("tricache") or {})

        asked = [("main", "acme", STORED, PARAPHRASE), ("main", "globex", STORED, GLOBEX),
                 ("other", "default", OTHER[0], OTHER[1])]  # fmt: skip
        hits = {}
        for cache, who, stored, paraphrase in asked:
            ask(cache, who, stored)
            hits[paraphrase] = ask(cache, who, paraphrase)
        semantic = sum(h.get("tier") == "semantic" for h in hits.values())
        port = free_port()
        review = subprocess.Popen(
            ["tricache", "review", "--port", str(port), "--namespace", ns, "--redis-url",
             REDIS_URL], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        statuses: dict[str, int | str] = {}
        try:
            url = f"http://127.0.0.1:{port}"
            page = _until_page(url, review)
            token = re.search(r'name="token" value="([^"]+)"', page)
            for question, namespace in ((PARAPHRASE, ns), (OTHER[1], other_ns)):
                row = next((r for r in _decisions(page) if r["question"] == question
                            and r["namespace"] == namespace and r["served"]), None)  # fmt: skip
                if row is None or token is None:
                    statuses[question] = "no row"
                    continue
                answer = httpx.post(
                    f"{url}/judge/{row['rowid']}",
                    timeout=60,
                    data={"verdict": "different", "token": token.group(1)},
                )
                statuses[question] = answer.status_code
        finally:
            review.terminate()
            review.wait(30)
        # the app asks again at once, and until GRACE_S after the verdicts
        late = {PARAPHRASE: 0, OTHER[1]: 0}
        last: dict[str, Any] = {PARAPHRASE: "never", OTHER[1]: "never"}
        judged_at = time.monotonic()
        while (since := time.monotonic() - judged_at) < GRACE_S + 0.5:
            for (cache, who, question) in (("main", "acme", PARAPHRASE),
                                           ("other", "default", OTHER[1])):  # fmt: skip
                if ask(cache, who, question).get("tier") == "semantic":
                    last[question] = f"{since:.2f} s"
                    late[question] += since > GRACE_S
            time.sleep(0.05)
        # the admin commands a person runs next, each in a new process
        listed = _cli("entries", "list", "--json", "--redis-url", REDIS_URL, "--namespace", ns)
        ids = [json.loads(line)["id"] for line in listed.stdout.splitlines() if line.strip()]
        shows = [_cli("entries", "show", given, "--redis-url", REDIS_URL, "--namespace", ns)
                 for given in [*ids[:1], hits[GLOBEX].get("entry_id") or "none"]]  # fmt: skip
        failed_shows = (listed.returncode != 0 or not ids) + sum(s.returncode != 0 for s in shows)
        entry = _in_a_new_process(ENTRY_CODE, REDIS_URL, ns, hits[GLOBEX].get("entry_id") or "",
                                  STORED)  # fmt: skip
        globex_kept = ask("main", "globex", GLOBEX).get("tier") == "semantic"
        set_llm_cache(None)
        main.tricache.close()
        second.tricache.close()
        fresh = _NewApp({"main": options, "other": other})
        try:
            new_acme = fresh.tier("main", "acme", PARAPHRASE) == "semantic"
            new_other = fresh.tier("other", "default", OTHER[1]) == "semantic"
            new_globex = fresh.tier("main", "globex", GLOBEX) == "semantic"
        finally:
            fresh.close()
    mine, theirs = statuses.get(PARAPHRASE), statuses.get(OTHER[1])
    one = _row(
        1,
        "a review verdict from `tricache review` in its own process (Redis, LangChain app)",
        f"{semantic} of 3 paraphrases served by the semantic tier; 'not the same' posted with"
        f" the page's token: HTTP {mine}; `entries show` (full id, a hit's entry_id) and"
        f" `entries list --json` in new processes: {failed_shows} failed; `Cache.entry()` in a"
        f" new process: {'ok' if entry.get('ok') else entry}; after it the app served the"
        f" match last at: {last[PARAPHRASE]}; a new app process:"
        f" {'served' if new_acme else 'a miss'}",
        "verdicts or admin commands that failed + lookups served the judged match after"
        f" {GRACE_S} s (app, new process)",
        (mine != 303) + failed_shows + (not entry.get("ok")) + late[PARAPHRASE] + new_acme,
    )
    two = _row(
        2,
        "the page acts in the decision's own namespace and tenant",
        f"'not the same' on another namespace's served hit: HTTP {theirs}; after it the app served"
        f" it last at: {last[OTHER[1]]}, a new process: {'served' if new_other else 'a miss'};"
        f" tenant globex's match of the same question (judged by no one) still served: app"
        f" {globex_kept}, new process {new_globex}",
        "verdicts refused + judged matches served after the verdict + matches of another"
        " tenant taken out",
        (theirs != 303) + late[OTHER[1]] + new_other + (not globex_kept) + (not new_globex),
    )
    return [one, two]


def _until_page(url: str, process: subprocess.Popen[bytes], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(process.stdout.read().decode())  # type: ignore[union-attr]
        try:
            page = httpx.get(url + "/", timeout=5)
            if page.status_code == 200:
                return page.text
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("tricache review did not start")
        time.sleep(0.2)


# Item 3: per-call options on every path -------------------------------------------------------
def _paths(chat: VersionedChat, text: VersionedText, wrapped: CachedChatModel) -> list[Any]:
    """(name, call(question, config) -> text) for every path the docs name."""

    def stream(q: str, config: Any) -> str:
        return "".join(str(c.content) for c in wrapped.stream(q, config=config))

    prompt = ChatPromptTemplate.from_messages([("human", "{q}")])
    return [
        ("chat invoke", lambda q, c: chat.invoke(q, config=c)),
        ("chat with_config", lambda q, c: chat.with_config(c).invoke(q)),
        ("chat ainvoke", lambda q, c: asyncio.run(chat.ainvoke(q, config=c))),
        ("chat batch", lambda q, c: chat.batch([q, q + " (2)"], config=c)),
        ("LLM invoke", lambda q, c: text.invoke(q, config=c)),
        ("LLM with_config", lambda q, c: text.with_config(c).invoke(q)),
        ("CachedChatModel invoke", lambda q, c: wrapped.invoke(q, config=c)),
        ("CachedChatModel stream", stream),
        ("prompt | model", lambda q, c: (prompt | chat).invoke({"q": q}, config=c)),
    ]


def options_everywhere(work: Path) -> Row:
    """``set_llm_cache(TriCache(...))`` and ``CachedChatModel`` over SQLite: each path stores
    an answer with ``tricache_tags`` (then ``invalidate``) and one with ``tricache_ttl``
    (then waits past it), the data changing meanwhile: the old version served is stale."""
    core = Cache(path=work / "options.sqlite3", semantic=False, faq=False)
    chat, text, inner = VersionedChat(), VersionedText(), VersionedChat(cache=False)
    wrapped = CachedChatModel(inner=inner, tricache=core)
    models = (chat, text, inner)
    set_llm_cache(TriCache(cache=core))
    tagged = {"metadata": {"tricache_tags": ["prices"]}}
    short = {"metadata": {"tricache_ttl": 0.5}}
    paths = _paths(chat, text, wrapped)
    stale: list[str] = []
    kept = 0
    try:
        for config, change in ((tagged, lambda: core.invalidate("prices")),
                               (short, lambda: time.sleep(1.0))):  # fmt: skip
            version = models[0]._version
            label = "tags" if config is tagged else "ttl"
            for n, (_, call) in enumerate(paths):
                question = f"What is the spot price of metal {n}? ({label})"
                first = _text(call(question, config))
                kept += _text(call(question, config)) == first  # served while it lives
            change()
            for model in models:
                model.bump()
            for n, (name, call) in enumerate(paths):
                question = f"What is the spot price of metal {n}? ({label})"
                if _old(_text(call(question, config)), version + 1):
                    stale.append(f"{name} ({'tags' if config is tagged else 'ttl'})")
    finally:
        set_llm_cache(None)
        core.close()
    return _row(
        3,
        "per-call tricache_tags / tricache_ttl outside chains (SQLite)",
        f"{len(paths)} paths ({', '.join(n for n, _ in paths)}): each stored an answer under"
        f" tags ['prices'] and one with ttl 0.5 s ({kept} of {2 * len(paths)} served again"
        " while valid), then invalidate('prices') / 1 s passed and the data changed"
        + (f"; stale on: {', '.join(stale)}" if stale else ""),
        "answers from before the invalidation or past their ttl served",
        len(stale),
    )


# Item 4: a tagged request is served only what was written under its tags -------------------
def tags_are_a_dependency(work: Path) -> Row:
    """Answers cached untagged (before the app tagged its calls), then asked with a tag,
    the tag invalidated and the data changed, asked with the tag again: exact through
    LangChain, a paraphrase through the semantic tier, and LlamaIndex ``tricache_tags=``."""
    stale: list[str] = []
    with _redis_namespace() as ns:
        core = Cache(redis_url=REDIS_URL, namespace=ns, faq=False, warm=True)
        chat, llama = VersionedChat(), VersionedLlama()
        set_llm_cache(TriCache(cache=core))
        llm = TriCacheLLM(llama, cache=core)
        tagged = {"metadata": {"tricache_tags": ["prices"]}}
        question = "What is the spot price of gold?"
        stored, paraphrase = "How do I reset my password?", "how can i reset my password"
        ask = [LlamaMessage(role="user", content=question)]
        try:
            chat.invoke(question)  # cached before the app tagged its calls
            chat.invoke(question, config=tagged)
            core.update(core.request(stored), "Settings, then Security. v1")  # untagged path
            llm.chat(ask)
            llm.chat(ask, tricache_tags=["prices"])
            untagged_semantic = core.lookup(core.request(paraphrase))  # (the tier serves it)
            core.invalidate("prices")
            for model in (chat, llama):
                model.bump()
            if _old(_text(chat.invoke(question, config=tagged)), 2):
                stale.append("LangChain exact")
            hit = core.lookup(core.request(paraphrase, tags=["prices"]))
            if hit is not None and _old(hit.text, 2):
                stale.append("semantic paraphrase")
            if _old(_text(llm.chat(ask, tricache_tags=["prices"]).message), 2):
                stale.append("LlamaIndex")
        finally:
            set_llm_cache(None)
            core.close()
    control = untagged_semantic is not None and untagged_semantic.tier == "semantic"
    return _row(
        4,
        "a tagged request and an answer written under no tag (Redis)",
        "untagged answers (LangChain call, Cache.update, LlamaIndex chat), then the tagged call,"
        " invalidate('prices'), the data changed, the tagged call again (exact, a paraphrase,"
        f" LlamaIndex tricache_tags=); the untagged paraphrase was a semantic hit: {control}"
        + (f"; stale on: {', '.join(stale)}" if stale else ""),
        "answers from before the invalidation served to a tagged request",
        len(stale),
    )


# Items 5 and 7: the FAQ's import and export ----------------------------------------------------
FAQ_CODE = """
import json, sys
from tricache import Cache
with Cache(path=sys.argv[1], warm=True) as c:
    hits = [c.lookup(c.request(q)) for q in json.loads(sys.argv[2])]
print(json.dumps([h.text if h else None for h in hits]))
"""


def faq_reimport(work: Path) -> Row:
    """``tricache faq import`` of a file, the answer edited, imported again: what the running
    app and a new process are served; then a file naming one question twice."""
    faq_file, db = work / "faq.csv", work / "faq-app.sqlite3"
    question = "How do I reset my password?"
    asked = [question, "how do I reset my password", "How can I reset my password?", question]
    faq_file.write_text(f"question,answer\n{question},Old: the sign-in page.\n", encoding="utf-8")
    first = _cli("faq", "import", str(faq_file), "--path", str(db))
    with Cache(path=db, warm=True) as app:
        before = [getattr(app.lookup(app.request(q)), "text", None) for q in asked]
        faq_file.write_text(f"question,answer\n{question},New: Settings > Security.\n",
                            encoding="utf-8")  # fmt: skip
        again = _cli("faq", "import", str(faq_file), "--path", str(db))
        served = [getattr(app.lookup(app.request(q)), "text", None) for q in asked]
        new = _in_a_new_process(FAQ_CODE, str(db), json.dumps(asked))
        twice = "Do you ship abroad?"
        faq_file.write_text(f"question,answer\n{twice},First.\n{twice},Last.\n", encoding="utf-8")
        dup = _cli("faq", "import", str(faq_file), "--path", str(db))
        dup_hit = app.lookup(app.request(twice))

    def old(texts: list[Any]) -> int:
        return sum(isinstance(t, str) and t.startswith("Old") for t in texts)

    said = " ".join((dup.stdout + dup.stderr).replace(str(faq_file), "faq.csv").split())
    summary = " ".join(again.stdout.split())
    silent_first = dup.returncode == 0 and (
        getattr(dup_hit, "text", None) == "First." or not re.search(r"again|twice|duplicate", said)
    )  # a duplicate must be refused (an error) or last-wins, said in the output
    return _row(
        5,
        "an FAQ re-imported with a changed answer (`tricache faq import`, SQLite)",
        f"import (exit {first.returncode}): the app served the old answer to"
        f" {old(before)} of {len(asked)}; edited,"
        f" imported again (exit {again.returncode}: {summary[:90]}):"
        f" old answers served {old(served)} of"
        f" {len(asked)} in the app, {old(new)} of"
        f" {len(asked)} in a new process; a file naming a question twice: exit"
        f" {dup.returncode} ({said[:90]})",
        "old answers served after the re-import + duplicates resolved silently to the first",
        old(served) + old(new) + silent_first,
    )


_PIPES = ("What is bash?", "A shell.", ("What is || in a shell?", "a\\|b\\", "C:\\dir"))
_LONG = ("What is the long answer?", 'A 200 KB answer, "quoted", | piped.\n' * 5000)


def _random_text(rng: random.Random, size: int) -> str:
    """Any Unicode but lone surrogates, with the CSV's and the paraphrase list's separators."""
    pools = [(0x20, 0x7E), (0x0, 0x1F), (0x80, 0x2FF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF),
             (0xE000, 0x10FFFF)]  # fmt: skip
    picks = []
    for _ in range(size):
        if rng.random() < 0.2:
            picks.append(rng.choice(',"|\\\n\r\t;'))
        else:
            picks.append(chr(rng.randint(*rng.choice(pools))))
    return "".join(picks)


def faq_round_trip(work: Path, count: int) -> Row:
    """``tricache faq export`` then ``faq import`` into a new file (the paraphrase with
    ``||`` and a 200 KB answer), and ``count`` random entries through the CSV helpers."""
    from tricache.faq.store import FaqEntry, FaqStore, read_entries, write_entries

    source, target = work / "export-a.sqlite3", work / "export-b.sqlite3"
    with Cache(path=source, warm=True) as cache:
        cache.add_faq([FaqEntry(*_PIPES), FaqEntry(*_LONG),
                       FaqEntry('Où est "le bureau", à Zürich?', "Bahnhofstrasse 1,\nZürich.",
                                ("办公室在哪里？",), ("a,b", "c|d"))])  # fmt: skip
        want = [e for _, e in cache.faq_entries()]
    exported = _cli("faq", "export", str(work / "faq.csv"), "--path", str(source))
    imported = _cli("faq", "import", str(work / "faq.csv"), "--path", str(target))
    with Cache(path=target, warm=True) as cache:
        back = [e for _, e in cache.faq_entries()]
        pipes = cache.lookup(cache.request("What is || in a shell?"))
        split = cache.lookup(cache.request("What is"))
        long = cache.lookup(cache.request("What is the long answer?"))
    differ = _differ(want, back)
    wrong = (getattr(pipes, "text", None) != "A shell." or getattr(split, "text", None) ==
             "A shell.") + (getattr(long, "text", None) != _LONG[1])  # fmt: skip
    rng = random.Random(38)
    entries = [
        FaqEntry(f"Q{i} {_random_text(rng, rng.choice([3, 20, 60]))}",
                 f"A{i} {_random_text(rng, rng.choice([1, 40, 3000]))}",
                 tuple(f"P{i}.{j} {_random_text(rng, 15)}" for j in range(rng.randrange(3))),
                 tuple(_random_text(rng, 6) for _ in range(rng.randrange(3))),
                 rng.choice([None, "en", "zh", "pt-BR"]))
        for i in range(count)
    ]  # fmt: skip
    held, again = FaqStore(work / "held.sqlite3"), FaqStore(work / "again.sqlite3")
    kept: list[FaqEntry] = []
    failure = ""
    try:
        held.add(entries)
        kept = [e for _, e in held.entries()]
        write_entries(kept, work / "random.csv")
        again.add(read_entries(work / "random.csv"))
        returned = [e for _, e in again.entries()]
        random_differ = _differ(kept, returned)
    except Exception as exc:  # an entry the round trip cannot carry counts as all of them
        random_differ, failure = count, f" ({type(exc).__name__}: {str(exc)[:80]})"
    finally:
        held.close()
        again.close()
    return _row(
        7,
        "the FAQ's CSV export imported back (`tricache faq export` / `import`)",
        f"3 entries (a paraphrase with '||', a 200 KB answer, quotes, commas, newlines, CJK):"
        f" export exit {exported.returncode}, import exit {imported.returncode}, {differ}"
        f" differ; 'What is' served the bash answer: {getattr(split, 'text', None) == 'A shell.'};"
        f" {count} random entries (any Unicode, separators, up to 3,000 characters) through"
        f" the CSV: {len(kept)} held, {random_differ} differ{failure}",
        "entries not read back exactly + wrong answers served",
        differ + wrong + random_differ,
    )


def _differ(want: list[Any], back: list[Any]) -> int:
    """Entries not read back exactly (a missing or extra one counts too)."""
    return sum(a != b for a, b in zip(want, back, strict=False)) + abs(len(want) - len(back))


# Item 6: a delete reaches every cache of the process, and the others within refresh_s --------
def deletes_everywhere(work: Path) -> Row:
    question = "What does the handbook say about leave?"
    served: dict[str, int] = {}
    for store in ("sqlite", "redis"):
        with _redis_namespace() as ns:
            where = ({"redis_url": REDIS_URL} if store == "redis"
                     else {"path": work / f"deletes-{ns}.sqlite3"})  # fmt: skip
            app, admin = (Cache(namespace=ns, semantic=False, faq=False, **where)
                          for _ in range(2))  # type: ignore[arg-type]  # fmt: skip
            for how in ("delete", "feedback", "invalidate"):
                request = app.request(f"{question} ({how})", tags=["handbook"])
                app.update(request, "page 12")
                hits = [app.lookup(request) for _ in range(3)]
                entry_id = hits[-1].entry_id if hits[-1] is not None else ""
                if how == "delete":
                    admin.delete(entry_id)
                elif how == "feedback":
                    admin.feedback(entry_id, correct=False)
                else:
                    admin.invalidate("handbook")
                late = sum(app.lookup(request) is not None for _ in range(10))
                served[f"{how} ({store})"] = late
            app.close()
            admin.close()
    lags = []
    for store in ("sqlite", "redis"):
        with _redis_namespace() as ns:
            options = ({"redis_url": REDIS_URL} if store == "redis"
                       else {"path": str(work / f"held-{ns}.sqlite3")})  # fmt: skip
            options = {**options, "namespace": ns, "semantic": False, "faq": False}
            ready, started = spawn.Queue(), spawn.Queue()
            child = spawn.Process(target=hold_until_deleted, args=(options, ready, started))
            child.start()
            key = ready.get(timeout=180)
            with Cache(**options) as admin:
                deleted_at = time.time()
                admin.delete(key)
                started.put(deleted_at)
            lags.append(ready.get(timeout=60))
            child.join(30)
    late_other = sum(lag is None or lag > GRACE_S for lag in lags)
    shown = ", ".join("never" if lag is None else f"{lag:.2f} s" for lag in lags)
    return _row(
        6,
        "a delete, a 'wrong' feedback, an invalidation from a second Cache of the process",
        f"an answer hot in the app's L1, deleted / judged wrong / invalidated through another"
        f" Cache (SQLite, Redis), then asked 10 times at once: served {sum(served.values())} of"
        f" {10 * len(served)}; another process holding it in L1 let it go after {shown}"
        f" (SQLite, Redis; refresh_s 0.5 s)",
        f"deleted answers served in the process + other processes past {GRACE_S} s",
        sum(served.values()) + late_other,
    )


# Item 8: error texts are kept briefly, on every path -----------------------------------------
OUTAGE = "Service temporarily unavailable (HTTP 503). Please try again later."
RATE = "Rate limit exceeded"
RECOVERED = "Priority support and 1 TB of storage."


def error_texts(work: Path) -> Row:
    """A 200-OK error text answered, then the model recovers: asked again past the error TTL
    (0.5 s here) through LangChain, ``CachedChatModel`` (invoke, stream) and LlamaIndex; a
    paraphrase asked meanwhile; and the TTL such a text gets by default (Redis)."""
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.llms import CustomLLM
    from llama_index.core.llms.callbacks import llm_completion_callback

    from tricache.flow import Answer

    class Flaky(CustomLLM):
        _answers: list[str] = PrivateAttr()

        def __init__(self, answers: list[str]) -> None:
            super().__init__()
            self._answers = answers

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="flaky")

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=self._answers.pop(0))

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            raise NotImplementedError

    replayed: list[str] = []
    with _redis_namespace() as ns:
        core = Cache(redis_url=REDIS_URL, namespace=ns, faq=False, warm=True,
                     exact=Exact(ttl=_brief_errors()))  # fmt: skip
        set_llm_cache(TriCache(cache=core))
        try:
            calls: list[tuple[str, Callable[[], str]]] = []
            for n, text in enumerate((OUTAGE, RATE)):
                model = GenericFakeChatModel(messages=iter([text, RECOVERED, RECOVERED]))
                calls.append((f"LangChain ({text[:12]}…)", _asking(model, f"Plan {n}?")))
            inner = GenericFakeChatModel(messages=iter([RATE, RECOVERED, RECOVERED]), cache=False)
            wrapped = CachedChatModel(inner=inner, tricache=core)
            calls.append(("CachedChatModel invoke", lambda: str(wrapped.invoke("Plan A?").content)))
            recovering = GenericFakeChatModel(messages=iter([OUTAGE, RECOVERED, RECOVERED]),
                                              cache=False)  # fmt: skip
            streamed = CachedChatModel(inner=recovering, tricache=core)
            calls.append(("CachedChatModel stream", lambda: "".join(
                str(c.content) for c in streamed.stream("Plan B?"))))  # fmt: skip
            llm = TriCacheLLM(Flaky(answers=[OUTAGE, RECOVERED, RECOVERED]), cache=core)
            calls.append(("LlamaIndex", lambda: llm.complete("Plan C?").text))
            firsts = [call() for _, call in calls]
            again = [call() for _, call in calls]  # a moment later: may be the error still
            real = core.request("How do I export my data to CSV?")
            core.update(real, "Settings > Export.")
            errored = core.request("How do I reset my password?")
            core.update_answer(errored, Answer(OUTAGE))
            control = core.lookup(core.request("how can i export my data to csv"))
            paraphrase = core.lookup(core.request("how can i reset my password"))
            time.sleep(1.0)
            for name, call in calls:
                if call() in (OUTAGE, RATE):
                    replayed.append(name)
            default = Cache(redis_url=REDIS_URL, namespace=ns + "d", semantic=False, faq=False)
            request = default.request("What does our premium plan include?")
            default.update_answer(request, Answer(OUTAGE))
            pttl_ms = redis.Redis.from_url(REDIS_URL).pttl(default.exact.key(request))
            default.close()
        finally:
            set_llm_cache(None)
            core.close()
    errors_first = sum(f in (OUTAGE, RATE) for f in firsts)
    paraphrase_error = paraphrase is not None and paraphrase.text == OUTAGE
    return _row(
        8,
        "a 200-OK error text ('temporarily unavailable (HTTP 503)', 'Rate limit exceeded')",
        f"{len(calls)} paths answered an error text ({errors_first} of {len(calls)}), served"
        f" again a moment later {sum(a in (OUTAGE, RATE) for a in again)}×; asked 1 s later"
        f" (TtlPolicy(error=0.5)), the model recovered: error replayed on"
        f" {len(replayed)} ({', '.join(replayed) or 'none'}); a paraphrase served the error:"
        f" {paraphrase_error} (a real answer's paraphrase served: {control is not None}); the"
        f" default policy's TTL of an error text in Redis: {_pttl(pttl_ms)}",
        "error texts served after their TTL or to a paraphrase + error entries kept over 60 s",
        len(replayed) + paraphrase_error + (pttl_ms == -1 or pttl_ms > 60_000),
    )


def _brief_errors() -> TtlPolicy:
    """Error texts kept 0.5 s (a version without ``error=`` keeps them like any answer)."""
    try:
        return TtlPolicy(error=0.5)
    except TypeError:
        return TtlPolicy()


def _asking(model: Any, question: str) -> Callable[[], str]:
    return lambda: str(model.invoke(question).content)


def _pttl(ms: int) -> str:
    return {-2: "not stored", -1: "no expiry"}.get(ms, f"{ms / 1000:.0f} s (≤ 60)")


# Item 9: a TTL the store cannot take -----------------------------------------------------------
def huge_ttls(work: Path) -> Row:
    """``update(ttl=sys.maxsize)`` and the like where a caller gives a TTL, then writes Redis
    refuses (past the checks, as a buggy caller of the tier could): the breaker, and L2."""
    from tricache.key import options
    from tricache.runtime.steps import run as run_steps

    bound = getattr(options, "MAX_TTL_S", 10 * 365 * 86400)  # ten years
    bad = [sys.maxsize, bound + 1, 1e300]
    accepted: list[str] = []
    with _redis_namespace() as ns:
        writer = Cache(redis_url=REDIS_URL, namespace=ns, semantic=False, faq=False)
        questions = [f"What is the capital of country {i}?" for i in range(20)]
        for q in questions:
            writer.update(writer.request(q), f"capital {q}")
        writer.close()
        app = Cache(redis_url=REDIS_URL, namespace=ns, semantic=False, faq=False,
                    exact=Exact(bloom=False))  # fmt: skip
        set_llm_cache(TriCache(cache=app))
        try:
            for ttl in bad:
                for where, call in (
                    ("update", lambda t=ttl: app.update(app.request("What is gold?"), "Au", ttl=t)),
                    ("entry_options", lambda t=ttl: app.update(_with_options(app, t), "Au")),
                    ("tricache_ttl", lambda t=ttl: ChatOracle().invoke(
                        "What is gold?", config={"metadata": {"tricache_ttl": t}})),
                ):  # fmt: skip
                    try:
                        call()
                        accepted.append(f"{where}({ttl:.3g})")
                    except ValueError as exc:
                        if str(bound) not in str(exc) and "at most" not in str(exc):
                            accepted.append(f"{where}({ttl:.3g}): {exc}")
            asked = app.asked(app.request("What is silver?"))
            for _ in range(5):  # a write Redis refuses for its content
                run_steps(app.exact.put_steps(asked, "Ag", ttl=float(sys.maxsize)))
            opened = app.exact.breaker.opened
            missed = sum(app.lookup(app.request(q)) is None for q in questions)
            refused = app.stats()["exact"].get("refused_writes", 0)
        finally:
            set_llm_cache(None)
            app.close()
    return _row(
        9,
        "a TTL Redis cannot keep (sys.maxsize, 10 years + 1 s, 1e300)",
        f"{3 * len(bad)} calls (update(ttl=), entry_options(ttl=), LangChain tricache_ttl):"
        f" {len(accepted)} accepted without a ValueError naming the bound"
        f"{' (' + ', '.join(accepted) + ')' if accepted else ''}; 5 writes Redis refused"
        f" ({refused} counted as refused): breaker opened {opened}×; then {missed} of"
        f" {len(questions)} L2 lookups missed",
        "bad TTLs accepted + breaker openings + L2 lookups missed",
        len(accepted) + opened + missed,
    )


def _with_options(cache: Cache, ttl: float) -> Any:
    with entry_options(ttl=ttl):
        return cache.request("What is gold?")


# Items 10-12: the bound on the embedded store -------------------------------------------------
def _count(path: Path, sql: str = "SELECT count(*) FROM entries") -> int:
    with closing(sqlite3.connect(path, timeout=10)) as db:
        return int(db.execute(sql).fetchone()[0])


def _questions(start: int, n: int) -> list[str]:
    return [f"What is item number {i} in the list?" for i in range(start, start + n)]


def bound_across_processes(work: Path, scripts: int, each: int) -> Row:
    """Four short scripts of 150 writes at ``max_entries=200``, one after another, each
    ending without ``close()``; then two processes writing ``each`` at once, the file's
    count read every few milliseconds meanwhile."""
    from tricache.stores.sqlite import SQLiteStore

    path = work / "scripts.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=200), "semantic": False, "faq": False}
    after, failed = [], 0
    for n in range(scripts):
        script = spawn.Process(target=write_and_exit, args=(options, _questions(150 * n, 150)))
        script.start()
        script.join(180)
        after.append(_count(path))
        failed += script.exitcode != 0
    path = work / "at-once.sqlite3"
    options = {**options, "path": path}
    SQLiteStore(path).close()
    writers = [spawn.Process(target=target, args=(options, _questions(each * n, each)))
               for n, target in enumerate((write_and_exit, write_entries))]  # fmt: skip
    for writer in writers:
        writer.start()
    seen, most = 0, 0
    with closing(sqlite3.connect(path, timeout=10)) as db:
        while any(writer.is_alive() for writer in writers):
            most = max(most, db.execute("SELECT count(*) FROM entries").fetchone()[0])
            seen += 1
            time.sleep(0.005)
    for writer in writers:
        writer.join(60)
        failed += writer.exitcode != 0
    last = _count(path)
    return _row(
        10,
        "Exact(max_entries=200) and the processes it exists for (SQLite)",
        f"{scripts} scripts of 150 writes, one after another, each ending at once: entries"
        f" after each {after}; 2 processes writing {each:,} each at once: at most {most} seen"
        f" in {seen} reads meanwhile, {last} after; {failed} processes failed",
        "most entries the file held",
        max(*after, most, last),
        200,
    )


def hottest_kept(work: Path) -> Row:
    """An answer served 300 times from L1, 100 never read again; another process writes 50
    more at ``max_entries=101``: does a new process still find the hot one?  And on Redis,
    does its LRU clock see the L1 hits (``OBJECT IDLETIME``)?"""
    from tricache.stores.sqlite import SQLiteStore

    path = work / "hot.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=101), "semantic": False, "faq": False}
    hot_q = "What are the opening hours of the main office?"
    with Cache(**options) as app:  # type: ignore[arg-type]
        hot = app.request(hot_q)
        app.update(hot, "9 to 5")
        for q in _questions(0, 100):
            app.update(app.request(q), "cold")
        l1 = sum(getattr(app.lookup(hot), "level", "") == "l1" for _ in range(300))
        time.sleep(1.5)  # the L1 hits are told to the store about once a second
        other = spawn.Process(target=write_and_exit, args=(options, _questions(100, 50)))
        other.start()
        other.join(180)
    swept = SQLiteStore(path, max_entries=101, sweep_every=3600)  # (a sweep: no-op if within)
    while swept.sweep():
        pass
    swept.close()
    with Cache(path=path, semantic=False, faq=False) as fresh:
        kept = fresh.lookup(fresh.request(hot_q)) is not None
        cold_left = sum(fresh.lookup(fresh.request(q)) is not None for q in _questions(0, 100))
    client = redis.Redis.from_url(REDIS_URL)
    with (
        _redis_namespace() as ns,
        Cache(redis_url=REDIS_URL, namespace=ns, semantic=False, faq=False) as app,
    ):
        hot = app.request(hot_q)
        cold = app.request("What is the dress code?")
        app.update(hot, "9 to 5")
        app.update(cold, "smart casual")
        for _ in range(300):  # over 3 s, from L1 only
            app.lookup(hot)
            time.sleep(0.01)
        time.sleep(1.2)
        idle_hot = client.object("idletime", app.exact.key(hot))
        idle_cold = client.object("idletime", app.exact.key(cold))
    client.close()
    looks_unused = idle_hot is None or idle_cold is None or idle_hot >= max(2, idle_cold)
    return _row(
        11,
        "the hottest entry and the store's recency (SQLite bound, Redis LRU clock)",
        f"served {l1}× from L1, 100 never read; another process wrote 50 at max_entries=101:"
        f" a new process finds the hot one: {kept} ({cold_left} of 100 cold left); Redis:"
        f" idle {idle_hot} s after 300 L1 hits over 3 s (an unread entry written with it:"
        f" {idle_cold} s)",
        "hot entries evicted or missed by another process + hot keys idle to Redis's LRU",
        (not kept) + looks_unused,
    )


def points_bounded(work: Path, bound: int) -> Row:
    """``3 × bound`` answers with the semantic tier at ``max_entries=bound``: the points
    the file keeps, the writer's replica and a new process's."""
    path = work / "points.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=bound), "faq": False, "warm": True}
    with Cache(**options) as app:  # type: ignore[arg-type]
        for i in range(3 * bound):
            q = f"How do I configure feature number {i} of the product?"
            app.update(app.request(q), f"answer {i}")
        entries = _count(path)
        live = _count(path, "SELECT count(*) FROM points WHERE data IS NOT NULL")
        tier = app.semantic
        if tier is not None:
            tier.index.sync()  # (its background thread does it within sync_s)
        mine = tier.index.count() if tier is not None else -1
    code = ("import json, sys\nfrom tricache import Cache, Exact\n"
            "with Cache(path=sys.argv[1], exact=Exact(max_entries=int(sys.argv[2])), faq=False,"
            " warm=True) as c:\n    print(json.dumps(c.semantic.index.count()))\n")  # fmt: skip
    fresh = _in_a_new_process(code, str(path), str(bound))
    fresh_count = fresh if isinstance(fresh, int) else 10**9
    return _row(
        12,
        "semantic points under the entry bound (SQLite, the replica index)",
        f"{3 * bound} answers at max_entries={bound}: {entries} entries, {live} live points in"
        f" the file, {mine} in the writer's replica, {fresh} in a new process's",
        "most points kept",
        max(live, mine, fresh_count),
        bound,
    )


# The run -----------------------------------------------------------------------------------
def run(workdir: Path, quick: bool = False) -> list[Row]:
    """Every item's row, in order (items 1-12)."""
    workdir.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("TRICACHE_HOME", "TRICACHE_WARM")}
    os.environ["TRICACHE_HOME"] = str(workdir / "home")  # the audit log `review` reads too
    os.environ.setdefault("TRICACHE_WARM", "1")
    rows: list[Row] = []
    scenarios: list[tuple[str, tuple[int, ...], Callable[[Path], Row | list[Row]]]] = [
        ("review", (1, 2), review_verdicts),
        ("options", (3,), options_everywhere),
        ("tags", (4,), tags_are_a_dependency),
        ("reimport", (5,), faq_reimport),
        ("deletes", (6,), deletes_everywhere),
        ("roundtrip", (7,), lambda w: faq_round_trip(w, 60 if quick else 300)),
        ("errors", (8,), error_texts),
        ("ttl", (9,), huge_ttls),
        ("bound", (10,), lambda w: bound_across_processes(w, 2 if quick else 4,
                                                          300 if quick else 1500)),
        ("hot", (11,), hottest_kept),
        ("points", (12,), lambda w: points_bounded(w, 40 if quick else 100)),
    ]  # fmt: skip
    try:
        for name, items, scenario in scenarios:
            (workdir / name).mkdir()
            started = time.monotonic()
            try:
                made = scenario(workdir / name)
            except Exception as exc:  # a row that says so, and the other items still run
                said = f"raised {type(exc).__name__}: {str(exc)[:200]}"
                made = [_row(item, name, said, "the scenario raised", 1) for item in items]
            finally:
                set_llm_cache(None)
            for row in made if isinstance(made, list) else [made]:
                rows.append({**row, "seconds": round(time.monotonic() - started, 1)})
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return sorted(rows, key=lambda r: r["item"])


def table(rows: list[Row]) -> list[str]:
    lines = ["| item | scenario | what was done | measure | value | goal |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        goal = f"≤ {r['goal']}" if r["goal"] else "0"
        done = r["done"].replace("|", "\\|")
        lines.append(f"| {r['item']} | {r['scenario']} | {done} | {r['measure']} |"
                     f" {r['value']} | {goal} |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(Path(tmp), quick=args.quick)
    command = " ".join(["python", "benchmarks/every_path.py", *sys.argv[1:]])
    text = "\n".join([
        "# Every path (issue 38, items 1–12)", "",
        f"Command: `{command}` (Redis on 127.0.0.1:6379, a namespace per scenario; SQLite"
        " files; LangChain and LlamaIndex with stand-in models; the `tricache` command in"
        " processes of its own).  Each value must be at most its goal.", "",
        *table(rows),
    ]) + "\n"  # fmt: skip
    print(text)
    stem = "every_path_quick" if args.quick else "every_path"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text)
    (args.out / f"{stem}.json").write_text(json.dumps({"command": command, "rows": rows},
                                                      indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
