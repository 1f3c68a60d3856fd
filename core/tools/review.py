"""``tricache review``: a local web page over the audit log, for a person to check decisions.

Recent semantic decisions with both questions in full, the score, what served or refused them
(each rule by its id), filters (outcome, score band, namespace), a histogram of the best
scores with the threshold in force, and two buttons a decision: *same answer* / *not the
same*.  A verdict becomes a label for the learned decision (the store's label log, read by
every process), and *not the same* on a served hit is ``feedback(correct=False)``: the
matched question leaves every index.  A verdict acts in its decision's own namespace (the
candidate it names is of the decision's tenant), and is recorded only once it is done.

Server-rendered (Starlette and Jinja2, no JavaScript), bound to 127.0.0.1 by default; each
form carries a token of this server's, so another site cannot post verdicts through the
browser.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..cache import Cache
from ..exact.link import StoreUnavailable
from ..semantic.audit import AuditLog
from ..semantic.learning import Label
from ..semantic.points import answer_digest
from ..stores.base import LabelLog

__all__ = ["judge", "review_app"]

_BANDS = [round(0.70 + i * 0.02, 2) for i in range(16)]  # histogram bins: 0.70 … 1.00


def review_app(
    cache: Cache,
    audit: AuditLog,
    *,
    limit: int = 200,
    open_cache: Callable[[str], Cache] | None = None,
) -> Starlette:
    """The review page over ``audit`` (its decisions), acting on ``cache`` for decisions of
    its namespace, and on ``open_cache(namespace)`` (opened once, closed with the app) for
    the others; without it, the others are shown with no buttons."""
    token = secrets.token_urlsafe(16)
    pages = Environment(autoescape=select_autoescape(default=True)).from_string(_PAGE)
    caches = _Caches(cache, open_cache)

    async def page(request: Request) -> Response:
        show = {k: request.query_params.get(k, "") for k in ("outcome", "low", "high", "ns")}
        rows = [_view(r, caches.acts_in(r.get("namespace"))) for r in audit.recent(limit)]
        shown = [r for r in rows if _kept(r, show)]
        html = pages.render(
            rows=shown, total=len(rows), show=show, token=token, query=urlencode(show),
            histogram=_histogram(rows), threshold=next((r["threshold"] for r in rows
                                                       if r["threshold"]), None),
        )  # fmt: skip
        return HTMLResponse(html)

    async def verdict(request: Request) -> Response:
        form = await request.form()
        if not secrets.compare_digest(str(form.get("token", "")), token):
            return PlainTextResponse("stale or foreign form", status_code=403)
        rowid = int(request.path_params["rowid"])
        said = str(form.get("verdict", ""))
        if said not in ("same", "different"):
            return PlainTextResponse("verdict: same or different", status_code=400)
        try:
            await run_in_threadpool(_judged, caches, audit, rowid, said)
        except KeyError:
            return PlainTextResponse("no such decision", status_code=404)
        except StoreUnavailable as exc:  # nothing was recorded
            return PlainTextResponse(f"not done, not recorded: {exc}", status_code=503)
        except ValueError as exc:  # (a decision of another namespace)
            return PlainTextResponse(f"not done, not recorded: {exc}", status_code=409)
        return RedirectResponse(f"/?{form.get('query', '')}#d{rowid}", status_code=303)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(caches.close)

    return Starlette(
        routes=[Route("/", page), Route("/judge/{rowid:int}", verdict, methods=["POST"])],
        lifespan=lifespan,
    )


class _Caches:
    """The cache each decision's verdict acts through: the page's own for its namespace,
    one opened (once) by ``open_cache`` for another."""

    def __init__(self, cache: Cache, open_cache: Callable[[str], Cache] | None) -> None:
        self._own = cache
        self._open = open_cache
        self._opened: dict[str, Cache] = {}
        self._lock = threading.Lock()

    def acts_in(self, namespace: object) -> bool:
        """Whether a verdict on a decision of ``namespace`` can be acted on here."""
        return namespace == self._own.namespace or (self._open is not None and bool(namespace))

    def __call__(self, namespace: object) -> Cache:
        if namespace == self._own.namespace:
            return self._own
        if self._open is None or not isinstance(namespace, str) or not namespace:
            raise ValueError(
                f"a decision of namespace {namespace!r}: this page acts in namespace "
                f"{self._own.namespace!r} (tricache review --namespace {namespace})"
            )
        with self._lock:
            if namespace not in self._opened:
                self._opened[namespace] = self._open(namespace)
            return self._opened[namespace]

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened.values()), {}
        for cache in opened:
            cache.close()


def _judged(caches: _Caches, audit: AuditLog, rowid: int, verdict: str) -> None:
    """``judge`` through the cache of the decision's namespace."""
    decision = audit.decision(rowid)
    if decision is None:
        raise KeyError(rowid)
    judge(caches(decision.get("namespace")), audit, rowid, verdict)


def judge(cache: Cache, audit: AuditLog, rowid: int, verdict: str) -> None:
    """A person's verdict on decision ``rowid`` (of ``cache``'s namespace): for a served hit
    judged "different", ``feedback(correct=False)``; a label of its candidate (the one served,
    or the best one refused) in the store's label log; then the verdict, recorded on the
    decision.  Works in a process that has looked nothing up.  ``StoreUnavailable`` (or a
    ``ValueError`` for a decision of another namespace) when it cannot be done, and then no
    verdict is recorded."""
    if verdict not in ("same", "different"):
        raise ValueError("verdict must be 'same' or 'different'")
    decision = audit.decision(rowid)
    if decision is None:
        raise KeyError(rowid)
    if decision.get("namespace") != cache.namespace:
        raise ValueError(
            f"a decision of namespace {decision.get('namespace')!r}, not {cache.namespace!r}"
        )
    candidates = decision.get("candidates") or []
    chosen = next((c for c in candidates if c.get("id") == decision.get("hit")), None)
    chosen = chosen or (candidates[0] if candidates else None)
    if chosen is not None:
        _act(cache, decision, chosen, same=verdict == "same")
    audit.judge(rowid, verdict)


def _act(cache: Cache, decision: dict[str, Any], chosen: dict[str, Any], *, same: bool) -> None:
    """What a verdict on ``chosen`` (a candidate of ``decision``) does in the cache."""
    ref = str(chosen.get("ref") or "")
    entry = cache.exact.read(ref) if ref else None  # (the versions read first)
    if decision.get("hit") and not same and ref:
        cache.feedback(f"s:{ref}", correct=False)  # (an entry of another namespace: refused)
    if entry is not None and decision.get("pool"):
        label = Label(str(decision["pool"]), str(chosen["id"]), float(entry.watermark),
                      float(chosen.get("score", 0.0)), same, 1.0, answer_digest(entry.text),
                      str(chosen.get("cls", "alone")))  # fmt: skip
        tier = cache.tiers.semantic
        if tier is not None and tier.learning is not None:
            tier.learning.add([label])
        elif isinstance(cache.store, LabelLog):  # learning off here: kept for who learns
            cache.store.add_labels(cache.namespace, [label.encode()])


def _view(row: dict[str, Any], acts: bool = True) -> dict[str, Any]:
    """What the page shows of an audit row (``acts``: whether its verdict can be acted on)."""
    found, refusals = row.get("candidates"), row.get("rejected")
    candidates: list[dict[str, Any]] = found if isinstance(found, list) else []
    rejected: dict[str, str] = refusals if isinstance(refusals, dict) else {}
    best = max((float(c.get("score", 0)) for c in candidates), default=None)
    if row.get("hit"):
        outcome = "served"
    elif row.get("skipped"):
        outcome = "skipped"
    elif rejected:
        outcome = "refused"  # a candidate at the threshold or above, refused
    else:
        outcome = "below" if candidates else "miss"  # none that near, or none at all
    threshold = row.get("threshold") or 0.0
    for c in candidates:
        why = rejected.get(str(c.get("id")), "")
        if c.get("id") == row.get("hit"):
            why = "served"
        elif not why and float(c.get("score", 0)) < threshold:
            why = "under the threshold"
        c["why"] = why
    return {**row, "candidates": candidates, "best": best, "outcome": outcome, "acts": acts}


def _kept(row: dict[str, Any], show: dict[str, str]) -> bool:
    if show["outcome"] and row["outcome"] != show["outcome"]:
        return False
    if show["ns"] and row.get("namespace") != show["ns"]:
        return False
    best = row["best"]
    try:
        if show["low"] and (best is None or best < float(show["low"])):
            return False
        if show["high"] and (best is None or best > float(show["high"])):
            return False
    except ValueError:
        return True
    return True


def _histogram(rows: list[dict[str, Any]]) -> list[tuple[float, int, int]]:
    """(band start, decisions served, decisions refused) of the best scores, 0.70 up."""
    bins = {band: [0, 0] for band in _BANDS}
    for row in rows:
        if row["best"] is None or row["best"] < _BANDS[0]:
            continue
        band = max(b for b in _BANDS if b <= row["best"] + 1e-9)
        bins[band][0 if row["outcome"] == "served" else 1] += 1
    return [(band, served, refused) for band, (served, refused) in bins.items()]


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TriCache review</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }
table { border-collapse: collapse; width: 100% } td, th { border-bottom: 1px solid #ddd;
padding: 6px; vertical-align: top; text-align: left } .served { color: #0a6 }
.refused { color: #b40 } .skipped, .miss, .below { color: #888 } .rules { font-family: monospace }
form.inline { display: inline } .bar { fill: #7ab } .bar.refused { fill: #d96 }
.verdict { font-weight: bold } .small { color: #666; font-size: 12px }
</style></head><body>
<h1>TriCache review</h1>
<p class="small">{{ rows|length }} of the last {{ total }} semantic decisions ·
threshold in force: {{ '%.3f'|format(threshold) if threshold else '—' }}</p>
<form method="get" action="/">
 outcome <select name="outcome">{% for o in ['', 'served', 'refused', 'below', 'miss', 'skipped'] %}
 <option value="{{ o }}" {{ 'selected' if show.outcome == o }}>{{ o or 'all' }}</option>{% endfor %}
 </select>
 best score from <input name="low" size="4" value="{{ show.low }}"> to
 <input name="high" size="4" value="{{ show.high }}">
 namespace <input name="ns" size="10" value="{{ show.ns }}">
 <button type="submit">filter</button>
</form>
<svg width="640" height="130" role="img" aria-label="best scores">
{% for band, served, refused in histogram %}{% set x = loop.index0 * 40 %}
 <rect class="bar" x="{{ x }}" y="{{ 100 - served * 4 if served < 25 else 0 }}" width="18"
  height="{{ served * 4 if served < 25 else 100 }}"><title>{{ served }} served</title></rect>
 <rect class="bar refused" x="{{ x + 19 }}" y="{{ 100 - refused * 4 if refused < 25 else 0 }}"
  width="18" height="{{ refused * 4 if refused < 25 else 100 }}">
  <title>{{ refused }} refused</title></rect>
 <text x="{{ x }}" y="120" font-size="10">{{ '%.2f'|format(band) }}</text>{% endfor %}
{% if threshold and threshold >= 0.7 %}{% set tx = (threshold - 0.70) / 0.02 * 40 %}
 <line x1="{{ tx }}" x2="{{ tx }}" y1="0" y2="105" stroke="#c00" stroke-dasharray="4"/>
{% endif %}</svg>
<table><tr><th>asked</th><th>candidates (score, rules)</th><th>outcome</th><th>verdict</th></tr>
{% for r in rows %}<tr id="d{{ r.rowid }}">
 <td class="question">{{ r.question or '(not kept: audit_questions=False)' }}
  <div class="small">{{ r.namespace }}</div></td>
 <td>{% for c in r.candidates %}<div>{{ '%.3f'|format(c.score) }} · {{ c.question }}
  <span class="rules">{{ c.why }}{% if c.rules %} [{{ c.rules|join(', ') }}]{% endif %}</span></div>
 {% else %}<span class="small">none</span>{% endfor %}</td>
 <td class="{{ r.outcome }}">{{ r.outcome }}{% if r.served_by %} ({{ r.served_by }}){% endif %}
  {% if r.skipped %}({{ r.skipped }}){% endif %}</td>
 <td>{% if r.verdict %}<span class="verdict">{{ r.verdict }}</span>
  {% elif r.candidates and not r.acts %}
  <span class="small">another namespace: tricache review --namespace {{ r.namespace }}</span>
  {% elif r.candidates %}
  {% for v, text in [('same', 'same answer'), ('different', 'not the same')] %}
  <form class="inline" method="post" action="/judge/{{ r.rowid }}">
   <input type="hidden" name="token" value="{{ token }}">
   <input type="hidden" name="query" value="{{ query }}">
   <button name="verdict" value="{{ v }}" class="{{ v }}">{{ text }}</button></form>
  {% endfor %}{% endif %}</td></tr>
{% endfor %}</table></body></html>
"""
