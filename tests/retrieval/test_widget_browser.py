"""The Ask widget in a real browser (Debian's headless Chromium), on a page of
another site: the page is served from a second loopback origin and carries the
one script tag, pointing at the product's live server. On a site its source
allows, a reader asks from the keyboard and reads a cited answer; on a site no
source allows, the same page says it may not ask.

Skipped without Chromium, as tests/test_browser.py is (whose browser this is).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from retrieval.models import QueryLog
from sources.models import Source
from tests.test_browser import (  # noqa: F401  (browser: the fixture)
    SCREENSHOTS,
    UPGRADE,
    browser,
    full_page_screenshot,
)
from tests.world import harbor_load, harbor_url, ingest_markdown

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The upgrade page with emphasis and inline code in the sentence the answer quotes.
EMPHASIS = UPGRADE.replace(
    "run\nthis command once, from one machine:",
    "run\nthis command *once*, from one machine (`harbor` on its path):",
)
assert EMPHASIS != UPGRADE

# A docs site's own page, whose styles must not reach the widget's box: only
# the --kb-* variables it sets do.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Harbor handbook</title>
<style>
  body {{ font: 17px/1.6 Georgia, serif; max-width: 46rem; margin: 2rem auto; }}
  input, button, p, a {{ color: rgb(255, 0, 0) !important; font-size: 40px; }}
  .kb-ask {{ --kb-accent: #6b2fb3; margin-top: 1.5rem; }}
</style></head>
<body>
<h1>Harbor handbook</h1>
<p>Questions about running Harbor? Ask the documentation below.</p>
<script src="{src}" async></script>
</body></html>
"""
# The tag in the head, with its box placed in an element of the page.
IN_THE_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Harbor FAQ</title>
<script src="{src}" data-target="#ask" data-label="Ask the Harbor docs" async>
</script></head>
<body><h1>Harbor FAQ</h1><aside id="ask"></aside><p>The end.</p></body></html>
"""


class Site:
    """A web server on 127.0.0.1 with these pages (path → HTML): another origin
    than the live server's (localhost)."""

    def __init__(self, pages: dict[str, str]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages[self.path].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sites(live_server) -> Iterator[tuple[Site, Site]]:
    """The docs site the source allows, and another one, with the same page."""
    src = f"{live_server.url}/widget.js"
    pages = {"/": PAGE.format(src=src), "/faq/": IN_THE_HEAD.format(src=src)}
    allowed, other = Site(pages), Site(pages)
    yield allowed, other
    allowed.close()
    other.close()


def test_the_widget_answers_on_an_allowed_site_and_refuses_another(browser, sites):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    allowed, other = sites
    harbor = harbor_load()
    ingest_markdown(harbor_url("upgrading"), EMPHASIS)
    Source.objects.filter(pk=harbor.pk).update(
        public=True, widget_origins=[allowed.origin]
    )
    # Not public: allowing the site is not enough without a key.
    Source.objects.create(
        name="Staff runbooks",
        seed_urls="https://runbooks.example.org/",
        widget_origins=[allowed.origin],
    )
    ingest_markdown(
        "https://runbooks.example.org/schema/",
        "# Schema upgrades\n\n## Upgrading the database schema\n\n"
        "To upgrade the database schema, page the on-call DBA first.\n",
    )

    browser.get(f"{allowed.origin}/")
    host = browser.find_element(By.CSS_SELECTOR, ".kb-ask")
    box = host.shadow_root
    field = box.find_element(By.CSS_SELECTOR, "input")
    label = box.find_element(By.CSS_SELECTOR, "label")
    field.click()
    field.send_keys("How do I upgrade the database schema?", Keys.ENTER)
    item = box.find_element(By.CSS_SELECTOR, "ol.cites > li")  # waits for it
    answer = box.find_element(By.CSS_SELECTOR, ".answer")
    code = answer.find_element(By.CSS_SELECTOR, "pre code").text
    emphasis = answer.find_element(By.CSS_SELECTOR, "p em").text
    inline_code = answer.find_element(By.CSS_SELECTOR, "p code").text
    marker = answer.find_element(By.CSS_SELECTOR, "a.marker")
    cited = item.find_element(By.CSS_SELECTOR, "a")
    fresh = item.find_element(By.CSS_SELECTOR, ".meta:last-child")
    styles = browser.execute_script(
        "var s = getComputedStyle(arguments[0]), b = getComputedStyle(arguments[1]);"
        "return [s.color, s.fontSize, b.backgroundColor];",
        field,
        box.find_element(By.CSS_SELECTOR, "button"),
    )
    shown = browser.execute_script("return arguments[0].shadowRoot.innerHTML", host)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "widget-answer.png")

    assert label.text == "Ask the documentation"
    assert label.get_attribute("for") == field.get_attribute("id")
    assert box.find_element(By.CSS_SELECTOR, ".out").get_attribute("aria-live")
    assert "harbor db upgrade --to latest" in code
    assert "```" not in answer.text
    assert (emphasis, inline_code) == ("once", "harbor"), "as the Ask page shows"
    assert "*once*" not in answer.text and "`" not in answer.text
    assert marker.text == "[1]"
    assert marker.get_attribute("href") == harbor_url("upgrading") + "#schema"
    assert cited.get_attribute("href") == harbor_url("upgrading") + "#schema"
    assert "Schema migrations" in item.text
    assert fresh.text.startswith("verified ") and ", changed " in fresh.text
    assert fresh.find_element(By.CSS_SELECTOR, "time").get_attribute("datetime")
    assert styles == ["rgb(29, 29, 31)", "16px", "rgb(107, 47, 179)"], "themed only"
    assert "on-call DBA" not in shown and "runbooks.example.org" not in shown
    assert browser.execute_script(
        "return arguments[0].shadowRoot.activeElement === arguments[1]", host, field
    ), "the focus stays in the question, for the next one"
    log = QueryLog.objects.get(kind=QueryLog.Kind.QUERY)
    assert (log.user_id, log.abstained) == (None, False)

    # The reader says it did not help: the buttons are done with, and thanked.
    from selenium.webdriver.support.ui import WebDriverWait

    rating = box.find_element(By.CSS_SELECTOR, ".answer + .feedback")
    buttons = rating.find_elements(By.CSS_SELECTOR, "button")
    assert [button.text for button in buttons] == ["Useful", "Not useful"]
    buttons[1].click()
    WebDriverWait(browser, 10).until(lambda _: "Thanks" in rating.text)
    full_page_screenshot(browser, SCREENSHOTS / "widget-feedback.png")

    assert rating.text.startswith("Thanks for the feedback.")
    assert [button.is_enabled() for button in buttons] == [False, False]
    assert [b.get_attribute("aria-pressed") for b in buttons] == [None, "true"]
    log.refresh_from_db()
    assert (log.feedback, log.user_id) == (QueryLog.Feedback.UNHELPFUL, None)

    browser.get(f"{other.origin}/")
    box = browser.find_element(By.CSS_SELECTOR, ".kb-ask").shadow_root
    box.find_element(By.CSS_SELECTOR, "input").send_keys("How do I pause a queue?\n")
    refusal = box.find_element(By.CSS_SELECTOR, ".out .error").text
    full_page_screenshot(browser, SCREENSHOTS / "widget-refused.png")

    assert refusal == (
        f"This site ({other.origin}) is not allowed to ask this knowledge base. "
        "Its editors can allow it."
    )
    assert QueryLog.objects.count() == 1, "the refused question was not asked"

    browser.get(f"{allowed.origin}/faq/")
    host = browser.find_element(By.CSS_SELECTOR, "aside#ask > .kb-ask")
    box = host.shadow_root
    assert box.find_element(By.CSS_SELECTOR, "label").text == "Ask the Harbor docs"

    # An answer that found no evidence has nothing to rate.
    box.find_element(By.CSS_SELECTOR, "input").send_keys(
        "How do I restore a Harbor backup taken with Barman?\n"
    )
    box.find_element(By.CSS_SELECTOR, ".answer.abstained")  # waits for it
    assert browser.execute_script(
        "return arguments[0].shadowRoot.querySelector('.feedback') === null", host
    )


def test_the_widget_shows_a_pinned_answer_as_chosen_by_the_editors(browser, sites):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from retrieval.models import Chunk
    from retrieval.pins import pin_create

    allowed, _ = sites
    harbor = harbor_load()
    Source.objects.filter(pk=harbor.pk).update(
        public=True, widget_origins=[allowed.origin]
    )
    restoring = Chunk.objects.get(
        page__url=harbor_url("backups"), heading__endswith="Restoring"
    )
    pin_create(
        chunk=restoring,
        questions=["How do I restore a backup taken with Barman?"],
        user=None,
    )

    browser.get(f"{allowed.origin}/")
    box = browser.find_element(By.CSS_SELECTOR, ".kb-ask").shadow_root
    box.find_element(By.CSS_SELECTOR, "input").send_keys(
        "how do I restore a backup taken with barman", Keys.ENTER
    )
    item = box.find_element(By.CSS_SELECTOR, "ol.cites > li")  # waits for it
    answer = box.find_element(By.CSS_SELECTOR, ".answer").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "widget-pinned.png")

    assert answer.startswith("Restore the dump into an empty database")
    assert "Restoring" in item.text
    assert "Chosen by the documentation's editors" in item.text
