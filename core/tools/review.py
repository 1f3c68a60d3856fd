"""``tricache review``: a local web page over the audit log, for a person to check and steer
the cache.

Every request (newest first, paged by row id, filtered by namespace, tier, outcome, verdict
and time): when, the question, which tier served it (or that the model answered), the
matched question and answer, the score, and each semantic candidate with why it was refused
(each rule by its id); a histogram of the best scores with the threshold in force.  Buttons:
*same answer* / *not the same* (a label for the learned decision; on a served answer,
``feedback(correct=False)``: a semantic match leaves every index, an exact entry is
deleted, a FAQ answer is no longer served to that question), *delete the entry*,
*invalidate its tags*.  An action acts in its request's own namespace, and is recorded only
once it is done.

Server-rendered (Starlette and Jinja2, no JavaScript), bound to 127.0.0.1 by default.  No
other site reads or drives it: only the Host names it is served on are answered (a DNS
rebinding name gets 400), it may not be framed (``X-Frame-Options: DENY``, CSP
``frame-ancestors 'none'``), its CSP allows its own style and nothing else (no script,
no other origin), and a change is a POST carrying a token of this server's.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..cache import Cache
from ..exact.link import StoreUnavailable
from ..semantic.audit import AuditLog
from ..semantic.learning import Label
from ..semantic.points import answer_digest
from ..stores.base import LabelLog

__all__ = ["LOOPBACK_NAMES", "judge", "review_app"]

_BANDS = [round(0.70 + i * 0.02, 2) for i in range(16)]  # histogram bins: 0.70 … 1.00
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # the Host names always answered
_ACTIONS = ("same", "different", "delete", "invalidate")
_FILTERS = ("ns", "tier", "outcome", "verdict", "since", "until", "low", "high")
_FAQ_ID = re.compile(r"faq:([0-9]{1,18}):[0-9a-f]{32}")


def review_app(
    cache: Cache,
    audit: AuditLog,
    *,
    limit: int = 100,
    open_cache: Callable[[str], Cache] | None = None,
    hosts: Iterable[str] = (),
) -> Starlette:
    """The review page over ``audit`` (its requests, ``limit`` a page), acting on ``cache``
    for requests of its namespace, and on ``open_cache(namespace)`` (opened once, closed with
    the app) for the others; without it, the others are shown with no buttons.  It answers
    the Host names of loopback and ``hosts`` (where it is served: ``--host``) only."""
    token = secrets.token_urlsafe(16)
    pages = Environment(autoescape=select_autoescape(default=True)).from_string(_PAGE)
    caches = _Caches(cache, open_cache)

    async def page(request: Request) -> Response:
        show = {k: request.query_params.get(k, "").strip() for k in _FILTERS}
        html = await run_in_threadpool(_render, pages, caches, audit, show, request, token,
                                       limit)  # fmt: skip
        return HTMLResponse(html)

    def _ours(form: Any) -> bool:
        """Whether a POSTed form carries this server's token (a page it served)."""
        return secrets.compare_digest(str(form.get("token", "")), token)

    async def verdict(request: Request) -> Response:
        """A verdict on a semantic decision by its row id (the API before request rows)."""
        form = await request.form()
        if not _ours(form):
            return PlainTextResponse("stale or foreign form", status_code=403)
        rowid = int(request.path_params["rowid"])
        said = str(form.get("verdict", ""))
        if said not in ("same", "different"):
            return PlainTextResponse("verdict: same or different", status_code=400)
        return await _done(_judged, caches, audit, rowid, said, back=form.get("query", ""))

    async def act(request: Request) -> Response:
        form = await request.form()
        if not _ours(form):
            return PlainTextResponse("stale or foreign form", status_code=403)
        rowid = int(request.path_params["rowid"])
        action = str(form.get("action", ""))
        if action not in _ACTIONS:
            return PlainTextResponse(f"action: one of {', '.join(_ACTIONS)}", status_code=400)
        return await _done(_acted, caches, audit, rowid, action, back=form.get("query", ""))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(caches.close)

    names = [*LOOPBACK_NAMES, *(_host_name(h) for h in hosts)]
    return Starlette(
        routes=[Route("/", page), Route("/judge/{rowid:int}", verdict, methods=["POST"]),
                Route("/request/{rowid:int}", act, methods=["POST"])],
        middleware=[Middleware(_Guarded),
                    Middleware(TrustedHostMiddleware, allowed_hosts=names, www_redirect=False)],
        lifespan=lifespan,
    )  # fmt: skip


def _host_name(host: str) -> str:
    """``--host`` as a Host header names it (an IPv6 address in brackets)."""
    host = host.strip().lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def _done(work: Callable[..., None], *args: Any, back: object) -> Response:
    """``work(*args)`` in a thread; the page again, or what kept it from being done."""
    rowid = args[2]
    try:
        await run_in_threadpool(work, *args)
    except KeyError:
        return PlainTextResponse("no such row", status_code=404)
    except StoreUnavailable as exc:  # nothing was recorded
        return PlainTextResponse(f"not done, not recorded: {exc}", status_code=503)
    except ValueError as exc:  # (a row of another namespace, nothing to act on)
        return PlainTextResponse(f"not done, not recorded: {exc}", status_code=409)
    query = str(back) if re.fullmatch(r"[\w.%&=+:-]*", str(back)) else ""
    return RedirectResponse(f"/?{query}#d{rowid}", status_code=303)


class _Guarded:
    """Headers that keep other sites out: no framing, a strict CSP (this page's own style,
    no script, forms to itself only), no caching, no referrer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *_HEADERS]
            await send(message)

        await self.app(scope, receive, guarded if scope["type"] == "http" else send)


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


def _acted(caches: _Caches, audit: AuditLog, rowid: int, action: str) -> None:
    """A person's ``action`` on request ``rowid``, through the cache of its namespace:
    "same" / "different" (a verdict), "delete" (its entry), "invalidate" (its tags)."""
    row = audit.request_row(rowid)
    if row is None:
        raise KeyError(rowid)
    cache = caches(row.get("namespace"))
    entry_id = str(row.get("entry_id") or "")
    if action in ("same", "different"):
        decision = _decision_of(audit, row)
        if decision is not None:  # the semantic tier's candidates: labels (and feedback)
            judge(cache, audit, int(decision["rowid"]), action)
        elif row["tier"] != "llm" and entry_id:
            cache.feedback(entry_id, correct=action == "same")
        else:
            raise ValueError("nothing to judge: the model answered, no candidate was near")
        audit.judge(rowid, action, "requests")
    elif action == "delete":
        faq = _FAQ_ID.fullmatch(entry_id)
        if faq:
            cache.delete_faq([int(faq.group(1))])
        elif entry_id:
            cache.delete(entry_id)
        else:
            raise ValueError("no entry to delete")
        audit.acted(rowid, "deleted")
    else:
        tags = set(row.get("tags") or [])
        if entry_id and not _FAQ_ID.fullmatch(entry_id):
            entry = cache.entry(entry_id)
            tags |= set(entry.tags if entry is not None else ())
        if not tags:
            raise ValueError("its entry has no tags")
        for tag in sorted(tags):
            cache.invalidate(tag)
        audit.acted(rowid, "invalidated " + ", ".join(sorted(tags)))


def _decision_of(audit: AuditLog, row: dict[str, Any]) -> dict[str, Any] | None:
    """The semantic decision a verdict on request ``row`` is about: the one that served it,
    or refused its candidates before the model answered (not a FAQ hit's: the verdict is
    on the curated answer); ``None`` when it has no candidate."""
    if row.get("tier") not in ("semantic", "llm") or not row.get("decision"):
        return None
    decision = audit.decision(int(row["decision"]))
    return decision if decision is not None and decision.get("candidates") else None


def _render(
    pages: Any,
    caches: _Caches,
    audit: AuditLog,
    show: dict[str, str],
    request: Request,
    token: str,
    limit: int,
) -> str:
    """The page: one page of requests (keyset: ``before`` / ``after`` a row id)."""
    problems: list[str] = []
    since, until = (_moment(show[k], k, problems) for k in ("since", "until"))
    before, after = (_rowid(request.query_params.get(k), k, problems) for k in ("before", "after"))
    rows = audit.requests(limit=limit + 1, before=before, after=after, namespace=show["ns"],
                          tier=show["tier"], outcome=show["outcome"], verdict=show["verdict"],
                          since=since, until=until)  # fmt: skip
    more = len(rows) > limit
    if more:
        rows = rows[1:] if after is not None and before is None else rows[:limit]
    decisions = audit.decisions([r["decision"] for r in rows if r.get("decision")])
    shown = [_view(r, decisions.get(r.get("decision") or 0), caches) for r in rows]
    shown = [r for r in shown if _in_band(r, show)]
    query = urlencode({k: v for k, v in show.items() if v})
    older = newer = None
    if rows and (more or after is not None):
        older = f"?{query}&before={rows[-1]['rowid']}".replace("?&", "?")
    if rows and (before is not None or (after is not None and more)):
        newer = f"?{query}&after={rows[0]['rowid']}".replace("?&", "?")
    with contextlib.suppress(Exception):
        kept = audit.kept()
    decided = [d for d in decisions.values() if d.get("threshold")]
    return str(pages.render(
        rows=shown, show=show, token=token, query=query, older=older, newer=newer,
        problems=problems, kept=kept, histogram=_histogram(shown), style=Markup(_STYLE),
        threshold=decided[0]["threshold"] if decided else None, questions=audit.questions,
        when=_when,
    ))  # fmt: skip


def _moment(text: str, name: str, problems: list[str]) -> float | None:
    """A time filter ("2025-01-31T09:30", local time) as seconds since the epoch."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        problems.append(f"{name}: not a time ({text[:40]!r}); not applied")
        return None


def _rowid(text: str | None, name: str, problems: list[str]) -> int | None:
    if not text:
        return None
    if not text.isdigit():
        problems.append(f"{name}: not a row number; not applied")
        return None
    return int(text)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def _view(row: dict[str, Any], decision: dict[str, Any] | None, caches: _Caches) -> dict[str, Any]:
    """What the page shows of a request row, its decision's candidates with why each was
    refused (and, where the record has it, how many neighbours share its answer)."""
    acts = caches.acts_in(row.get("namespace"))
    candidates: list[dict[str, Any]] = []
    if decision is not None and isinstance(decision.get("candidates"), list):
        rejected = decision.get("rejected") if isinstance(decision.get("rejected"), dict) else {}
        threshold = decision.get("threshold") or 0.0
        for found in decision["candidates"]:
            c = dict(found) if isinstance(found, dict) else {}
            why = str(rejected.get(str(c.get("id")), ""))  # type: ignore[union-attr]
            if c.get("id") == decision.get("hit"):
                why = "served"
            elif not why and float(c.get("score", 0) or 0) < threshold:
                why = "under the threshold"
            c["why"] = why
            candidates.append(c)
    best = max((float(c.get("score", 0) or 0) for c in candidates), default=row.get("score"))
    answer, stored = row.get("answer"), False
    if row.get("tier") == "llm" and acts and row.get("entry_id"):  # what the model answered,
        with contextlib.suppress(Exception):  # as stored (nothing: not stored, or gone)
            entry = caches(row.get("namespace")).entry(str(row["entry_id"]))
            answer, stored = (entry.answer, True) if entry is not None else (None, False)
    served = row.get("tier") != "llm"
    about_candidates = bool(candidates) and row.get("tier") in ("semantic", "llm")
    judgeable = about_candidates or (served and bool(row.get("entry_id")))
    return {**row, "candidates": candidates, "best": best, "answer": answer,
            "stored": stored, "served": served, "acts": acts, "judgeable": judgeable,
            "about_candidates": about_candidates,
            "deletable": served or stored, "by": (decision or {}).get("served_by"),
            "skipped": (decision or {}).get("skipped")}  # fmt: skip


def _in_band(row: dict[str, Any], show: dict[str, str]) -> bool:
    """The best-score filter (on the page shown)."""
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
    """(band start, requests served, not served) of the best scores, 0.70 up."""
    bins = {band: [0, 0] for band in _BANDS}
    for row in rows:
        if row["best"] is None or row["best"] < _BANDS[0]:
            continue
        band = max(b for b in _BANDS if b <= row["best"] + 1e-9)
        bins[band][0 if row["served"] else 1] += 1
    return [(band, served, refused) for band, (served, refused) in bins.items()]


_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }
table { border-collapse: collapse; width: 100% } td, th { border-bottom: 1px solid #ddd;
padding: 6px; vertical-align: top; text-align: left } .served { color: #0a6 }
.refused { color: #b40 } .skipped, .miss, .below { color: #888 } .rules { font-family: monospace }
form.inline { display: inline } .bar { fill: #7ab } .bar.refused { fill: #d96 }
.verdict { font-weight: bold } .small { color: #666; font-size: 12px } .when { white-space: nowrap }
.answer { color: #345 } .problem { color: #b00 } nav a { margin-right: 1em }
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy",
     f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
     "frame-ancestors 'none'; base-uri 'none'".encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]  # fmt: skip

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TriCache review</title>
<style>{{ style }}</style></head><body>
<h1>TriCache review</h1>
<p class="small">every request, newest first: {{ rows|length }} on this page ·
threshold in force: {{ '%.3f'|format(threshold) if threshold else '—' }}
{% if kept %}· the log keeps {{ '%g'|format(kept.days) }} days of requests, up to
{{ '%g'|format(kept.mb) }} MB (older rows are pruned; now {{ '%.1f'|format(kept.used_mb) }} MB,
{{ kept.requests }} requests since {{ when(kept.oldest) }}){% endif %}</p>
{% for p in problems %}<p class="problem">{{ p }}</p>{% endfor %}
<form method="get" action="/">
 namespace <input name="ns" size="10" value="{{ show.ns }}">
 tier <select name="tier">{% for o in ['', 'exact', 'semantic', 'faq', 'llm'] %}
 <option value="{{ o }}" {{ 'selected' if show.tier == o }}>{{ o or 'all' }}</option>{% endfor %}
 </select>
 outcome <select name="outcome">{% for o in ['', 'served', 'refused', 'below', 'miss', 'skipped'] %}
 <option value="{{ o }}" {{ 'selected' if show.outcome == o }}>{{ o or 'all' }}</option>{% endfor %}
 </select>
 verdict <select name="verdict">{% for o in ['', 'none', 'same', 'different', 'acted', 'any'] %}
 <option value="{{ o }}" {{ 'selected' if show.verdict == o }}>{{ o or 'all' }}</option>{% endfor %}
 </select>
 from <input name="since" type="datetime-local" value="{{ show.since }}">
 to <input name="until" type="datetime-local" value="{{ show.until }}">
 best score from <input name="low" size="4" value="{{ show.low }}"> to
 <input name="high" size="4" value="{{ show.high }}">
 <button type="submit">filter</button>
</form>
<svg width="640" height="130" role="img" aria-label="best scores">
{% for band, served, refused in histogram %}{% set x = loop.index0 * 40 %}
 <rect class="bar" x="{{ x }}" y="{{ 100 - served * 4 if served < 25 else 0 }}" width="18"
  height="{{ served * 4 if served < 25 else 100 }}"><title>{{ served }} served</title></rect>
 <rect class="bar refused" x="{{ x + 19 }}" y="{{ 100 - refused * 4 if refused < 25 else 0 }}"
  width="18" height="{{ refused * 4 if refused < 25 else 100 }}">
  <title>{{ refused }} not served</title></rect>
 <text x="{{ x }}" y="120" font-size="10">{{ '%.2f'|format(band) }}</text>{% endfor %}
{% if threshold and threshold >= 0.7 %}{% set tx = (threshold - 0.70) / 0.02 * 40 %}
 <line x1="{{ tx }}" x2="{{ tx }}" y1="0" y2="105" stroke="#c00" stroke-dasharray="4"/>
{% endif %}</svg>
<nav>{% if newer %}<a href="{{ newer }}">newer</a>{% endif %}
{% if older %}<a href="{{ older }}">older</a>{% endif %}</nav>
<table><tr><th>when</th><th>asked</th><th>answered by</th><th>matched, answer</th>
<th>candidates (score, why refused)</th><th>verdict, actions</th></tr>
{% for r in rows %}<tr id="d{{ r.rowid }}">
 <td class="when">{{ when(r.ts) }}</td>
 <td class="question">{{ r.question if r.question is not none
   else '(not kept: audit_questions=False)' }}
  <div class="small">{{ r.namespace }}</div>
  {% if r.tags %}<div class="small">tags: {{ r.tags|join(', ') }}</div>{% endif %}</td>
 <td class="{{ r.outcome }}">{% if r.served %}served by {{ r.tier }}{% if r.level %}
  ({{ r.level }}){% endif %}{% if r.by %} · {{ r.by }}{% endif %}{% else %}LLM
  <div class="small">{{ r.outcome }}{% if r.skipped %} ({{ r.skipped }}){% endif %}</div>
  {% endif %}{% if r.score is not none %}<div>score {{ '%.3f'|format(r.score) }}</div>{% endif %}
 </td>
 <td>{% if r.matched %}<div>{{ r.matched }}</div>{% endif %}
  {% if r.answer %}<div class="answer">→ {{ r.answer }}</div>
  {% elif not r.served %}<span class="small">(no answer stored)</span>{% endif %}</td>
 <td>{% for c in r.candidates %}<div>{{ '%.3f'|format(c.score) }} · {{ c.question }}
  <span class="rules">{{ c.why }}{% if c.rules %} [{{ c.rules|join(', ') }}]{% endif %}
  {% if c.agreeing %} · {{ c.agreeing }} agreeing{% endif %}
  {% if c.group is string and c.group %} · answer group {{ c.group[:8] }}{% endif %}</span></div>
 {% else %}<span class="small">none</span>{% endfor %}</td>
 <td>{% if r.verdict %}<div class="verdict">verdict: {{ r.verdict }}</div>{% endif %}
  {% if r.acted %}<div class="verdict">done: {{ r.acted }}</div>{% endif %}
  {% if not r.acts %}
  <span class="small">another namespace: tricache review --namespace {{ r.namespace }}</span>
  {% else %}
  {% set actions = [] %}
  {% if r.judgeable and not r.verdict %}{% set _ = actions.extend([('same', 'same answer'),
     ('different', 'not the same' if r.about_candidates else 'mark wrong')]) %}{% endif %}
  {% if r.deletable and not r.acted %}{% set _ = actions.append(('delete', 'delete the entry'))
  %}{% endif %}
  {% if (r.tags or r.tier == 'semantic') and not r.acted %}{% set _ = actions.append(('invalidate',
     'invalidate its tags')) %}{% endif %}
  {% for action, text in actions %}
  <form class="inline" method="post" action="/request/{{ r.rowid }}">
   <input type="hidden" name="token" value="{{ token }}">
   <input type="hidden" name="query" value="{{ query }}">
   <button name="action" value="{{ action }}" class="{{ action }}">{{ text }}</button></form>
  {% endfor %}{% endif %}</td></tr>
{% endfor %}</table>
<nav>{% if newer %}<a href="{{ newer }}">newer</a>{% endif %}
{% if older %}<a href="{{ older }}">older</a>{% endif %}</nav>
</body></html>
"""
