"""The ``tricache`` command."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import re
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import platformdirs
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from ..cache import Cache
from ..exact.link import StoreUnavailable
from ..runtime.home import data_dir
from ..settings import Exact, Faq, Qdrant, Semantic
from ..stores.base import STATS_KEPT_S


class CliError(Exception):
    """An expected failure (bad input, unreachable store): one line on stderr, exit 2."""

    def __init__(self, what: str, where: object = None) -> None:
        super().__init__(what)
        self.what = what
        self.where = where

    def __str__(self) -> str:
        return f"{self.what} ({self.where})" if self.where not in (None, "") else self.what


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input or an unusable store, not a bug in tricache."""
    errors: list[type[BaseException]] = [
        CliError, typer.BadParameter, ValueError, OSError, sqlite3.Error, csv.Error,
        StoreUnavailable,
    ]  # fmt: skip
    with contextlib.suppress(ImportError):
        import redis

        errors.append(redis.exceptions.RedisError)
    return tuple(errors)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, typer.BadParameter):
        return exc.format_message()
    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return str(CliError(exc.strerror, exc.filename))
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ValueError) else f"{type(exc).__name__}: {text}"


class _Group(TyperGroup):
    """The one error handler of every command: an expected error becomes one line on stderr
    (``tricache: error: WHAT (WHERE)``) and exit status 2; anything else is a bug and keeps
    its traceback.  ``TRICACHE_DEBUG=1`` shows the traceback of expected errors too."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _expected_errors() as exc:
            if os.environ.get("TRICACHE_DEBUG"):
                raise
            message = visible(" ".join(_one_line(exc).split()))
            typer.echo(f"tricache: error: {message}", err=True)
            sys.stdout.flush()
            raise typer.Exit(2) from None


# What a stored text holds is printed, never obeyed: C0 and C1 controls (ESC, BEL, CSI …),
# line separators and bidi overrides are shown as escapes (\x1b, \u202e); Rich markup in it is
# never parsed (table cells are ``Text``, JSON is printed as is).
_BIDI = r"\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_HIDDEN = re.compile(rf"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_HIDDEN_IN_JSON = re.compile(rf"[\x7f-\x9f{_BIDI}]")


def visible(text: str) -> str:
    """``text`` with each control character shown as its Python escape (``\\x1b``, ``\\n``,
    ``\\u202e``): printable on any terminal, and what it was stays readable."""
    return _HIDDEN.sub(lambda m: repr(m.group())[1:-1], text)


def _cell(text: str, width: int | None = None) -> Text:
    """A table cell of stored text (its first ``width`` characters): text, not markup."""
    return Text(visible(text if width is None else text[:width]))


def _json(value: object, **options: Any) -> str:
    """JSON for a terminal: ``json.dumps`` escapes C0 controls; DEL, C1 controls, line
    separators and bidi overrides are escaped too (``\\u009b``): the same JSON value."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return _HIDDEN_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


app = typer.Typer(
    help="TriCache: a three-tier cache for LLM calls.", no_args_is_help=True, cls=_Group
)
console = Console(soft_wrap=True)

RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", help="Shared L2 on Redis instead of SQLite.")
]
Path_ = Annotated[
    Path | None, typer.Option("--path", help="SQLite file (default: under TRICACHE_HOME).")
]
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Cache namespace.")]


def _open(redis_url: str | None, path: Path | None, namespace: str, **kw: Any) -> Cache:
    """A cache whose L2 store is known to work: the library falls back to L1 only when a
    store cannot be opened, but a command that would persist nothing must say so.  A command
    is a batch job: the semantic tier is opened before it runs (``warm``)."""
    kw.setdefault("warm", True)
    if redis_url:
        _check_redis(redis_url)
        return Cache(redis_url=redis_url, path=path, namespace=namespace, **kw)
    from ..stores.sqlite import SQLiteStore

    file = path or data_dir() / "exact.sqlite3"
    if file.is_dir():
        raise CliError("is a directory, not a SQLite file", f"--path {file}")
    try:
        store = SQLiteStore(file)
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot open the SQLite store: {exc}", f"--path {file}") from None
    return Cache(store=store, path=path, namespace=namespace, **kw)


def _reading(redis_url: str | None, path: Path | None, namespace: str) -> Cache:
    """The exact tier on its store opened read-only, for a command that only reads (``entries
    list|show``, ``stats``): no folder or file is created, nothing migrated or
    chmodded, and a store that is not there is an error (exit 2), never an empty one."""
    if redis_url:
        return _maintenance(redis_url, path, namespace)
    from ..stores.sqlite import SQLiteStore

    file = _existing_store(path)
    try:
        store = SQLiteStore(file, read_only=True)
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot read the SQLite store: {exc}", f"--path {file}") from None
    return Cache(store=store, path=file, namespace=namespace, exact=Exact(bloom=False),
                 semantic=False, faq=False, warm=True)  # fmt: skip


def _home() -> Path:
    """Where the default stores are (``runtime.home.data_dir``), without creating it."""
    env = os.environ.get("TRICACHE_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("tricache"))


def _existing_store(
    path: Path | None, missing: str = "no store here (nothing was cached at this path: a typo?)"
) -> Path:
    """The SQLite file ``--path`` names (else the default one), which must exist."""
    file = path or _home() / "exact.sqlite3"
    if file.is_dir():
        raise CliError("is a directory, not a SQLite file", f"--path {file}")
    if not file.exists():
        raise CliError(missing, f"--path {file}")
    return file


def _reading_faq(
    redis_url: str | None, path: Path | None, namespace: str, *, embedder: bool
) -> Any:
    """The FAQ opened read-only (``faq list``, ``faq search``), or ``None`` when nothing was
    imported; where a cache on this store keeps it (``TierLoader.faq_path``)."""
    from ..faq.store import FaqStore

    file = path.with_name(f"{path.stem}-faq.sqlite3") if path else _home() / "faq.sqlite3"
    if not file.exists():
        if not redis_url:  # no store at all: an error, not an empty FAQ
            _existing_store(path, "no store here: the FAQ is empty (tricache faq import FILE)")
        return None
    model = None
    if embedder:
        from ..semantic.embed import get_embedder

        model = get_embedder(None)
    try:
        return FaqStore(file, namespace=namespace, embedder=model, threshold=Faq().threshold,
                        read_only=True)  # fmt: skip
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot read the FAQ: {exc}", file) from None


def _faq_entries(redis_url: str | None, path: Path | None, namespace: str) -> list[Any]:
    """The FAQ's entries with their ids, read read-only (none when nothing was imported)."""
    store = _reading_faq(redis_url, path, namespace, embedder=False)
    if store is None:
        return []
    with contextlib.closing(store):
        return list(store.entries())


def _check_redis(url: str) -> None:
    try:
        import redis
    except ImportError:
        raise CliError("--redis-url needs the redis package (pip install redis)") from None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (ValueError, redis.exceptions.RedisError) as exc:
        raise CliError(f"cannot use Redis: {exc}", f"--redis-url {url}") from None


def _check_writable(path: Path, option: str) -> None:
    """Fail before the work, not after it, when an output file cannot be written; its folder
    must exist (a typo in a path creates no folders)."""
    if path.is_dir():
        raise CliError("is a directory", f"{option} {path}")
    folder = path.parent
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        raise CliError(f"{what}: {folder} (create it first)", f"{option} {path}")
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        raise CliError(f"cannot write: {exc.strerror or exc}", f"{option} {path}") from None
    if not existed:
        path.unlink()


def _fail(what: str, where: object = None) -> NoReturn:
    raise CliError(what, where)


def _maintenance(redis_url: str | None, path: Path | None, namespace: str) -> Cache:
    """The exact tier and its store only (no embedder, index or FAQ), for evict and clear."""
    return _open(redis_url, path, namespace, exact=Exact(bloom=False), semantic=False, faq=False)


def _check_embedder(name: str | None) -> None:
    """Unknown models fail now, not after minutes of Hugging Face hub retries."""
    from ..semantic.embed import _BUILTIN

    if name is None or name in _BUILTIN or Path(name).exists():
        return
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("0", "false", "no"):
        return  # the user asked for downloads
    with contextlib.suppress(ImportError):
        from huggingface_hub import try_to_load_from_cache

        for repo in (name, f"sentence-transformers/{name}"):
            with contextlib.suppress(Exception):
                if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                    return
    _fail(
        f"unknown embedder: not one of {', '.join(_BUILTIN)}, a local path or a model in the "
        "Hugging Face cache (HF_HUB_OFFLINE=0 lets tricache download it)",
        f"--embedder {name}",
    )


@app.command()
def demo(
    requests: Annotated[int, typer.Option("--requests", "-r", min=10)] = 300,
    llm_latency: Annotated[float, typer.Option(help="Stand-in LLM latency, seconds.")] = 0.3,
    redis_url: RedisUrl = None,
    qdrant_url: Annotated[
        str | None, typer.Option(help="Qdrant server for the semantic tier.")
    ] = None,
    path: Path_ = None,
    chart: Annotated[
        Path | None, typer.Option(help="Write a PNG chart of the results here.")
    ] = None,
    seed: int = 7,
) -> None:
    """Run a mixed workload through LangChain and the cache; print what it saved and served."""
    from . import demo as core_demo

    if not llm_latency >= 0:
        _fail(f"must be >= 0, got {llm_latency}", "--llm-latency")
    if chart is not None:
        _check_writable(chart, "--chart")

    try:  # through LangChain when it is installed, else through the core API
        from langchain_tricache.demo import run_langchain_demo as runner

        via = "LangChain (a TriCache-cached stand-in chat model)"
    except ImportError:
        runner, via = core_demo.run_demo, "the core API (pip install langchain-core for LangChain)"
    semantic = Semantic(index=Qdrant(qdrant_url)) if qdrant_url else True
    with tempfile.TemporaryDirectory(prefix="tricache-demo-") as tmp:
        store_path = path or Path(tmp) / "demo.sqlite3"
        namespace = f"demo-{seed}"
        faq = Faq(systems=(core_demo.SYSTEM,))  # the demo app's own prompt: curated answers fit
        workers = [
            _open(redis_url, store_path, namespace, semantic=semantic, faq=faq) for _ in range(2)
        ]
        workers[0].clear()  # a fresh start, so the numbers mean the same every run
        workers[0].add_faq(core_demo.faq_entries())
        console.print(
            f"{requests} requests through {via}; L2: [bold]{workers[0].exact.store_name}[/]; "
            f"half of them through a second worker that starts with an empty L1."
        )
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("requests", total=requests)
            report = runner(
                workers,
                requests,
                llm_latency=llm_latency,
                seed=seed,
                on_step=lambda: progress.advance(task),
            )
        stats = core_demo.merged_counts(workers)
        if redis_url or qdrant_url:
            workers[0].clear()  # leave no demo entries in shared stores
        for worker in workers:
            worker.close()
    _print_demo(report, stats)
    console.print(escape(core_demo.where_figures(namespace, path, redis_url)))
    if chart is None:
        console.print("(--chart demo.png writes these numbers as a PNG chart)")
        return
    try:
        console.print(f"chart: {core_demo.write_chart(report, chart)}")
    except ImportError:
        console.print("(pip install matplotlib for the chart)")


def _print_demo(report: Any, stats: dict[str, Any]) -> None:
    from .demo import KIND_ORDER, TIER_ORDER

    kinds = Table(title="requests by kind: who answered")
    for column in ("request kind", "requests", *TIER_ORDER, "wrong answers"):
        kinds.add_column(column, justify="left" if column == "request kind" else "right")
    for kind in [k for k in KIND_ORDER if k in report.by_kind]:
        outcome = report.by_kind[kind]
        row = [str(outcome[t]) for t in TIER_ORDER]
        kinds.add_row(kind, str(sum(outcome[t] for t in TIER_ORDER)), *row, str(outcome["wrong"]))
    console.print(kinds)
    tiers = Table(title="tiers")
    for column in ("tier", "answers", "wrong", "median overhead", "p95 overhead"):
        tiers.add_column(column, justify="left" if column == "tier" else "right")
    for tier in TIER_ORDER:
        samples = sorted(report.latency_ms.get(tier, []))
        if not samples:
            continue
        p95 = samples[int(len(samples) * 0.95)]
        tiers.add_row(tier, str(len(samples)), str(report.wrong_by_tier[tier]),
                      f"{statistics.median(samples):.2f} ms", f"{p95:.2f} ms")  # fmt: skip
    console.print(tiers)
    saved = report.requests - report.llm_calls
    refused = sum(v for k, v in stats.get("semantic", {}).items() if k.startswith("guard_"))
    tokens = sum(c.get("tokens_saved", 0) for c in stats.values() if isinstance(c, dict))
    console.print(
        f"LLM calls: {report.llm_calls} of {report.requests} "
        f"([bold green]{saved / report.requests:.0%} saved[/]); "
        f"[bold]wrong answers served: {report.wrong}[/]; "
        f"wall time {report.wall_s:.1f} s vs {report.no_cache_s:.1f} s without the cache; "
        f"guards refused {refused} look-alike candidates; "
        f"Bloom filter saved {stats.get('exact', {}).get('bloom_skips', 0)} L2 round trips; "
        f"LLM tokens saved {tokens:,}"
    )


PairsFile = Annotated[
    Path,
    typer.Argument(
        exists=True, dir_okay=False, help="TSV/CSV: q1,q2 (or text1,text2), label[, kind, lang]"
    ),
]
EmbedderName = Annotated[
    str | None,
    typer.Option("--embedder", help="use-m (default), e5-small-q4, all-MiniLM-L6-v2, or any "
                 "sentence-transformers model name or path."),
]  # fmt: skip


@app.command("eval-pairs")
def eval_pairs(
    pairs_file: PairsFile,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    embedder: EmbedderName = None,
    threshold: Annotated[float | None, typer.Option(help="Override the threshold.")] = None,
    no_guards: Annotated[bool, typer.Option("--no-guards", help="Threshold only.")] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N pairs.")] = None,
) -> None:
    """Run the whole semantic decision on labelled pairs: store q1, look up q2, score it."""
    from .evaluate import evaluate_pairs

    if threshold is not None and not 0 < threshold <= 1:
        _fail(f"must be in (0, 1], got {threshold}", "--threshold")
    pairs = _read_pairs(pairs_file, limit)
    _check_embedder(embedder)
    options: dict[str, Any] = {"embedder": embedder, "threshold": threshold}
    if no_guards:
        options["guards"] = ()
    if as_json:
        print(json.dumps(evaluate_pairs(pairs, **options).as_json()))
        return
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("pairs", total=len(pairs))
        report = evaluate_pairs(pairs, on_step=lambda: progress.advance(task), **options)
    table = Table(title=f"eval-pairs: {pairs_file.name} ({len(pairs)} pairs)")
    for column in ("slice", "n", "precision", "recall", "false-hit rate"):
        table.add_column(column, justify="right" if column != "slice" else "left")
    rows = {"all": report.overall}
    rows |= {f"kind={k}": v for k, v in report.by_kind.items() if len(report.by_kind) > 1}
    rows |= {f"lang={k}": v for k, v in report.by_lang.items() if len(report.by_lang) > 1}
    for name, summary in rows.items():
        table.add_row(name, str(summary["n"]), *(_fmt(summary[k]) for k in _SUMMARY_KEYS))
    console.print(table)
    if report.rejections:
        console.print(
            "guard refusals: " + ", ".join(f"{k} {v}" for k, v in report.rejections.items())
        )


_SUMMARY_KEYS = ("precision", "recall", "false_hit_rate")


def _read_pairs(path: Path, limit: int | None) -> list[Any]:
    from .evaluate import read_pairs

    if limit is not None and limit < 1:
        _fail(f"must be >= 1, got {limit}", "--limit")
    return read_pairs(path, limit=limit)


def _fmt(value: object) -> str:
    return "–" if value is None else f"{float(value):.3f}"  # type: ignore[arg-type]


@app.command()
def calibrate(
    pairs_file: PairsFile,
    target_precision: Annotated[float, typer.Option(min=0.5, max=1.0)] = 0.99,
    embedder: EmbedderName = None,
    no_guards: Annotated[bool, typer.Option("--no-guards")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of the curves here.")] = None,
    limit: Annotated[int | None, typer.Option()] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Precision, recall and hit rate per threshold; the lowest threshold that meets the target
    (with a warning when the pairs are too few to trust it: under 50, or under 10 of a label)."""
    from ..semantic.embed import get_embedder
    from .evaluate import calibrate as run_calibration

    if plot is not None:
        _check_writable(plot, "--plot")
    pairs = _read_pairs(pairs_file, limit)
    _check_embedder(embedder)
    model = get_embedder(embedder)
    result = run_calibration(
        pairs, model, target_precision=target_precision, **({"guards": ()} if no_guards else {})
    )
    title = f"{pairs_file.name} — {model.name}"
    if as_json:
        if plot is not None:
            _plot_calibration(result, plot, title)
        if result.warning:
            typer.echo(f"tricache: warning: {result.warning}", err=True)
        print(json.dumps({"pairs": len(pairs), "embedder": model.name, "guards": not no_guards}
                         | result.as_json()))  # fmt: skip
        return
    table = Table(
        title=f"calibrate: {pairs_file.name}, {model.name}, guards {'off' if no_guards else 'on'}"
    )
    for column in ("threshold", "precision", "recall", "hit rate"):
        table.add_column(column, justify="right")
    shown_from = min(0.7, result.chosen) if result.chosen is not None else 0.7
    for row in result.rows:  # the chosen threshold is always in the table
        if row["threshold"] >= shown_from:
            table.add_row(
                *(f"{row[k]:.3f}" for k in ("threshold", "precision", "recall", "hit_rate"))
            )
    console.print(table)
    if result.chosen is None:
        console.print(f"[bold red]no threshold reaches precision {target_precision}[/]")
    else:
        console.print(
            f"chosen threshold: [bold]{result.chosen:.2f}[/] (precision ≥ {target_precision})"
        )
    if result.warning:
        console.print(f"[bold yellow]warning: not reliable[/]: {result.warning}")
    if plot is not None:
        _plot_calibration(result, plot, title)
        console.print(f"plot written to {plot}")


def _plot_calibration(result: Any, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from .evaluate import plot_calibration

    plot_calibration(result, title).savefig(path, dpi=110)


@app.command()
def audit(
    last: Annotated[int, typer.Option(help="How many records.")] = 20,
    feedback: Annotated[bool, typer.Option(help="Show feedback instead of decisions.")] = False,
    path: Annotated[Path | None, typer.Option(help="audit.sqlite3 (default: data dir)")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write a PNG of the threshold in force over time here.")
    ] = None,
) -> None:
    """Show the latest semantic decisions (or feedback) from the audit log: each hit says what
    served it (``served_by``: form, threshold, or learned) and the threshold in force."""
    log_path = path or _home() / "audit.sqlite3"
    if not log_path.exists():
        _fail("no audit log here", log_path)
    if plot is not None:
        _check_writable(plot, "--plot")
    try:
        rows = _audit_rows(log_path, last, "feedback" if feedback else "decisions")
    except sqlite3.Error as exc:
        raise CliError(f"not a readable audit log: {exc}", log_path) from None
    for row in rows:
        print(_json(row), flush=True)
    if plot is not None:
        _plot_thresholds([r for r in reversed(rows) if r.get("threshold") is not None], plot)
        console.print(f"plot written to {plot}")


def _audit_rows(path: Path, limit: int, table: str) -> list[dict[str, Any]]:
    """The newest rows of the audit log (``AuditLog.recent``), read through a read-only
    connection: a read neither migrates nor chmods the file."""
    from contextlib import closing

    from ..semantic.audit import _decoded
    from ..stores.sqlite import open_read_only

    with closing(open_read_only(path)) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(f"SELECT rowid, * FROM {table} ORDER BY ts DESC LIMIT ?", (limit,))
        return [_decoded(dict(row)) for row in rows]


def _plot_thresholds(rows: list[dict[str, Any]], path: Path) -> None:
    """The threshold each decision ran under (learned ones below the calibrated one)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.5))
    ax = figure.subplots()
    ax.plot(range(len(rows)), [r["threshold"] for r in rows], drawstyle="steps-post")
    learned = [i for i, r in enumerate(rows) if r.get("served_by") == "learned"]
    ax.scatter(learned, [rows[i]["score"] for i in learned], s=8, color="tab:green",
               label="served by a learned threshold")  # fmt: skip
    ax.set_xlabel("decisions (oldest first)")
    ax.set_ylabel("threshold in force")
    ax.legend(loc="lower left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


faq_app = typer.Typer(help="The curated FAQ fallback.", no_args_is_help=True)
app.add_typer(faq_app, name="faq")


@faq_app.command("import")
def faq_import(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="CSV or JSONL.")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Import question/answer pairs: CSV with a header row (question,answer[,paraphrases,tags,
    lang]; paraphrases separated by '|') or JSONL (one object a line).  An entry replaces the
    one with its question; a question twice in FILE is refused.  Cached LLM answers are kept
    (`tricache bump-kb` retires them)."""
    from ..faq.store import read_faq_file

    entries, ignored = read_faq_file(file)
    if not entries:
        _fail("no entries to import; nothing changed", file)
    with _open(redis_url, path, namespace, exact=Exact(bloom=False), semantic=False) as cache:
        store = cache.tiers.open_faq(create=True)
        assert store is not None  # (the CLI's caches have the FAQ on)
        done = store.put(entries)
        console.print(
            f"imported {_plural(len(entries), 'entry', 'entries')}: {done.added} added,"
            f" {done.replaced} replaced (the same question), {done.unchanged} unchanged; cached"
            " LLM answers kept (tricache bump-kb)",
            markup=False,
        )
        if ignored:
            console.print(f"ignored columns: {visible(', '.join(ignored))} (the FAQ keeps"
                          " question, answer, paraphrases, tags, lang)", markup=False)  # fmt: skip


@faq_app.command("list")
def faq_list(
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line.")] = False,
) -> None:
    """List the FAQ's entries with their ids."""
    entries = _faq_entries(redis_url, path, namespace)
    if as_json:
        for faq_id, e in entries:
            print(_json({"id": faq_id, "question": e.question, "answer": e.answer,
                         "paraphrases": list(e.paraphrases), "tags": list(e.tags)}))  # fmt: skip
        return
    table = Table(title=f"FAQ: {_plural(len(entries), 'entry', 'entries')}")
    for column in ("id", "question", "paraphrases", "answer"):
        table.add_column(column)
    for faq_id, e in entries:
        table.add_row(str(faq_id), _cell(e.question), str(len(e.paraphrases)), _cell(e.answer, 80))
    console.print(table)


@faq_app.command("delete")
def faq_delete(
    ids: Annotated[list[int], typer.Argument(help="Entry ids (tricache faq list).")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Delete FAQ entries by id."""
    with _open(redis_url, path, namespace, exact=Exact(bloom=False), semantic=False) as cache:
        count = cache.delete_faq(ids)
    console.print(f"deleted {count} of {_plural(len(ids), 'entry', 'entries')}")
    if count < len(ids):
        raise typer.Exit(1)


@faq_app.command("export")
def faq_export(
    file: Annotated[Path, typer.Argument(dir_okay=False, help="CSV, or .jsonl for JSONL.")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Write the FAQ's entries to FILE, in the format `faq import` reads."""
    from ..faq.store import write_entries

    entries = _faq_entries(redis_url, path, namespace)
    count = write_entries((e for _, e in entries), file)
    console.print(f"exported {_plural(count, 'entry', 'entries')} to {visible(str(file))}",
                  markup=False)  # fmt: skip


@faq_app.command("search")
def faq_search(
    query: Annotated[str, typer.Argument(help="A user question.")],
    limit: int = 5,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Show the FAQ's best candidates for QUERY, and whether it would answer."""
    store = _reading_faq(redis_url, path, namespace, embedder=True)
    if store is None or not store.count():
        console.print("the FAQ is empty: tricache faq import FILE")
        raise typer.Exit(1)
    with contextlib.closing(store):
        answer = store.answer(query)
        table = Table(title=Text(f"FAQ candidates for {visible(repr(query))}"))
        for column in ("id", "score", "question", "matched form", "answer"):
            table.add_column(column)
        for match in store.search(query, limit):
            table.add_row(str(match.faq_id), f"{match.score:.3f}", _cell(match.question),
                          _cell(match.matched), _cell(match.answer, 80))  # fmt: skip
        console.print(table)
        verdict = f"answers with entry {answer.faq_id}" if answer else "no confident answer"
        console.print(f"threshold {store.threshold:.2f}: {verdict}")


@app.command()
def metrics(
    port: Annotated[int, typer.Option(help="Serve /metrics on this port.")] = 9464,
    once: Annotated[bool, typer.Option("--once", help="Print the exposition and exit.")] = False,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Prometheus metrics of the running app: every process's counters, added up in the
    shared store over the 8 days it keeps (an app can also serve its own process's with
    ``tricache.ops.prometheus.serve(cache, port)``)."""
    from ..ops.prometheus import exposition, serve

    with _maintenance(redis_url, path, namespace) as opened:
        cache = _SharedCounters(opened)
        if once:
            print(exposition(cache), end="")
            return
        try:
            serve(cache, port)
        except OSError as exc:
            raise CliError(f"cannot serve: {exc.strerror or exc}", f"--port {port}") from None
        console.print(f"serving http://0.0.0.0:{port}/metrics (Ctrl-C to stop)")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


@app.command()
def stats(
    window: Annotated[
        str, typer.Option(help="How far back: 30m, 1h, 1d (the store keeps 8 days).")
    ] = "1h",
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Refresh until Ctrl-C (a store that stops answering is reported, and watched on).",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between refreshes with --watch.", min=0.1)
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """What the running app did: every process's requests (each counted once, whichever
    layers it passed), hits and hit rate per tier, calls that reached the LLM, callers that
    waited for another's (coalesced), what the cache declined to store or serve, tokens and
    cost saved, answers reported wrong (from the shared store)."""
    seconds = _duration(window)
    with _reading(redis_url, path, namespace) as cache:
        while True:
            try:
                figures = _read_figures(cache, seconds)
            except _expected_errors() as exc:
                if not watch:
                    raise
                where = redis_url or path or data_dir() / "exact.sqlite3"
                message = " ".join(_one_line(exc).split())
                typer.echo(f"tricache: store unreachable ({where}): {message}; watching on",
                           err=True)  # fmt: skip
            else:
                if as_json:
                    print(json.dumps(figures), flush=True)
                else:
                    console.print(_stats_table(figures, window, namespace))
            if not watch:
                return
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return


def _read_figures(cache: Cache, seconds: float) -> dict[str, Any]:
    """Every process's figures; a store that does not answer raises (never a silent zero)."""
    ledger = cache.ledger
    if ledger is None:
        return cache.shared_stats(seconds)
    from ..ops.ledger import summary

    return {"window_s": seconds, "processes": "all", **summary(ledger.read(seconds))}


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise CliError("a duration: 30m, 1h, 2d or seconds", f"--window {text}") from None
    if not 0 < seconds < float("inf"):
        raise CliError("a duration after now: 30m, 1h, 2d or seconds", f"--window {text}")
    return seconds


def _stats_table(figures: dict[str, Any], window: str, namespace: str) -> Table:
    table = Table(
        title=f"namespace {escape(repr(namespace))}, last {escape(window)} "
        f"({figures['processes']} processes)"
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("requests (lookups)", str(figures["lookups"]))
    for tier, hits in figures["hits"].items():
        table.add_row(f"{tier} hits", f"{hits} ({figures['hit_rate'][tier]:.1%})")
    table.add_row("hit rate, all tiers", f"{figures['hit_rate_total']:.1%}")
    table.add_row("LLM calls (reached the model)", str(figures["llm_calls"]))
    table.add_row("coalesced waits (another caller's call)", str(figures["coalesced"]))
    table.add_row("LLM calls avoided", f"{figures['llm_calls_avoided']:.1%}")
    skipped = figures["skipped"]
    table.add_row("skipped: time-dependent", str(skipped["time_dependent"]))
    table.add_row("FAQ not asked (context)", str(skipped["faq_context"]))
    table.add_row("tokens saved", str(figures["tokens_saved"]))
    table.add_row("cost saved", f"${figures['cost_saved_usd']:.4f}")
    table.add_row("answers reported wrong", str(figures["feedback"]["wrong"]))
    table.add_row("store errors", str(figures["store_errors"]))
    return table


class _SharedCounters:
    """What the Prometheus collector reads (``stats()``), from every process's counters."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def stats(self) -> dict[str, Any]:
        from ..ops.prometheus import counter_names

        ledger = self.cache.ledger
        counts = ledger.read(STATS_KEPT_S) if ledger is not None else self.cache.metrics.counts()
        return dict(counter_names(counts))  # (a row written by hand cannot break the exposition)


@app.command()
def review(
    host: Annotated[
        str, typer.Option(help="Where the page listens (127.0.0.1: this machine).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Its port (1 to 65535).")] = 8765,
    audit: Annotated[
        Path | None,
        typer.Option(help="The audit log (default: the app's: beside --path, else the data dir)."),
    ] = None,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """A local web page over the audit log: every request (the tier that served it or the
    model, the matched question and answer, why each candidate was refused), filters, a
    histogram; mark an answer wrong, delete its entry, invalidate its tags.  It answers the
    Host names of loopback and --host only."""
    try:
        import uvicorn

        from .review import review_app
    except ImportError as exc:
        raise CliError("needs the review extra: pip install 'tricache[review]'", str(exc)) from None
    from ..semantic.audit import AuditLog
    from ..tiers import _vector_dir

    listening = _listening(host, port)  # before anything is opened or printed
    try:
        # where a cache on this store writes it: beside an explicit SQLite file, else the data
        # dir
        log_path = audit or (_vector_dir(path) or data_dir()) / "audit.sqlite3"
        if not log_path.exists():
            _fail("no audit log here (a cache with Semantic(audit=True) writes one)", log_path)

        def open_cache(other: str) -> Cache:  # for the requests of another namespace
            return _open(redis_url, path, other, faq=False)

        with _open(redis_url, path, namespace, faq=False) as cache:
            page = review_app(cache, AuditLog(log_path), open_cache=open_cache, hosts=[host])
            shown = f"[{host}]" if ":" in host else host
            console.print(f"review page at http://{shown}:{port}/ (Ctrl-C to stop)")
            server = uvicorn.Server(uvicorn.Config(page, log_level="warning"))
            server.run(sockets=[listening])
    finally:
        listening.close()


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound to ``host`` and ``port`` (uvicorn listens on it), or one line saying
    why there can be none."""
    where = f"--host {host} --port {port}"
    if not 1 <= port <= 65535:
        raise CliError("a port is a number from 1 to 65535", f"--port {port}")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (OSError, UnicodeError) as exc:
        raise CliError(f"not an address to listen on: {exc}", f"--host {host}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as uvicorn does)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or exc
        raise CliError(f"cannot listen there: {why}", where) from None
    return sock


@app.command("kv-budget")
def kv_budget_command(
    config: Annotated[Path, typer.Argument(help="A Hugging Face config.json, or its folder.")],
    tokens: Annotated[int, typer.Option(help="Tokens per request (prompt + output).")] = 4096,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = 1,
    block_size: Annotated[int, typer.Option(help="Paged KV block size (vLLM: 16 GPU).")] = 16,
    dtype: Annotated[str, typer.Option(help="KV dtype: auto (the config's), fp16, fp8 …")] = "auto",
    prompt_lengths: Annotated[
        Path | None, typer.Option(help="A file of prompt lengths in tokens, one per line.")
    ] = None,
    output_tokens: Annotated[int, typer.Option(help="Output budget for max_model_len.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """KV-cache memory of a model: per token, per request and for a concurrency level."""
    from ..kv import kv_budget, suggest_max_model_len

    config_file = config / "config.json" if config.is_dir() else config
    try:
        loaded = json.loads(_read_text(config_file))
    except json.JSONDecodeError as exc:
        raise CliError(f"not JSON ({exc.msg}, line {exc.lineno})", config_file) from None
    if not isinstance(loaded, dict):
        _fail("not a JSON object", config_file)
    lengths = _read_lengths(prompt_lengths) if prompt_lengths is not None else None
    try:
        budget = kv_budget(loaded, tokens, concurrency=concurrency, block_size=block_size,
                           dtype=dtype)  # fmt: skip
        report: dict[str, Any] = budget.as_dict()
        if lengths is not None:
            report["suggested_max_model_len"] = suggest_max_model_len(
                lengths, output_tokens=output_tokens, block_size=block_size
            )
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(report))
        return
    table = Table("", "value")
    for name, value in report.items():
        shown = f"{value:,}" + (f"  ({value / 2**30:.2f} GiB)" if name.endswith("bytes") else "")
        table.add_row(name.replace("_", " "), shown)
    console.print(table)


def _read_text(path: Path) -> str:
    """A UTF-8 file's text; an unreadable or undecodable file is an error naming it."""
    from ..faq.store import read_text

    try:
        return read_text(path)
    except OSError as exc:
        raise CliError(f"cannot read: {exc.strerror or exc}", path) from None


def _read_lengths(path: Path) -> list[int]:
    """Prompt lengths in tokens, whole numbers separated by white space (one a line)."""
    lengths = []
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        for word in line.split():
            try:
                lengths.append(int(word))
            except ValueError:
                _fail(f"line {n}: not a whole number of tokens: {word[:40]!r}", path)
    return lengths


@app.command()
def info() -> None:
    """Show where embedded stores keep their files."""
    console.print(f"data directory: {data_dir()}  (set TRICACHE_HOME to move it)")


@app.command()
def invalidate(
    tag: Annotated[str, typer.Argument(help="Tag whose entries become unreachable.")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Invalidate every entry written under TAG, in every process."""
    with _maintenance(redis_url, path, namespace) as cache:
        console.print(f"tag {tag!r} is now at version {cache.invalidate(tag)}")


@app.command("bump-kb")
def bump_kb(
    redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default"
) -> None:
    """New knowledge-base version: every existing entry of the namespace becomes stale."""
    with _maintenance(redis_url, path, namespace) as cache:
        console.print(f"knowledge-base version is now {cache.bump_kb_version()}")


@app.command()
def evict(redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default") -> None:
    """Delete stale and corrupt entries from the shared store (active eviction); semantic
    points expire with their entries in the store and in every process's replica."""
    with _maintenance(redis_url, path, namespace) as cache:
        counts = cache.evict()
    console.print(json.dumps(counts))


@app.command()
def clear(redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default") -> None:
    """Delete every entry of the namespace, and its semantic points in every process."""
    with _maintenance(redis_url, path, namespace) as cache:
        cache.clear()
    console.print(f"namespace {namespace!r} cleared")


entries_app = typer.Typer(help="What the cache holds: list, show, delete.", no_args_is_help=True)
app.add_typer(entries_app, name="entries")


@entries_app.command("list")
def entries_list(
    tag: Annotated[str | None, typer.Option(help="Only entries written under this tag.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Only questions starting so.")] = None,
    category: Annotated[str | None, typer.Option(help="Only this category.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line.")] = False,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """List the entries of the namespace: id, question, answer, tags."""
    with _reading(redis_url, path, namespace) as cache:
        found = cache.entries(tag=tag, prefix=prefix, category=category, limit=limit)
    if as_json:
        for e in found:
            print(_json(_entry_json(e)))
        return
    title = _plural(len(found), "entry", "entries") + (f" (at most {limit})" if limit else "")
    table = Table(title=title)
    for column in ("id", "question", "answer", "tags", "computed"):
        table.add_column(column)
    for e in found:
        table.add_row(_digest(e.id)[:12], _cell(e.question, 60), _cell(e.answer, 60),
                      _cell(", ".join(e.tags)), _when(e.computed_at))  # fmt: skip
    console.print(table)


@entries_app.command("show")
def entries_show(
    entry_id: Annotated[str, typer.Argument(help="An id (entries list --json) or its start.")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Show one entry in full."""
    with _reading(redis_url, path, namespace) as cache:
        [(_, full, why)] = resolve_ids([entry_id], _entry_keys(cache))
        if full is None:
            _fail(f"no entry shown: {why}", entry_id)
        entry = cache.entry(full)
    if entry is None:
        _fail("no such entry (expired, deleted or stale)", entry_id)
    print(_json(_entry_json(entry), indent=1))


@entries_app.command("delete")
def entries_delete(
    entry_ids: Annotated[list[str], typer.Argument(help="Ids (entries list --json).")],
    redis_url: RedisUrl = None,
    path: Path_ = None,
    namespace: Namespace = "default",
) -> None:
    """Delete entries, in every process (a question indexed for one is not served again).
    Each id is the full one or at least 8 characters of its start, as ``entries list`` shows
    it, and starts exactly one entry's id; each id's outcome is printed, and the exit status
    is 1 when any was not deleted (after trying them all)."""
    deleted = 0
    with _maintenance(redis_url, path, namespace) as cache:
        for given, full, why in resolve_ids(entry_ids, _entry_keys(cache)):
            if full is not None:
                try:
                    cache.delete(full)
                except _expected_errors() as exc:
                    why = " ".join(_one_line(exc).split())
                else:
                    deleted += 1
            outcome = "deleted" if not why else f"not deleted: {why}"
            console.print(f"{visible(given)}: {outcome}", markup=False, highlight=False)
    failed = len(entry_ids) - deleted
    console.print(f"deleted {_plural(deleted, 'entry', 'entries')}"
                  + (f", {failed} not deleted" if failed else ""), markup=False)  # fmt: skip
    if failed:
        raise typer.Exit(1)


MIN_ID_PREFIX = 8  # characters of an id's digest that name it (entries show, entries delete)


def resolve_ids(given: Sequence[str], ids: Sequence[str]) -> list[tuple[str, str | None, str]]:
    """``(given, full id or None, why not)`` for each given id: a full id (or a hit's
    ``entry_id``, ``s:`` and all), or at least ``MIN_ID_PREFIX`` characters of the start of an
    id's digest (as ``entries list`` shows it) that start exactly one of ``ids``."""
    out: list[tuple[str, str | None, str]] = []
    known = set(ids)
    for text in given:
        if ":" in text:
            full = text[2:] if text.startswith("s:") else text
            out.append((text, full, "") if full in known else (text, None, "not found"))
            continue
        if len(text) < MIN_ID_PREFIX:
            out.append((text, None, f"too short (at least {MIN_ID_PREFIX} characters of the id,"
                                    " or all of it)"))  # fmt: skip
            continue
        matches = [i for i in ids if _digest(i).startswith(text.lower())]
        if len(matches) == 1:
            out.append((text, matches[0], ""))
        else:
            why = "not found" if not matches else f"ambiguous: {len(matches)} entries"
            out.append((text, None, why))
    return out


def _entry_keys(cache: Cache) -> list[str]:
    """Every entry id of the namespace in the store (stale ones too), keys only."""
    store = cache.exact.store
    if store is None:
        return [e.id for e in cache.entries()]
    return list(store.keys(cache.namespace))


def _digest(entry_id: str) -> str:
    return entry_id.rsplit(":", 1)[-1]


def _entry_json(e: Any) -> dict[str, Any]:
    return {"id": e.id, "question": e.question, "answer": e.answer, "category": e.category,
            "tags": list(e.tags), "computed_at": e.computed_at, "shared": e.shared,
            "tokens": e.tokens, "model": e.model}  # fmt: skip


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds)) if seconds else ""


if __name__ == "__main__":  # pragma: no cover
    app()
