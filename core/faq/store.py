"""The FAQ fallback: curated answers in SQLite, tried after the semantic tier, before the LLM.

Each entry has a question, an answer and optional paraphrases; every question form is indexed
by its form key (``forms.form_key``: a question that differs only in width, spacing, case or
punctuation is the same question, found without a model), in FTS5 with the trigram tokenizer
(which works for Chinese as well as English) and, with an embedder, as a vector of its
canonical question (``canonical``: greetings, fillers and thanks removed).  Otherwise a query is
answered when its best candidate clears ``threshold`` and every guard of the semantic tier
passes against the matched question: a curated answer served to a look-alike ("How do I delete
my comment?" for "How do I delete my account?") is as wrong as a cached one.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import reprlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..key.canonical import canonical
from ..key.forms import folded, form_key, same_question
from ..key.request import normalize_query, text_bytes
from ..key.script import writing
from ..runtime.forks import hold_across_fork
from ..runtime.home import private_sqlite
from ..semantic.embed import Embedder
from ..semantic.guards.checks import DEFAULT_GUARDS, Guard, any_substitution, check
from ..settings import DEFAULT_FAQ
from ..stores.sqlite import open_read_only, transaction

__all__ = ["FAQ_GUARDS", "FaqChanges", "FaqEntry", "FaqFile", "FaqMatch", "FaqStore"]

log = logging.getLogger(__name__)

FAQ_GUARDS: tuple[Guard, ...] = DEFAULT_GUARDS

# Under this score (the packaged embedder's calibrated threshold) a curated question must ask
# about the same content words as the user's, no word swapped for another: there the embedder
# scores look-alikes as high as paraphrases ("… cover fire damage?" / "… burst pipes?" 0.82),
# and what the FAQ learns from the app's traffic (verified paraphrases) reaches further.
STRICT_BELOW = 0.92

_SCHEMA = """
CREATE TABLE IF NOT EXISTS faq (
    id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, question TEXT NOT NULL,
    answer TEXT NOT NULL, tags TEXT NOT NULL DEFAULT '[]', lang TEXT
);
CREATE TABLE IF NOT EXISTS faq_forms (
    id INTEGER PRIMARY KEY, faq_id INTEGER NOT NULL REFERENCES faq(id) ON DELETE CASCADE,
    text TEXT NOT NULL, vector BLOB, form TEXT
);
CREATE INDEX IF NOT EXISTS faq_forms_entry ON faq_forms(faq_id);
CREATE VIRTUAL TABLE IF NOT EXISTS faq_fts USING fts5(
    text, content='faq_forms', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS faq_forms_ai AFTER INSERT ON faq_forms BEGIN
    INSERT INTO faq_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS faq_forms_ad AFTER DELETE ON faq_forms BEGIN
    INSERT INTO faq_fts(faq_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
-- 'next_id' (ids are never reused: a process holding old vectors cannot match a new answer)
-- and 'version:<namespace>' (every change: other processes reload their vectors)
CREATE TABLE IF NOT EXISTS faq_state (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- answers reported wrong for a question (Cache.feedback): not served to it again
CREATE TABLE IF NOT EXISTS faq_rejections (
    namespace TEXT NOT NULL, faq_id INTEGER NOT NULL, question TEXT NOT NULL,
    PRIMARY KEY (namespace, faq_id, question)
);
"""
_NEXT_ID = """
INSERT INTO faq_state (name, value) VALUES ('next_id', 1 + max(
    (SELECT coalesce(max(id), 0) FROM faq), (SELECT coalesce(max(id), 0) FROM faq_forms)))
ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value
"""


@dataclass(slots=True)
class FaqEntry:
    question: str
    answer: str
    paraphrases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    lang: str | None = None


class FaqMatch(NamedTuple):
    faq_id: int
    question: str  # the curated question
    answer: str
    matched: str  # the form (question or paraphrase) that matched
    score: float  # cosine similarity (or 1.0 for an exact form match without an embedder)


class FaqChanges(NamedTuple):
    """What an import did with its entries."""

    added: int  # a question new to the FAQ
    replaced: int  # the question's entry held another answer, paraphrases, tags or language
    unchanged: int  # held as given


WRITE_BATCH = 50  # entries a write transaction: the FAQ's write lock is held for milliseconds
EMBED_BATCH = 32  # texts an embedder call, so a lookup's own embedding never waits long


class _FaqFile:
    """The FAQ's file: its connection, its version (bumped by every change) and the embedder."""

    def __init__(
        self,
        path: str | Path,
        *,
        namespace: str = "default",
        embedder: Embedder | None = None,
        threshold: float = DEFAULT_FAQ.threshold,
        guards: Sequence[Guard] = FAQ_GUARDS,
        candidates: int = 10,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            private_sqlite(self.path)  # 0600, and its -wal/-shm with it
        self.namespace = namespace
        self.embedder = embedder
        self.threshold = threshold
        self.guards = tuple(guards)
        self._strict_guards = (*self.guards, any_substitution)  # under STRICT_BELOW
        self.candidates = candidates
        # writes go through one connection (under ``_lock``, in short transactions), reads
        # through another (under ``_reads``): a lookup never waits on an import (WAL)
        self._lock = threading.Lock()
        self._reads = threading.Lock()
        hold_across_fork(self, "_lock", "_reads")
        if read_only:
            self._db = self._reader = open_read_only(self.path)
            self._reader.execute("SELECT id, question, answer FROM faq LIMIT 0")  # is it ours?
        else:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            self._add_form_keys()
            self._reader = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._matrix: tuple[np.ndarray, list[int]] | None = None  # vectors, form ids
        self._loaded_version = -1  # the FAQ version self._matrix was read at

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """One change to the FAQ: under the lock, in one transaction (rolled back when it
        raises); the vectors are read again after it."""
        with self._lock, transaction(self._db, "IMMEDIATE"):
            yield
        self._matrix = None

    def _new_id(self) -> int:
        return int(self._db.execute(_NEXT_ID).fetchone()[0])

    def _bump_version(self) -> None:
        self._db.execute(
            "INSERT INTO faq_state (name, value) VALUES (?, 1)"
            " ON CONFLICT(name) DO UPDATE SET value = value + 1",
            (f"version:{self.namespace}",),
        )

    def version(self) -> int:
        """Changes made to this namespace's FAQ, by any process."""
        rows = self._read(
            "SELECT value FROM faq_state WHERE name = ?", (f"version:{self.namespace}",)
        )
        return int(rows[0][0]) if rows else 0

    def count(self) -> int:
        rows = self._read("SELECT count(*) FROM faq WHERE namespace = ?", (self.namespace,))
        return int(rows[0][0])

    def _read(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """The rows of one query, read on the reader connection (never behind a write)."""
        with self._reads:
            return self._reader.execute(sql, params).fetchall()

    def _vectors(self, texts: list[str]) -> np.ndarray:
        assert self.embedder is not None
        return np.asarray(self.embedder.embed([_embeddable(t) for t in texts]), dtype=np.float32)

    def close(self) -> None:
        with self._lock, self._reads:
            self._db.close()
            self._reader.close()

    def _add_form_keys(self) -> None:
        """Give the forms of a file made by an older version their form keys (once)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(faq_forms)")}
        with self._changing():
            if "form" not in columns:
                self._db.execute("ALTER TABLE faq_forms ADD COLUMN form TEXT")
            rows = self._db.execute("SELECT id, text FROM faq_forms WHERE form IS NULL")
            self._db.executemany(
                "UPDATE faq_forms SET form = ? WHERE id = ?",
                [(form_key(text), form_id) for form_id, text in rows.fetchall()],
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS faq_forms_form ON faq_forms(form)")


class _FaqCuration(_FaqFile):
    """Curation: entries added or replaced by question (embedded outside the lock, written in
    batches), listed, deleted, rejected for a question."""

    def add(self, entries: Iterable[FaqEntry]) -> int:
        """Add entries as ``put`` does; returns how many were given."""
        return sum(self.put(entries))

    def put(self, entries: Iterable[FaqEntry]) -> FaqChanges:
        """Add entries, each replacing this namespace's entries with its question (the same
        question as a lookup sees it, ``forms.same_question``); one held exactly as given is
        left alone (its id and rejections kept).  Raises ``ValueError`` naming the entries with
        an empty question or answer, or a question given twice, and adds none of them.

        The entries are embedded first, outside any lock or transaction, then written in
        transactions of ``WRITE_BATCH`` entries: a lookup (in this process or another) never
        waits on an import.  A process stopped during one leaves the batches it wrote; importing
        the same entries again completes it."""
        given = list(entries)
        _check_entries(given)
        items = [_normalized(entry) for entry in given]
        fresh = [e for e in items if not self._holds(e)]  # (what an import changes: embedded)
        vectors = dict(zip(map(id, fresh), self._entry_vectors(fresh), strict=True))
        added = replaced = 0
        pause = 0.0
        for start in range(0, len(items), WRITE_BATCH):
            time.sleep(pause)  # a writer waiting (a feedback, another process) gets its turn
            began = time.monotonic()
            with self._changing():
                changed = 0
                for entry in items[start : start + WRITE_BATCH]:
                    held = self._same_entries(self._db, entry.question)
                    if [e for _, e in held] == [entry]:
                        continue
                    if held:
                        self._remove([faq_id for faq_id, _ in held])
                    if id(entry) not in vectors:  # changed since it was read: embedded here
                        vectors[id(entry)] = self._entry_vectors([entry])[0]
                    self._insert(entry, vectors[id(entry)])
                    replaced += bool(held)
                    added += not held
                    changed += 1
                if changed:
                    self._bump_version()
            pause = min(time.monotonic() - began, 0.1)  # (the lock held half the time at most)
        return FaqChanges(added, replaced, len(items) - added - replaced)

    def _holds(self, entry: FaqEntry) -> bool:
        """Whether this namespace holds ``entry`` as given, and no other with its question."""
        with self._reads:
            return [e for _, e in self._same_entries(self._reader, entry.question)] == [entry]

    def _same_entries(self, db: sqlite3.Connection, question: str) -> list[tuple[int, FaqEntry]]:
        """This namespace's entries whose question is ``question`` in another form (the
        caller holds the lock of ``db``)."""
        rows = db.execute(
            "SELECT q.id, q.question, q.answer, q.tags, q.lang FROM faq_forms f"
            " JOIN faq q ON q.id = f.faq_id"
            " WHERE f.form = ? AND q.namespace = ? AND f.text = q.question ORDER BY q.id",
            (form_key(question), self.namespace),
        ).fetchall()
        out = []
        for faq_id, text, answer, tags, language in rows:
            if same_question(text, question):
                forms = db.execute(
                    "SELECT text FROM faq_forms WHERE faq_id = ? ORDER BY id", (faq_id,)
                ).fetchall()
                out.append((faq_id, _stored(text, answer, [f for (f,) in forms], tags, language)))
        return out

    def _insert(self, entry: FaqEntry, vectors: np.ndarray | None) -> None:
        faq_id = self._new_id()
        self._db.execute(
            "INSERT INTO faq (id, namespace, question, answer, tags, lang)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (faq_id, self.namespace, entry.question, entry.answer,
             json.dumps(list(entry.tags)), entry.lang),
        )  # fmt: skip
        for i, form in enumerate((entry.question, *entry.paraphrases)):
            blob = vectors[i].tobytes() if vectors is not None else None
            self._db.execute(
                "INSERT INTO faq_forms (id, faq_id, text, vector, form) VALUES (?, ?, ?, ?, ?)",
                (self._new_id(), faq_id, form, blob, form_key(form)),
            )

    def _remove(self, ids: list[int]) -> int:
        """Delete entries of this namespace by id, with their forms and rejections."""
        marks = ",".join("?" * len(ids)) or "NULL"
        where = f"namespace = ? AND id IN ({marks})"
        gone = self._db.execute(f"DELETE FROM faq WHERE {where}", (self.namespace, *ids))
        self._db.execute(f"DELETE FROM faq_forms WHERE faq_id IN ({marks})", ids)
        self._db.execute(
            f"DELETE FROM faq_rejections WHERE namespace = ? AND faq_id IN ({marks})",
            (self.namespace, *ids),
        )
        return int(gone.rowcount)

    def _entry_vectors(self, entries: list[FaqEntry]) -> list[np.ndarray | None]:
        """The vectors of each entry's forms (question first), embedded ``EMBED_BATCH`` texts
        a call: a lookup's own embedding waits for one such call at most."""
        if self.embedder is None:
            return [None] * len(entries)
        texts = [form for entry in entries for form in (entry.question, *entry.paraphrases)]
        chunks = [self._vectors(texts[i : i + EMBED_BATCH])
                  for i in range(0, len(texts), EMBED_BATCH)]  # fmt: skip
        matrix = np.vstack(chunks) if chunks else np.zeros((0, 1), np.float32)
        out: list[np.ndarray | None] = []
        at = 0
        for entry in entries:
            n = 1 + len(entry.paraphrases)
            out.append(matrix[at : at + n])
            at += n
        return out

    def entries(self) -> list[tuple[int, FaqEntry]]:
        """Every entry of this namespace, with its id, oldest first."""
        with self._reads:
            rows = self._reader.execute(
                "SELECT id, question, answer, tags, lang FROM faq WHERE namespace = ? ORDER BY id",
                (self.namespace,),
            ).fetchall()
            forms = self._reader.execute(
                "SELECT faq_id, text FROM faq_forms WHERE faq_id IN"
                " (SELECT id FROM faq WHERE namespace = ?) ORDER BY id",
                (self.namespace,),
            ).fetchall()
        texts: dict[int, list[str]] = {}
        for faq_id, text in forms:
            texts.setdefault(faq_id, []).append(text)
        return [(faq_id, _stored(question, answer, texts.get(faq_id, []), tags, lang))
                for faq_id, question, answer, tags, lang in rows]  # fmt: skip

    def delete(self, faq_ids: Iterable[int]) -> int:
        """Delete entries by id (their forms and rejections with them); returns how many."""
        ids = [int(i) for i in faq_ids]
        with self._changing():
            gone = self._remove(ids)
            if gone:
                self._bump_version()
        return gone

    def import_file(self, path: str | Path) -> int:
        """Import CSV or JSONL with question, answer and optional paraphrases, tags, lang."""
        return self.add(read_entries(path))

    def clear(self) -> None:
        with self._changing():
            self._db.execute("DELETE FROM faq WHERE namespace = ?", (self.namespace,))
            self._db.execute("DELETE FROM faq_rejections WHERE namespace = ?", (self.namespace,))
            self._bump_version()

    def reject(self, faq_id: int, question: str) -> None:
        """``faq_id``'s answer was wrong for a question (given by its ``question_key``): never
        serve it to that question again (other questions it matches still get it)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO faq_rejections (namespace, faq_id, question)"
                " VALUES (?, ?, ?)",
                (self.namespace, faq_id, question),
            )


class _FaqSearch(_FaqFile):
    """Matching: full-text candidates over every curated form, scored by their vectors, the
    same question in another form first, never an answer rejected for the question."""

    def _rejected(self, faq_id: int, question: str) -> bool:
        return bool(self._read(
            "SELECT 1 FROM faq_rejections WHERE namespace = ? AND faq_id = ? AND question = ?",
            (self.namespace, faq_id, question_key(question)),
        ))  # fmt: skip

    def search(self, query: str, limit: int = 5) -> list[FaqMatch]:
        """Candidates best first: by cosine similarity with an embedder, else by FTS5 rank."""
        forms = self._fts_forms(query, self.candidates)
        scores: dict[int, float] = {}
        if self.embedder is not None:
            vector = self.embedder.embed([_embeddable(query)])[0]
            matrix, ids = self._vector_matrix()
            if len(ids):
                sims = matrix @ vector
                for i in np.argsort(-sims)[: self.candidates]:
                    scores[ids[i]] = float(sims[i])
            for form_id in forms:  # text matches the vectors did not rank: score them too
                if form_id not in scores:
                    scores[form_id] = self._form_similarity(form_id, vector)
        else:
            folded = query.strip().casefold()
            for form_id in forms:
                scores[form_id] = 1.0 if self._form_text(form_id).casefold() == folded else 0.0
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])
        matches, seen = [], set()
        for form_id, score in ranked:
            match = self._match(form_id, score)
            if match is not None and match.faq_id not in seen:
                seen.add(match.faq_id)
                matches.append(match)
            if len(matches) >= limit:
                break
        return matches

    def answer(self, query: str) -> FaqMatch | None:
        """The confident answer for ``query``, or ``None``: a curated question it asks in
        another form (no model asked), else the best candidate that clears the threshold and
        passes every guard."""
        for match in self.matches(query, self.threshold):
            return match
        return None

    def matches(self, query: str, floor: float) -> Iterator[FaqMatch]:
        """Curated matches for ``query`` that pass every guard and score ``floor`` or more,
        best first (a form of the same question first, at 1.0); none rejected for it, and each
        matched by a curated form in the query's script (``script.writing``)."""
        if not query.strip() or self.count() == 0:
            return
        for match in self._same_questions(query):
            if not self._rejected(match.faq_id, query):
                yield match
                return
        asked_in = writing(query)
        for match in self.search(query, limit=self.candidates):
            if match.score < floor:
                return
            if writing(match.matched) != asked_in:
                continue  # "Docker是什么" gets no answer curated for "What is Docker?"
            guards = self.guards if match.score >= STRICT_BELOW else self._strict_guards
            if check(match.matched, query, guards)[0] is None:
                if not self._rejected(match.faq_id, query):
                    yield match
                return  # the best guarded match decides: it is served, or nothing is

    def entry(self, faq_id: int) -> FaqMatch | None:
        """Entry ``faq_id`` of this namespace (its question matched, score 1.0)."""
        rows = self._read(
            "SELECT id, question, answer FROM faq WHERE id = ? AND namespace = ?",
            (faq_id, self.namespace),
        )
        return FaqMatch(rows[0][0], rows[0][1], rows[0][2], rows[0][1], 1.0) if rows else None

    def _same_questions(self, query: str) -> list[FaqMatch]:
        """Curated forms that ``query`` asks in another form (``forms.same_question``): a
        curated question before a paraphrase, the newest entry first (the last import wins)."""
        rows = self._read(
            "SELECT q.id, q.question, q.answer, f.text FROM faq_forms f"
            " JOIN faq q ON q.id = f.faq_id WHERE f.form = ? AND q.namespace = ?"
            " ORDER BY f.text = q.question DESC, q.id DESC LIMIT 16",
            (form_key(query), self.namespace),
        )
        return [
            FaqMatch(faq_id, question, answer, text, 1.0)
            for faq_id, question, answer, text in rows
            if same_question(text, query)
        ]

    def _vector_matrix(self) -> tuple[np.ndarray, list[int]]:
        version = self.version()  # another process may have changed the FAQ
        if self._matrix is None or version != self._loaded_version:
            self._loaded_version = version
            rows = self._read(
                "SELECT f.id, f.vector FROM faq_forms f JOIN faq q ON q.id = f.faq_id"
                " WHERE q.namespace = ? AND f.vector IS NOT NULL",
                (self.namespace,),
            )
            ids = [r[0] for r in rows]
            matrix = (
                np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
                if rows
                else np.zeros((0, 1), np.float32)
            )
            self._matrix = (matrix, ids)
        return self._matrix

    def _fts_forms(self, query: str, limit: int) -> list[int]:
        terms = _fts_terms(query)
        if not terms:
            return []
        try:
            rows = self._read(
                "SELECT f.id FROM faq_fts JOIN faq_forms f ON f.id = faq_fts.rowid"
                " JOIN faq q ON q.id = f.faq_id WHERE faq_fts MATCH ? AND q.namespace = ?"
                " ORDER BY bm25(faq_fts) LIMIT ?",
                (terms, self.namespace, limit),
            )
        except sqlite3.OperationalError:  # a query FTS5 cannot parse: no text candidates
            return []
        return [r[0] for r in rows]

    def _form_similarity(self, form_id: int, vector: np.ndarray) -> float:
        rows = self._read("SELECT vector FROM faq_forms WHERE id = ?", (form_id,))
        if not rows or rows[0][0] is None:
            return 0.0
        return float(np.frombuffer(rows[0][0], dtype=np.float32) @ vector)

    def _form_text(self, form_id: int) -> str:
        rows = self._read("SELECT text FROM faq_forms WHERE id = ?", (form_id,))
        return str(rows[0][0]) if rows else ""

    def _match(self, form_id: int, score: float) -> FaqMatch | None:
        rows = self._read(
            "SELECT q.id, q.question, q.answer, f.text FROM faq_forms f"
            " JOIN faq q ON q.id = f.faq_id WHERE f.id = ?",
            (form_id,),
        )
        return FaqMatch(rows[0][0], rows[0][1], rows[0][2], rows[0][3], score) if rows else None


class FaqStore(_FaqCuration, _FaqSearch):
    """Curated question/answer pairs of one namespace in one SQLite file.

    ``read_only=True`` opens an existing file with SQLite's ``mode=ro`` (``tricache faq list``
    and ``faq search``): nothing is created, migrated or chmodded; ``FileNotFoundError`` when
    it is absent, and a write raises ``sqlite3.OperationalError``."""


def question_key(question: str) -> str:
    """How a rejected question is remembered: a digest of its normalized form."""
    return blake2b(text_bytes(normalize_query(question)), digest_size=16).hexdigest()


def _fts_terms(query: str) -> str:
    """An FTS5 OR-query of the query's 3+-character chunks (trigram tokenizer needs >= 3)."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in query).split() if len(w) >= 3]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


def _embeddable(text: str) -> str:
    return canonical(folded(text)).encode("utf-8", "replace").decode("utf-8")


def as_entry(item: object, where: str = "entry") -> FaqEntry:
    """A ``FaqEntry`` from an entry, a dict (question, answer[, paraphrases, tags, lang]) or a
    ``(question, answer)`` tuple; ``TypeError`` for anything else, naming ``where``."""
    if isinstance(item, FaqEntry):
        return item
    if isinstance(item, dict):
        unknown = set(item) - {"question", "answer", "paraphrases", "tags", "lang"}
        if unknown:
            raise TypeError(f"{where}: unknown keys {sorted(unknown)} (question, answer,"
                            " paraphrases, tags, lang)")  # fmt: skip
        return FaqEntry(item.get("question"), item.get("answer"),  # type: ignore[arg-type]
                        _list(item.get("paraphrases")), _list(item.get("tags")),
                        item.get("lang") or None)  # fmt: skip
    if isinstance(item, tuple | list) and len(item) in (2, 3):
        return FaqEntry(item[0], item[1], _list(item[2]) if len(item) == 3 else ())
    raise TypeError(
        f"{where}: a FaqEntry, a dict with question and answer, or a (question, answer) tuple,"
        f" not {type(item).__name__}"
    )


def write_entries(entries: Iterable[FaqEntry], path: str | Path) -> int:
    """Write entries as CSV (header row; paraphrases and tags joined with '|', a '|' or a
    backslash inside one escaped with a backslash) or, for a ``.jsonl`` file, one object a
    line: what ``read_entries`` reads back, exactly."""
    path = Path(path)
    entries = list(entries)
    with path.open("w", encoding="utf-8", newline="") as f:
        if path.suffix.lower() in (".jsonl", ".json"):
            for e in entries:
                f.write(json.dumps({"question": e.question, "answer": e.answer,
                                    "paraphrases": list(e.paraphrases), "tags": list(e.tags),
                                    "lang": e.lang}, ensure_ascii=False) + "\n")  # fmt: skip
        else:
            writer = csv.writer(f)
            writer.writerow(["question", "answer", "paraphrases", "tags", "lang"])
            for e in entries:
                writer.writerow([e.question, e.answer, _joined(e.paraphrases), _joined(e.tags),
                                 e.lang or ""])  # fmt: skip
    return len(entries)


def _check_entries(entries: Sequence[FaqEntry]) -> None:
    """Refuse entries with an empty question or answer, or a question given twice: name them
    (``entries[i]``)."""
    faults = [
        f"entries[{i}] ({reprlib.repr(entry.question)}): {fault}"
        for i, entry in enumerate(entries)
        if (fault := _entry_fault(entry.question, entry.answer))
    ]
    if not faults:
        repeats = _repeats([entry.question for entry in entries])
        faults = [f"entries[{i}] ({reprlib.repr(entries[i].question)}): the question of"
                  f" entries[{first}] again" for i, first in repeats]  # fmt: skip
    if faults:
        raise ValueError(_faults("FAQ entries", faults, "nothing was added"))


def _repeats(questions: Sequence[str]) -> list[tuple[int, int]]:
    """``(i, first)`` for each question that asks the one at ``first`` again, in another form
    or not (``forms.same_question``): one question may have one answer only."""
    seen: dict[str, list[int]] = {}
    out = []
    for i, question in enumerate(questions):
        group = seen.setdefault(form_key(question), [])
        first = next((j for j in group if same_question(questions[j], question)), None)
        if first is not None:
            out.append((i, first))
        group.append(i)
    return out


def _normalized(entry: FaqEntry) -> FaqEntry:
    """``entry`` as the FAQ holds it: paraphrases and tags stripped, each once (no empty one,
    no paraphrase that is the question itself), no empty language."""
    return FaqEntry(entry.question, entry.answer,
                    _distinct(entry.paraphrases, entry.question), _distinct(entry.tags),
                    entry.lang or None)  # fmt: skip


def _distinct(texts: Iterable[object], but: str | None = None) -> tuple[str, ...]:
    stripped = (str(text).strip() for text in texts if text is not None)
    return tuple(dict.fromkeys(t for t in stripped if t and t != but))


def _stored(question: str, answer: str, forms: list[str], tags: str | None,
            lang: str | None) -> FaqEntry:  # fmt: skip
    """An entry from its row and the texts of its forms (oldest first)."""
    return FaqEntry(question, answer, tuple(f for f in forms if f != question),
                    tuple(json.loads(tags or "[]")), lang)  # fmt: skip


def _entry_fault(question: object, answer: object) -> str | None:
    """What is wrong with a question/answer pair, or ``None``."""
    if not isinstance(question, str) or not isinstance(answer, str):
        return "needs a question and an answer"
    empty = [name for name, text in (("question", question), ("answer", answer))
             if not text.strip()]  # fmt: skip
    return f"empty {' and '.join(empty)}" if empty else None


def _faults(what: str, faults: list[str], outcome: str, shown: int = 5) -> str:
    """One message for every faulty row (the first ``shown`` of them named)."""
    more = f"; and {len(faults) - shown} more" if len(faults) > shown else ""
    rows = "row" if len(faults) == 1 else "rows"
    return f"{what}: {len(faults)} bad {rows}, {outcome}: {'; '.join(faults[:shown])}{more}"


def read_text(path: str | Path) -> str:
    """A text file's content (UTF-8, with or without a BOM); raises ``ValueError`` naming the
    file and the line of the first byte that is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{path}: not UTF-8 text (line {line}: byte 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from None


class FaqFile(NamedTuple):
    """What an import file holds: its entries, and the columns (CSV) or keys (JSONL) it has
    that the FAQ keeps nothing of, as the file names them."""

    entries: list[FaqEntry]
    ignored: tuple[str, ...]


def read_entries(path: str | Path) -> list[FaqEntry]:
    """CSV (header: question, answer[, paraphrases separated by '|', tags, lang]; names in
    any case, spaces around them ignored) or JSONL (one object a line); raises ``ValueError``
    naming what is wrong, and where: a file with any bad row (no question or answer, or an
    empty one) is refused whole.  Columns the FAQ keeps nothing of are logged (a warning)."""
    read = read_faq_file(path)
    if read.ignored:
        log.warning("tricache: %s: ignored columns: %s", path, ", ".join(read.ignored))
    return read.entries


def read_faq_file(path: str | Path) -> FaqFile:
    """``read_entries``, with the ignored columns returned, not logged (``faq import``)."""
    path = Path(path)
    ignored: dict[str, None] = {}
    rows: list[tuple[int, Any]] = []
    text = read_text(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        for n, line in enumerate(io.StringIO(text, newline=""), 1):
            if not line.strip():
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {n}: not JSON ({exc.msg})") from None
            if isinstance(rows[-1][1], dict):
                ignored |= dict.fromkeys(str(k) for k in rows[-1][1] if k not in _COLUMNS)
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        with _CSV_LIMIT:  # (a field as long as the file: a long answer is no error)
            limit = csv.field_size_limit(max(len(text), csv.field_size_limit()))
            try:
                header = list(reader.fieldnames or ())
                reader.fieldnames = _column_names(path, header)
                rows = [(reader.line_num, row) for row in reader]
            except csv.Error as exc:
                raise ValueError(f"{path}: line {reader.line_num}: {exc}") from None
            finally:
                csv.field_size_limit(limit)
        names = set(reader.fieldnames)
        if header and not {"question", "answer"} <= names:
            first = ", ".join(header)
            what = "no header row" if not names & _COLUMNS else "no question and answer columns"
            raise ValueError(
                f"{path}: line 1: {what} (it reads {first!r}); the first line names the"
                " columns: question,answer[,paraphrases,tags,lang]"
            )
        ignored |= dict.fromkeys(
            given.strip() for given, name in zip(header, reader.fieldnames, strict=True)
            if name and name not in _COLUMNS
        )  # fmt: skip
    entries, faults = [], []
    for n, row in rows:
        if not isinstance(row, dict):
            raise ValueError(
                f"{path}: line {n}: expected an object with question and answer, got "
                f"{type(row).__name__} (JSONL: one object a line, not a JSON array)"
            )
        question, answer = row.get("question"), row.get("answer")
        if answer is None and isinstance(row.get("answers"), list) and row["answers"]:
            answer = row["answers"][0]
        if fault := _entry_fault(question, answer):
            faults.append(f"line {n}: {fault}")
            continue
        entries.append(
            FaqEntry(str(question), str(answer), _list(row.get("paraphrases")),
                     _list(row.get("tags")), row.get("lang") or None)
        )  # fmt: skip
    if not faults:
        lines = [n for n, _ in rows]  # (each row made an entry)
        faults = [f"line {lines[i]}: the question of line {lines[first]} again (one question,"
                  " one answer: keep one of the rows)"
                  for i, first in _repeats([e.question for e in entries])]  # fmt: skip
    if faults:
        raise ValueError(_faults(str(path), faults, "nothing was imported"))
    return FaqFile(entries, tuple(ignored))


_COLUMNS = frozenset({"question", "answer", "answers", "paraphrases", "tags", "lang"})


def _column_names(path: Path, header: Sequence[str | None]) -> list[str]:
    """A CSV header's column names as the FAQ reads them: stripped, in lower case; a column
    it reads, named twice, is a ``ValueError``."""
    names = [(name or "").strip().lower() for name in header]
    twice = sorted({n for n in names if n in _COLUMNS and names.count(n) > 1})
    if twice:
        raise ValueError(f"{path}: line 1: the column {twice[0]!r} is named twice")
    return names


_CSV_LIMIT = threading.Lock()  # csv.field_size_limit is the process's: raised, then restored
_PIECE = re.compile(r"\\[\\|]|\||[^\\|]+|\\")  # an escape, a separator, text, a backslash


def _list(value: Any) -> tuple[str, ...]:
    """Paraphrases or tags: a list, or a text of them separated by '|' ('\\|' is a '|' inside
    one, '\\\\' a backslash; any other backslash is itself)."""
    if not value:
        return ()
    if not isinstance(value, str):  # (a null one is no text: dropped, never "None")
        return tuple(str(v) for v in value if v is not None)
    pieces: list[str] = []
    current: list[str] = []
    for token in _PIECE.findall(value):
        if token == "|":
            pieces.append("".join(current))
            current = []
        else:
            current.append(token[-1] if len(token) == 2 and token[0] == "\\" else token)
    pieces.append("".join(current))
    return tuple(p.strip() for p in pieces if p.strip())


def _joined(texts: Iterable[str]) -> str:
    """What ``_list`` reads back as ``texts``."""
    return "|".join(t.replace("\\", "\\\\").replace("|", "\\|") for t in texts)
