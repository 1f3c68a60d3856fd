"""The screenshot of ``tricache review`` after a short mixed run (issue #40): the model's
answers, exact hits, semantic hits (a paraphrase and a rewrite), a FAQ hit, refused
look-alikes, and one answer marked wrong in the page (a click in headless Chromium).

    python benchmarks/review_screenshot.py
    # writes benchmarks/results/review_page.png and docs/img/review.png
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tricache import Cache, Faq, Semantic
from tricache.tools.review import review_app

ROOT = Path(__file__).resolve().parents[1]
OUT = [ROOT / "benchmarks" / "results" / "review_page.png", ROOT / "docs" / "img" / "review.png"]
STORED = {  # asked first: the model answers, the answer is stored
    "How do I reset my password on the website?": "Use the 'Forgot password' link.",
    "How do I export my invoices to CSV?": "Billing > Invoices > Export.",
    "What is the refund window?": "30 days from delivery.",
}
FAQ = [("How do I cancel my subscription?", "Account > Subscription > Cancel.")]
ASKED = [
    "How do I export my invoices to CSV?",  # exact
    "How can I reset my password on the website?",  # semantic (a paraphrase)
    "how do i reset my password on the website?",  # semantic (the same question, rewritten)
    "How can I cancel my subscription?",  # FAQ
    "How do I reset my email on the website?",  # a look-alike: the model
    "How do I export my invoices to PDF?",  # a look-alike: the model
    "What is the weather today?",  # time-dependent: the model
]
MARKED_WRONG = "how do i reset my password on the website?"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(path=Path(tmp) / "c.sqlite3", faq=Faq(path=Path(tmp) / "faq.sqlite3"),
                      semantic=Semantic(vector_path=Path(tmp) / "v"), warm=True)  # fmt: skip
        cache.add_faq(FAQ)
        for question, answer in STORED.items():
            request = cache.request(question)
            cache.lookup(request)
            cache.update(request, answer)
        for question in ASKED:
            cache.lookup(cache.request(question))
        audit = cache.semantic.audit  # type: ignore[union-attr]
        assert audit is not None
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(review_app(cache, audit), host="127.0.0.1",
                                               port=port, log_level="warning"))  # fmt: skip
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1500",
                     "--disable-background-networking", "--no-first-run"):  # fmt: skip
            options.add_argument(flag)
        browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            url = f"http://127.0.0.1:{port}/"
            browser.get(url)
            row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "tr[id^=d]")
                       if MARKED_WRONG in r.text)  # fmt: skip
            row_id = row.get_attribute("id")
            row.find_element(By.CSS_SELECTOR, "button.different").click()
            deadline = time.monotonic() + 20
            while "verdict: different" not in browser.find_element(By.ID, row_id).text:
                assert time.monotonic() < deadline, "the verdict never showed"
                time.sleep(0.1)
            browser.get(url)
            for out in OUT:
                out.parent.mkdir(parents=True, exist_ok=True)
                browser.save_screenshot(str(out))
        finally:
            browser.quit()
            server.should_exit = True
            cache.close()
    print("written " + ", ".join(str(p) for p in OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
