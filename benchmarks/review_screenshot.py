"""The screenshot of ``tricache review`` in docs/operations.md: a cache with a few decisions
(served, refused, skipped), the page served on loopback, headless Chromium.

    python benchmarks/review_screenshot.py      # writes docs/img/review.png
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tricache import Cache, Semantic
from tricache.tools.review import review_app

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "review.png"
STORED = {
    "How do I reset my password on the website?": "Use the 'Forgot password' link.",
    "How do I export my invoices to CSV?": "Billing > Invoices > Export.",
    "What is the refund window?": "30 days from delivery.",
}
ASKED = [
    "How can I reset my password on the website?",
    "How do I reset my email on the website?",
    "How can I export my invoices to CSV?",
    "How do I export my invoices to PDF?",
    "What's the refund window?",
    "What is the refund window for gift cards?",
    "What is the weather today?",
]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(path=Path(tmp) / "c.sqlite3", faq=False,
                      semantic=Semantic(vector_path=Path(tmp) / "v"), warm=True)  # fmt: skip
        for question, answer in STORED.items():
            request = cache.request(question)
            cache.lookup(request)
            cache.update(request, answer)
        for question in ASKED:
            cache.lookup(cache.request(question))
        audit = cache.semantic.audit  # type: ignore[union-attr]
        assert audit is not None
        server = uvicorn.Server(uvicorn.Config(review_app(cache, audit), host="127.0.0.1",
                                               port=8799, log_level="warning"))  # fmt: skip
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                     "--disable-background-networking", "--no-first-run"):  # fmt: skip
            options.add_argument(flag)
        browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            browser.get("http://127.0.0.1:8799/")
            OUT.parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(OUT))
        finally:
            browser.quit()
            server.should_exit = True
            cache.close()
    print(f"written {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
