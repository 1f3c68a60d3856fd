"""The ``tricache`` command."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .home import data_dir
from .stack import Cache

app = typer.Typer(help="TriCache: a three-tier cache for LLM calls.", no_args_is_help=True)
console = Console()

RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", help="Shared L2 on Redis instead of SQLite.")
]
Path_ = Annotated[
    Path | None, typer.Option("--path", help="SQLite file (default: under TRICACHE_HOME).")
]
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Cache namespace.")]


def _open(redis_url: str | None, path: Path | None, namespace: str, **kw: Any) -> Cache:
    return Cache(redis_url=redis_url, path=path, namespace=namespace, **kw)


@app.command()
def demo(
    requests: Annotated[int, typer.Option("--requests", "-r", min=10)] = 300,
    llm_latency: Annotated[float, typer.Option(help="Stand-in LLM latency, seconds.")] = 0.05,
    redis_url: RedisUrl = None,
    path: Path_ = None,
    seed: int = 7,
) -> None:
    """Run a mixed workload through the cache and a stand-in LLM; print what it saved."""
    from .demo import run_demo

    with tempfile.TemporaryDirectory(prefix="tricache-demo-") as tmp:
        store_path = path or Path(tmp) / "demo.sqlite3"
        namespace = f"demo-{seed}"
        workers = [_open(redis_url, store_path, namespace) for _ in range(2)]
        workers[0].clear()  # a fresh start, so the numbers mean the same every run
        console.print(
            f"L2: [bold]{workers[0].exact.store_name}[/]; {requests} requests, half through "
            "a second worker that starts with an empty L1 (shared L2)."
        )
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("requests", total=requests)
            report = run_demo(
                workers,
                requests,
                llm_latency=llm_latency,
                seed=seed,
                on_step=lambda: progress.advance(task),
            )
        stats = workers[0].stats()["exact"]
        if redis_url:
            workers[0].clear()  # leave no demo entries in a shared Redis
        for worker in workers:
            worker.close()

    table = Table(title="tricache demo: exact tier")
    table.add_column("request kind")
    table.add_column("requests", justify="right")
    table.add_column("cache hits", justify="right")
    for kind, (count, hits) in sorted(report.by_kind.items()):
        table.add_row(kind, str(count), str(hits))
    console.print(table)
    saved = report.requests - report.llm_calls
    lookup = sorted(report.lookup_ms)
    console.print(
        f"LLM calls: {report.llm_calls} of {report.requests} "
        f"([bold green]{saved / report.requests:.0%} saved[/]); "
        f"hits: L1 {report.hits.get('l1', 0)}, L2 {report.hits.get('l2', 0)}; "
        f"[bold]wrong answers served: {report.wrong_hits}[/]\n"
        f"lookup latency: median {statistics.median(lookup) * 1e3:.0f} µs, "
        f"p95 {lookup[int(len(lookup) * 0.95)] * 1e3:.0f} µs; "
        f"wall time {report.wall_s:.2f} s vs {report.no_cache_s:.2f} s without the cache\n"
        f"bloom filter: {stats.get('bloom_skips', 0)} L2 round trips saved"
    )


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
    with _open(redis_url, path, namespace, bloom=False) as cache:
        console.print(f"tag {tag!r} is now at version {cache.invalidate(tag)}")


@app.command("bump-kb")
def bump_kb(
    redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default"
) -> None:
    """New knowledge-base version: every existing entry of the namespace becomes stale."""
    with _open(redis_url, path, namespace, bloom=False) as cache:
        console.print(f"knowledge-base version is now {cache.bump_kb_version()}")


@app.command()
def evict(redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default") -> None:
    """Delete stale and corrupt entries from the shared store (active eviction)."""
    with _open(redis_url, path, namespace, bloom=False) as cache:
        console.print(json.dumps(cache.evict()))


@app.command()
def clear(redis_url: RedisUrl = None, path: Path_ = None, namespace: Namespace = "default") -> None:
    """Delete every entry of the namespace."""
    with _open(redis_url, path, namespace, bloom=False) as cache:
        cache.clear()
        console.print(f"namespace {namespace!r} cleared")


if __name__ == "__main__":  # pragma: no cover
    app()
