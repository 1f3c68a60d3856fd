"""``tricache review`` as issue #40 asks (items 1 to 4): no other site can read or drive the
page (Host names, framing, CSP), it shows every request (exact, semantic, FAQ, the model) and
acts on it, bad start-up input is one line and exit 2, and the audit log keeps what it says.

The page runs in uvicorn on loopback and is driven in headless Chromium (``test_review.py``'s
driver); the command runs as ``tricache review`` in a fresh process.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from selenium.webdriver.common.by import By
from test_review import _browser

from tricache import Cache, Faq, Semantic
from tricache.semantic.audit import AuditLog
from tricache.tools.review import review_app

from conftest import free_port

STORED = "How do I reset my password on the website?"
PARAPHRASE = "How can I reset my password on the website?"
REWRITE = STORED.lower()  # served by the semantic tier as the same question in another form
LOOK_ALIKE = "How do I reset my email on the website?"
FAQ_Q, FAQ_ASKED = "How do I cancel my subscription?", "How can I cancel my subscription?"
ANSWER = "Use the 'Forgot password' link."


class _Served:
    """``review_app`` served by uvicorn on 127.0.0.1 in a thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))  # fmt: skip
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the review server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[tuple[Cache, AuditLog, _Served]]:
    """A short mixed run: the model, exact, semantic (a paraphrase and a rewrite), FAQ, a
    refused look-alike; tagged entries."""
    cache = Cache(path=tmp_path / "c.sqlite3", faq=Faq(path=tmp_path / "faq.sqlite3"),
                  semantic=Semantic(vector_path=tmp_path / "v"), warm=True)  # fmt: skip
    cache.add_faq([(FAQ_Q, "Account > Subscription > Cancel.")])
    request = cache.request(STORED, tags=["docs:passwords"])
    assert cache.lookup(request) is None  # the model answers
    assert cache.update(request, ANSWER)
    assert cache.lookup(cache.request(STORED, tags=["docs:passwords"])).tier == "exact"  # type: ignore[union-attr]
    assert cache.lookup(cache.request(PARAPHRASE)).tier == "semantic"  # type: ignore[union-attr]
    assert cache.lookup(cache.request(REWRITE)).tier == "semantic"  # type: ignore[union-attr]
    assert cache.lookup(cache.request(FAQ_ASKED)).tier == "faq"  # type: ignore[union-attr]
    assert cache.lookup(cache.request(LOOK_ALIKE)) is None
    audit = cache.semantic.audit  # type: ignore[union-attr]
    assert audit is not None
    served = _Served(review_app(cache, audit))
    yield cache, audit, served
    served.stop()
    cache.close()


def _token(text: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', text)
    assert found is not None
    return found.group(1)


# item 1: no other site reads or drives it -----------------------------------------------------
def test_a_foreign_host_gets_nothing_and_the_page_cannot_be_framed(
    mixed: tuple[Cache, AuditLog, _Served],
) -> None:
    _, _, served = mixed
    foreign = httpx.get(served.url, headers={"Host": "rebind.attacker.test"})
    assert foreign.status_code in (400, 421)
    assert "token" not in foreign.text and STORED not in foreign.text
    rebound = {"Host": f"rebind.attacker.test:{served.port}"}
    posted = httpx.post(served.url + "judge/1", headers=rebound,
                        data={"verdict": "different", "token": "x"})  # fmt: skip
    assert posted.status_code in (400, 421)
    for host in ("127.0.0.1", "localhost", "[::1]", f"localhost:{served.port}"):
        assert httpx.get(served.url, headers={"Host": host}).status_code == 200, host
    page = httpx.get(served.url)
    assert page.headers["x-frame-options"] == "DENY"
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert "script-src" not in policy  # (none: default-src 'none' forbids every script)
    assert "unsafe-inline" not in policy
    # state changes: POST only, behind the token
    assert httpx.get(served.url + "judge/1").status_code == 405
    assert httpx.post(served.url + "judge/1", data={"verdict": "same"}).status_code == 403


def test_in_chromium_a_rebinding_name_reads_nothing_and_another_origin_cannot_frame_it(
    mixed: tuple[Cache, AuditLog, _Served], tmp_path: Path
) -> None:
    _, audit, served = mixed
    framing = _Served(_framing_page(served.port))  # another origin: another port
    browser = _browser("--host-resolver-rules=MAP rebind.attacker.test 127.0.0.1")
    try:
        browser.get(f"http://rebind.attacker.test:{served.port}/")  # DNS rebinding
        assert "token" not in browser.page_source and STORED not in browser.page_source
        browser.get(framing.url.replace("127.0.0.1", "localhost"))
        time.sleep(1.0)
        browser.switch_to.frame("review")
        assert browser.find_elements(By.CSS_SELECTOR, "button") == []  # nothing to click
        assert STORED not in browser.page_source
        browser.switch_to.default_content()
        browser.get(served.url)  # the page itself still works (the CSP lets its style in)
        assert browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
        style = browser.execute_script(
            "return getComputedStyle(document.body).fontFamily")  # fmt: skip
        assert "system-ui" in style
    finally:
        browser.quit()
        framing.stop()
    assert all(r["verdict"] is None for r in audit.recent(50))


def _framing_page(port: int) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    html = (f'<html><body><iframe name="review" width="900" height="600" '
            f'src="http://127.0.0.1:{port}/"></iframe></body></html>')  # fmt: skip

    async def page(request: Any) -> HTMLResponse:
        return HTMLResponse(html)

    return Starlette(routes=[Route("/", page)])


# item 2: every request, and what a person can do about it ---------------------------------------
EXPORT = "How do I export my invoices to CSV?"


def _row(browser: Any, *words: str) -> Any:
    """The page's row that shows every one of ``words``."""
    rows = browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
    found = [r for r in rows if all(w in r.text for w in words)]
    assert found, f"no row with {words}: {[r.text[:80] for r in rows]}"
    return found[0]


def _act(browser: Any, url: str, button: str, *words: str) -> str:
    """Click ``button`` (a CSS class) in the row showing ``words``; the row's text after."""
    browser.get(url)
    row = _row(browser, *words)
    row_id = row.get_attribute("id")
    row.find_element(By.CSS_SELECTOR, f"button.{button}").click()
    deadline = time.monotonic() + 20
    while True:
        try:
            text = str(browser.find_element(By.ID, row_id).text)
            if "done:" in text or "verdict:" in text:
                return text
        except Exception:  # (reloading)
            pass
        assert time.monotonic() < deadline, browser.find_element(By.TAG_NAME, "body").text[:500]
        time.sleep(0.1)


def test_the_page_shows_every_request_and_acts_on_it(
    mixed: tuple[Cache, AuditLog, _Served],
) -> None:
    cache, _, served = mixed
    request = cache.request(EXPORT)
    assert cache.lookup(request) is None
    assert cache.update(request, "Billing > Invoices > Export.")
    exported = cache.lookup(cache.request(EXPORT))
    assert exported is not None and exported.tier == "exact"
    browser = _browser()
    try:
        browser.get(served.url)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "not kept" not in body  # the user never set audit_questions=False
        assert re.search(r"\d\d:\d\d:\d\d", body)  # when
        exact = _row(browser, STORED, "exact")
        assert ANSWER in exact.text and "docs:passwords" in exact.text
        semantic = _row(browser, PARAPHRASE, "semantic")
        assert STORED in semantic.text and ANSWER in semantic.text and "0.9" in semantic.text
        rewrite = _row(browser, REWRITE, "semantic")  # a rewrite: its question, its buttons
        assert STORED in rewrite.text and rewrite.find_elements(By.CSS_SELECTOR, "button")
        faq = _row(browser, FAQ_ASKED, "faq")
        assert FAQ_Q in faq.text and "Account > Subscription > Cancel." in faq.text
        refused = _row(browser, LOOK_ALIKE, "LLM")  # the model answered; why not the cache
        assert STORED in refused.text and "under the threshold" in refused.text
        first = [r for r in browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
                 if STORED in r.text and "LLM" in r.text]  # fmt: skip
        assert first and ANSWER in first[-1].text  # the answer the model gave, as stored
        # filters: tier, namespace, time, verdict
        browser.get(served.url + "?tier=faq")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
        assert len(rows) == 1 and FAQ_ASKED in rows[0].text
        browser.get(served.url + "?tier=llm")
        assert {LOOK_ALIKE, STORED, EXPORT} <= {
            q
            for q in (STORED, LOOK_ALIKE, EXPORT, PARAPHRASE)
            if any(q in r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]"))
        }
        browser.get(served.url + "?ns=nobody")
        assert browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]") == []
        browser.get(served.url + "?since=2999-01-01T00:00")
        assert browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]") == []
        browser.get(served.url + "?until=2000-01-01T00:00")
        assert browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]") == []
        # act: mark wrong (a rewrite's semantic hit, a FAQ hit), delete, invalidate the tags
        assert "verdict: different" in _act(browser, served.url, "different", REWRITE, "semantic")
        assert "verdict: different" in _act(browser, served.url, "different", FAQ_ASKED, "faq")
        assert "done: deleted" in _act(browser, served.url, "delete", EXPORT, "exact")
        text = _act(browser, served.url, "invalidate", STORED, "exact")
        assert "done: invalidated docs:passwords" in text
        browser.get(served.url + "?verdict=different")
        judged = browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
        assert len(judged) == 2
        browser.get(served.url + "?verdict=acted")
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")) == 2
    finally:
        browser.quit()
    # each click reached the store
    hit = cache.lookup(cache.request(REWRITE))
    assert hit is None or hit.tier != "semantic"  # the matched question left the index
    hit = cache.lookup(cache.request(FAQ_ASKED))
    assert hit is None or hit.tier != "faq"
    assert cache.entry(exported.entry_id) is None  # deleted
    assert cache.lookup(cache.request(STORED, tags=["docs:passwords"])) is None  # invalidated


def test_a_hundred_thousand_requests_are_paged_without_loading_them_all(
    mixed: tuple[Cache, AuditLog, _Served],
) -> None:
    _, audit, served = mixed
    audit.flush()
    with sqlite3.connect(audit.path) as db:
        while db.execute("SELECT count(*) FROM requests").fetchone()[0] < 100_000:
            db.execute("INSERT INTO requests SELECT * FROM requests")
        newest = db.execute("SELECT max(rowid) FROM requests").fetchone()[0]
    url, seen, slowest = served.url + "?tier=semantic", set(), 0.0
    for _ in range(4):
        start = time.perf_counter()
        page = httpx.get(url)
        slowest = max(slowest, time.perf_counter() - start)
        assert page.status_code == 200
        ids = [int(i) for i in re.findall(r'<tr id="d(\d+)"', page.text)]
        assert len(ids) == 100 and ids == sorted(ids, reverse=True)
        assert not seen & set(ids)
        seen |= set(ids)
        older = re.search(r'href="(\?[^"]*before=\d+[^"]*)"', page.text)
        assert older is not None
        url = served.url + older.group(1).replace("&amp;", "&")
    assert slowest < 2.0, slowest
    deep = httpx.get(served.url + "?before=50")
    assert deep.status_code == 200 and max(int(i) for i in re.findall(
        r'<tr id="d(\d+)"', deep.text)) < 50  # fmt: skip
    assert f'<tr id="d{newest}"' in httpx.get(served.url).text


# item 3: bad start-up input is one line and exit 2 -----------------------------------------------
def _review_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    audit = tmp_path / "audit.sqlite3"
    if not audit.exists():
        AuditLog(audit).close()
    env = {**os.environ, "TRICACHE_HOME": str(tmp_path / "home")}
    return subprocess.run(["tricache", "review", "--audit", str(audit), "--path",
                           str(tmp_path / "c.sqlite3"), *args],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_a_port_out_of_range_is_one_line_and_exit_2(tmp_path: Path, port: str) -> None:
    done = _review_command(tmp_path, "--port", port)
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "--port" in done.stderr


def test_a_port_in_use_is_one_line_and_exit_2_before_anything_is_printed(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = _review_command(tmp_path, "--port", str(taken.getsockname()[1]))
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stdout == ""  # no "review page at http://…" first
    assert len(done.stderr.strip().splitlines()) == 1
    assert "in use" in done.stderr


# item 4: the audit log keeps what it says -----------------------------------------------------
def test_rows_older_than_the_kept_age_are_pruned_and_the_page_says_what_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRICACHE_AUDIT_KEEP_DAYS", "2")
    monkeypatch.setenv("TRICACHE_AUDIT_KEEP_MB", "50")
    cache = Cache(path=tmp_path / "c.sqlite3", faq=False,
                  semantic=Semantic(vector_path=tmp_path / "v"), warm=True)  # fmt: skip
    for question in (STORED, PARAPHRASE, LOOK_ALIKE):
        cache.lookup(cache.request(question))
    audit = cache.semantic.audit  # type: ignore[union-attr]
    assert audit is not None and (audit.keep_days, audit.keep_mb) == (2.0, 50.0)
    audit.flush()
    with sqlite3.connect(audit.path) as db:  # two rows of each table, three days old
        for table in ("requests", "decisions"):
            db.execute(f"UPDATE {table} SET ts = ts - 3 * 86400 WHERE rowid <= 2")
    cache.close()
    again = AuditLog(audit.path)  # a new process's log prunes when it opens
    again.flush()
    deadline = time.monotonic() + 10
    while len(again.recent(50)) != 1 or len(again.requests(limit=50)) != 1:
        assert time.monotonic() < deadline, (again.recent(50), again.requests(limit=50))
        time.sleep(0.1)
    with _app_client(again) as client:
        text = client.get("/").text
    assert re.search(r"keeps[^<]*2 days[^<]*50 MB", text), text[:2000]
    again.close()


def test_the_log_stays_under_its_size(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.sqlite3", keep_mb=1)
    question = "How do I reset my password on the website? " * 12  # ~500 characters
    for _ in range(8):
        for i in range(1000):
            audit.request("default", f"{i} {question}", "llm")
        audit.flush(timeout=30)
    newest = audit.requests(limit=1)[0]
    assert newest["question"].startswith("999 ")  # the newest kept
    audit.close()
    size = sum(p.stat().st_size for p in tmp_path.glob("audit.sqlite3*"))
    assert size < 1.5 * 2**20, size
    with sqlite3.connect(tmp_path / "audit.sqlite3") as db:
        kept = db.execute("SELECT count(*) FROM requests").fetchone()[0]
    assert 300 < kept < 8000  # the oldest went


def _app_client(audit: AuditLog) -> Any:
    from starlette.testclient import TestClient

    cache = Cache(path=audit.path.with_name("page.sqlite3"), faq=False, semantic=False)
    return TestClient(review_app(cache, audit), base_url="http://127.0.0.1")


def test_a_hit_on_the_same_question_in_another_form_is_recorded_for_review(
    tmp_path: Path,
) -> None:
    """A question served as another form of a stored one ("HOW DO I …") is recorded with the
    question and the candidate it matched, so a person sees it and "not the same" acts on it
    (the decision returned before recording either)."""
    with Cache(path=tmp_path / "f.sqlite3", faq=False, semantic=Semantic()) as cache:
        request = cache.request("How do I reset my password on the website?")
        cache.update(request, "Use the 'Forgot password' link.")
        hit = cache.lookup(cache.request("HOW DO I RESET MY PASSWORD ON THE WEBSITE?"))
        assert hit is not None and hit.tier == "semantic"
        audit = cache.semantic.audit  # type: ignore[union-attr]
        assert audit is not None
        decision = audit.recent(1)[0]
        assert decision["served_by"] == "form"
        assert decision["question"]
        assert [c["ref"] for c in decision["candidates"]] == [hit.entry_id.removeprefix("s:")]


def test_retention_is_a_setting_of_the_semantic_tier(tmp_path: Path) -> None:
    """``Semantic(audit_keep_days=, audit_keep_mb=)`` reach the audit log; nonsense is refused
    when the settings are built."""
    with Cache(path=tmp_path / "r.sqlite3", faq=False,
               semantic=Semantic(audit_keep_days=2, audit_keep_mb=5)) as cache:  # fmt: skip
        audit = cache.semantic.audit  # type: ignore[union-attr]
        assert audit is not None
        assert (audit.retention.days, audit.retention.mb) == (2, 5)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="audit_keep_days"):
            Semantic(audit_keep_days=bad)


def test_review_on_a_file_that_is_not_an_audit_log_changes_nothing(tmp_path: Path) -> None:
    """``tricache review --audit <a file that is not a database>``: one line, exit 2, and the
    file keeps its bytes and its mode."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    notes.chmod(0o644)
    run = subprocess.run(["tricache", "review", "--audit", str(notes), "--path",
                          str(tmp_path / "s.sqlite3"), "--port", str(free_port())],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "not an audit log" in run.stderr
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    assert notes.stat().st_mode & 0o777 == 0o644
