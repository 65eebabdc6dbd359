"""People in a real browser (Debian's headless Chromium): a reader logs in, asks
and reads; an anonymous reader asks a public source; an editor reads a page's
changes and the dashboard, and adds a source whose first crawl is refused.

`.ci/run` installs Chromium and sets KB_REQUIRE_BROWSER=1, so CI fails rather than
skips when the browser is missing; elsewhere the test is skipped without it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from ingest.crawl.jobs import CRAWL_TASK
from ingest.delivery.models import Delivery
from retrieval.models import QueryLog
from sources.models import Page, Source
from tests.admin_world import PASSWORD, editor_create
from tests.fakes.site import FakeSite, page
from tests.world import (
    FIXTURES,
    harbor_load,
    harbor_url,
    ingest_markdown,
    run_queued,
)

UPGRADE = """# Upgrading Harbor

## Schema migrations {#schema}

Each release may change the database schema. To upgrade the database schema, run
this command once, from one machine:

```sh
harbor db upgrade --to latest
harbor db check
```

Workers refuse to start while the schema is behind the release.
"""

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots"


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("KB_REQUIRE_BROWSER"):
            pytest.fail("KB_REQUIRE_BROWSER is set but Chromium is not installed")
        pytest.skip("Chromium is not installed")
    os.environ["SE_OFFLINE"] = "true"  # Selenium must not look for drivers online
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp()
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--window-size=1100,900",
        f"--user-data-dir={profile}",
    ]:  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(10)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_a_person_logs_in_asks_and_reads_a_cited_answer(browser, live_server):
    from selenium.webdriver.common.by import By

    harbor_load()
    ingest_markdown(harbor_url("upgrading"), UPGRADE)

    reader_asks(browser, live_server, "How do I upgrade the database schema?")

    answer = browser.find_element(By.ID, "answer")
    code = answer.find_element(By.CSS_SELECTOR, "pre code").text
    marker = answer.find_element(By.CSS_SELECTOR, "a.marker")
    sources = browser.find_elements(By.CSS_SELECTOR, "ol.citations > li > a")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "ask-answer.png")
    assert "harbor db upgrade --to latest" in code
    assert "```" not in answer.text
    assert marker.text == "[1]" and marker.get_attribute("href").endswith("#citation-1")
    assert sources[0].get_attribute("href") == harbor_url("upgrading") + "#schema"
    assert "verified" in browser.find_element(By.CSS_SELECTOR, "ol.citations").text
    assert "q=How+do+I+upgrade" in browser.current_url, "the answer has a link"


def test_an_anonymous_reader_asks_a_public_source(browser, live_server, tmp_path):
    from selenium.webdriver.common.by import By

    harbor = harbor_load()
    ingest_markdown(harbor_url("upgrading"), UPGRADE)
    Source.objects.filter(pk=harbor.pk).update(public=True)
    # Open to every signed-in user, not public: never shown to this reader.
    private = Source.objects.create(
        name="Staff runbooks", seed_urls="https://runbooks.example.org/"
    )
    ingest_markdown(
        "https://runbooks.example.org/schema/",
        "# Schema upgrades\n\n## Upgrading the database schema\n\n"
        "To upgrade the database schema, page the on-call DBA first.\n",
    )

    browser.get(f"{live_server.url}/")  # no login
    menu = browser.find_element(By.NAME, "source").text
    browser.find_element(By.NAME, "q").send_keys(
        "How do I upgrade the database schema?"
    )
    browser.find_element(By.CSS_SELECTOR, "form.ask button").click()

    answer = browser.find_element(By.ID, "answer")
    code = answer.find_element(By.CSS_SELECTOR, "pre code").text
    marker = answer.find_element(By.CSS_SELECTOR, "a.marker")
    cited = browser.find_elements(By.CSS_SELECTOR, "ol.citations > li > a")
    screenshot = tmp_path / "anonymous-ask.png"
    full_page_screenshot(browser, screenshot)
    print(f"screenshot: {screenshot}")
    assert "harbor db upgrade --to latest" in code
    assert marker.get_attribute("href").endswith("#citation-1")
    assert cited[0].get_attribute("href") == harbor_url("upgrading") + "#schema"
    assert "verified" in browser.find_element(By.CSS_SELECTOR, "ol.citations").text
    assert "Harbor docs" in menu and private.name not in menu
    assert "runbooks.example.org" not in browser.page_source
    assert "on-call DBA" not in browser.page_source
    assert browser.find_element(By.LINK_TEXT, "Log in")
    assert "/accounts/login/" not in browser.current_url

    # The reader's verdict is kept, with nobody's identity.
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.find_element(By.CSS_SELECTOR, "#feedback button[value='0']").click()
    WebDriverWait(browser, 10).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "feedback"), "Thanks")
    )
    log = QueryLog.objects.get(kind="query")
    assert (log.feedback, log.user_id) == (QueryLog.Feedback.UNHELPFUL, None)


def test_the_shared_link_shows_the_same_answer(browser, live_server):
    from selenium.webdriver.common.by import By

    harbor_load()
    reader_logs_in(
        browser, f"{live_server.url}/accounts/login/?next=/%3Fq%3Dpause%2Ba%2Bqueue"
    )

    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    answer = browser.find_element(By.ID, "answer").text
    browser.find_element(By.CSS_SELECTOR, "#feedback button[value='1']").click()
    WebDriverWait(browser, 10).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "feedback"), "Thanks")
    )

    assert "harbor queue pause NAME" in answer
    assert QueryLog.objects.get(kind="query").feedback == QueryLog.Feedback.HELPFUL


def test_an_editor_reads_a_pages_diff_and_the_dashboard(browser, live_server):
    from selenium.webdriver.common.by import By

    harbor_load()
    queues = harbor_url("queues")
    text = (FIXTURES / "corpus" / "queues.md").read_text()
    edited = text.replace("starts it again.", "starts it again; jobs keep their place.")
    ingest_markdown(queues, edited)
    for name in ["install", "retries", "security"]:  # crawled again, unchanged
        ingest_markdown(
            harbor_url(name), (FIXTURES / "corpus" / f"{name}.md").read_text()
        )
    spread_over_days(Delivery.objects.order_by("pk"))
    editor_create("ed")

    browser.set_window_size(1400, 1000)
    admin_login(browser, live_server, "ed", PASSWORD)

    page = Page.objects.get(url=queues)
    browser.get(f"{live_server.url}/admin/sources/page/{page.pk}/change/")
    browser.find_element(By.CSS_SELECTOR, ".object-tools a[href$='/diff/']").click()
    marks = [m.text for m in browser.find_elements(By.CSS_SELECTOR, ".kb-added mark")]
    hunk = browser.find_element(By.CSS_SELECTOR, ".kb-hunk").text
    cost = browser.find_element(By.CSS_SELECTOR, "table.kb-chunks").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "page-diff.png")
    assert "".join(marks) == "; jobs keep their place"
    assert hunk == "in Queues › Pausing a queue"
    assert "Queues › Pausing a queue" in cost

    browser.find_element(By.CSS_SELECTOR, ".kb-nav a[href$='/dashboard/']").click()
    charts = browser.find_elements(By.CSS_SELECTOR, ".kb-dashboard svg rect")
    figures = browser.find_element(By.CSS_SELECTOR, "#tokens + .kb-figures").text
    full_page_screenshot(browser, SCREENSHOTS / "dashboard.png")
    assert charts
    assert "first crawls" in figures and "full re-embed" in figures
    assert "page-level hash gating" in figures
    assert "never verified" not in browser.find_element(By.ID, "oldest").text

    # Where the editor goes next: the source's overview and its pages.
    browser.find_element(By.CSS_SELECTOR, "#per-source + table a").click()
    overview = browser.find_element(By.CSS_SELECTOR, "fieldset").text
    full_page_screenshot(browser, SCREENSHOTS / "source-overview.png")
    assert "10 live" in overview and "Harbor docs" not in overview
    browser.find_element(By.CSS_SELECTOR, ".kb-nav a[href$='/page/']").click()
    columns = browser.find_elements(By.CSS_SELECTOR, "#result_list thead th")
    full_page_screenshot(browser, SCREENSHOTS / "pages.png")
    assert len(columns) <= 8  # the selection box and at most 7 columns


def test_an_editor_adding_a_loopback_site_reads_why_its_crawl_is_refused(
    browser, live_server, settings
):

    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = False
    site = FakeSite()
    with site:
        site.add("/docs/", page("Docs", "Welcome."))
        warning, crawl, error = editor_adds_a_source(browser, live_server, site)

    assert "127.0.0.1, a loopback address" in warning
    assert "set CRAWL_ALLOW_PRIVATE_ADDRESSES=true" in warning
    assert "Failed" in crawl
    assert "fetched 0 of 1 · 1 skipped or failed · indexed 0 · 0 left" in crawl
    assert site.url("/docs/") in error
    assert "a loopback address; set CRAWL_ALLOW_PRIVATE_ADDRESSES=true" in error
    assert site.paths() == [], "the guard refused before any request"


def editor_adds_a_source(browser, live_server, site) -> tuple[str, str, str]:
    """An editor adds a source of the site in the admin; then the worker runs its
    crawl. Returns the warning on the page after the save, and the source's crawl
    and last error once the crawl ran."""
    from selenium.webdriver.common.by import By

    source = editor_adds_local_docs(browser, live_server, site.url("/docs/"))
    warning = browser.find_element(By.CSS_SELECTOR, ".messagelist .warning").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "refused-crawl.png")
    assert browser.current_url.endswith(f"/admin/sources/source/{source.pk}/change/")
    assert warning.startswith("The crawl of Local docs can fetch none of its seeds")

    for _ in range(3):
        run_queued(CRAWL_TASK)
    browser.refresh()
    crawl = browser.find_element(By.CSS_SELECTOR, ".field-crawl_overview").text
    error = browser.find_element(By.CSS_SELECTOR, ".field-last_error").text
    full_page_screenshot(browser, SCREENSHOTS / "refused-crawl-overview.png")
    return warning, crawl, error


def test_a_first_crawl_indexing_when_a_recrawl_is_due_shows_one_true_progress(
    browser, live_server, settings
):
    """The seed asked for redirects, so its page waits, pending and due, until the
    crawl's deliveries are read: the planner runs meanwhile and queues nothing,
    and the overview and the Crawls list say the crawl is indexing."""
    from selenium.webdriver.common.by import By

    from ingest.crawl.models import Crawl
    from ingest.delivery.queue import TASK as DELIVERY_TASK
    from ingest.planning.recrawl import recrawl_due

    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = True
    site = FakeSite()
    with site:
        site.redirect("/docs", "/docs/")
        site.add("/docs/", page("Docs", "Welcome.", ["a.html", "b.html"]))
        site.add("/docs/a.html", page("A", "Page A."))
        site.add("/docs/b.html", page("B", "Page B."))
        source = editor_adds_local_docs(browser, live_server, site.url("/docs"))
        for _ in range(10):  # fetched; the deliveries wait for a worker
            run_queued(CRAWL_TASK)

        plan = recrawl_due()

        browser.get(f"{live_server.url}/admin/sources/source/{source.pk}/change/")
        overview = browser.find_element(By.CSS_SELECTOR, ".field-crawl_overview").text
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        full_page_screenshot(browser, SCREENSHOTS / "crawl-indexing-overview.png")
        browser.get(f"{live_server.url}/admin/ingest/crawl/")
        row = browser.find_element(By.CSS_SELECTOR, "#result_list tbody tr").text
        full_page_screenshot(browser, SCREENSHOTS / "crawl-indexing-list.png")
        run_queued(DELIVERY_TASK)
        browser.get(f"{live_server.url}/admin/sources/source/{source.pk}/change/")
        done = browser.find_element(By.CSS_SELECTOR, ".field-crawl_overview").text

    assert plan.indexing >= 1 and plan.fetching == 0, str(plan)
    assert Crawl.objects.filter(source=source).count() == 1
    assert "Indexing" in overview and "indexed 0 · 3 left" in overview, overview
    assert overview.count("crawl of Local docs") == 1, "one crawl, no other queued"
    assert "Indexing" in row and "indexing…" in row, row
    assert "Done" in done and "indexed 3 · 0 left" in done, done


# Harbor's command-line reference: options as definition terms.
HARBOR_CLI = """# harbor-build

## Options {#options}

###### `-j N`

Distribute the import over N worker processes, to make imports on machines with
many cores finish sooner.

###### `-q`

Do not print progress on standard output; only warnings and errors go to standard
error.

###### `--strict`

Turn warnings into errors: the import stops at the first warning and harbor-build
exits with status 1.

###### `--keep-going`

With --strict, go on to the end of the import before exiting.
"""


def test_a_question_in_a_users_words_is_answered_by_the_option_it_means(
    browser, live_server, settings
):
    """With the local model, the answer quotes the entry nearest the question in
    meaning, not the first entry that shares a word with it."""
    from selenium.webdriver.common.by import By

    harbor_load()
    ingest_markdown(harbor_url("harbor-build"), HARBOR_CLI)
    local_model_serves(settings)

    reader_asks(
        browser,
        live_server,
        "How can I make my nightly import job fail whenever there is a warning?",
    )

    answer = browser.find_element(By.ID, "answer").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "ask-by-meaning.png")
    assert answer.startswith("--strict [1]\nTurn warnings into errors"), answer


def test_a_question_about_a_product_the_docs_never_name_says_so(browser, live_server):
    from selenium.webdriver.common.by import By

    harbor_load()
    reader_asks(
        browser, live_server, "How do I restore a Harbor backup taken with Barman?"
    )

    answer = browser.find_element(By.CSS_SELECTOR, "#answer.abstained").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "ask-never-named.png")
    assert answer == (
        "The documentation searched never mentions Barman, so it cannot answer "
        "this question."
    )
    assert not browser.find_elements(By.CSS_SELECTOR, "ol.citations")


# Readers of the Harbor docs asking, in their own words, what the docs never say.
UNANSWERED = [
    "How do I restore a backup taken with Barman?",
    "How do I restore a backup taken with Barman?",
    "Can Harbor restore Barman backups?",
    "How to recover the database from a Barman backup",
    "How do I sign in to Harbor with Okta?",
]


def test_a_docs_owner_sees_alike_unanswered_questions_as_one_group(
    browser, live_server, settings
):
    from selenium.webdriver.common.by import By

    from retrieval.questions import query_feedback_record, question_answer

    harbor_load()
    # The default model, as a docs owner runs it: rewordings are alike in it.
    local_model_serves(settings)
    reader = User.objects.create_user("margherita.rossi@example.org")
    for question in UNANSWERED:
        assert question_answer(question=question, user=reader, k=5).abstained
    useless = question_answer(question="How do I pause a queue?", user=reader, k=5)
    query_feedback_record(log_id=useless.log_id, user=reader, helpful=False)
    for number in range(30):  # a list as long as a docs owner's
        question_answer(
            question=f"How do I retry job number {number} when a worker stops "
            "halfway through a long import that touches many queues?",
            user=reader, k=5,
        )  # fmt: skip
    editor_create("ed")

    browser.set_window_size(1400, 1000)
    admin_login(browser, live_server, "ed", PASSWORD)
    browser.get(f"{live_server.url}/admin/retrieval/querylog/")
    results = browser.find_element(By.CSS_SELECTOR, "#changelist-form .results")
    overflow = browser.execute_script(
        "return [arguments[0].scrollWidth, arguments[0].clientWidth,"
        " document.documentElement.scrollWidth, window.innerWidth]",
        results,
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "query-logs.png")
    assert overflow[0] <= overflow[1], f"the list is clipped: {overflow}"
    assert overflow[2] <= overflow[3], f"the page scrolls sideways: {overflow}"
    assert "Answered from 1 chunk\n5 retrieved" in results.text

    questions = browser.find_element(By.CSS_SELECTOR, "a[href$='/questions/']")
    questions.click()
    section = browser.find_element(By.CSS_SELECTOR, "#concern-unanswered + p")
    first = browser.find_element(By.CSS_SELECTOR, ".kb-groups tbody tr")
    count = first.find_element(By.CSS_SELECTOR, "td.num").text
    examples = [
        li.text for li in first.find_elements(By.CSS_SELECTOR, ".kb-examples li")
    ]
    near = first.find_element(By.CSS_SELECTOR, ".kb-near").text
    path = SCREENSHOTS / "questions.png"
    full_page_screenshot(browser, path)
    print(f"screenshot: {path}")
    assert section.text.startswith("5 asked: 4 different questions in 2 groups")
    assert count == "4"
    assert examples[0] == "How do I restore a backup taken with Barman? × 2"
    assert set(examples[1:]) == {
        "Can Harbor restore Barman backups?",
        "How to recover the database from a Barman backup",
    }
    assert near.startswith("Backups")
    not_useful = browser.find_element(By.CSS_SELECTOR, "#concern-not_useful ~ table")
    assert "How do I pause a queue?" in not_useful.text


def test_a_docs_owner_pins_the_section_that_answers_a_group_and_readers_get_it(
    browser, live_server, settings
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from retrieval.questions import question_answer

    harbor_load()
    local_model_serves(settings)
    reader = User.objects.create_user("margherita.rossi@example.org")
    for question in UNANSWERED[:4]:
        assert question_answer(question=question, user=reader, k=5).abstained
    editor_create("ed")

    browser.set_window_size(1400, 1000)
    admin_login(browser, live_server, "ed", PASSWORD)
    browser.get(f"{live_server.url}/admin/retrieval/querylog/questions/")
    browser.find_element(By.CSS_SELECTOR, ".kb-groups a.kb-answer-with").click()
    asked = browser.find_element(By.ID, "pin-questions").text
    search = browser.find_element(By.ID, "pin-q")
    search.clear()
    search.send_keys("restore the dump")
    search.submit()
    WebDriverWait(browser, 10).until(lambda b: "q=restore" in b.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#pin-sections tbody tr")
    restoring = next(row for row in rows if "Backups › Restoring" in row.text)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "pin-answer-this-with.png")
    restoring.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: "/retrieval/pin/" in b.current_url)
    WebDriverWait(browser, 10).until(lambda b: "/answer/" not in b.current_url)
    pinned = browser.find_element(By.ID, "content-main").text
    full_page_screenshot(browser, SCREENSHOTS / "pin-admin.png")
    assert asked.splitlines()[0] == "How do I restore a backup taken with Barman?"
    assert "Answering" in pinned and "Can Harbor restore Barman backups?" in pinned

    browser.delete_all_cookies()
    reader_asks(browser, live_server, "how can I restore a barman backup")
    answer = browser.find_element(By.ID, "answer").text
    first = browser.find_element(By.CSS_SELECTOR, "ol.citations > li").text
    full_page_screenshot(browser, SCREENSHOTS / "ask-pinned.png")
    assert "Restore the dump into an empty database" in answer
    assert first.startswith("Backups") and "› Restoring" in first
    assert "Chosen by the documentation's editors" in first


def test_an_answer_kept_says_when_its_source_changed_it(browser, live_server):
    from selenium.webdriver.common.by import By

    from retrieval.rechecks import answers_recheck

    harbor_load()
    reader_asks(browser, live_server, "How do I pause a queue?")
    browser.find_element(By.ID, "permalink").click()
    kept = browser.current_url
    before = browser.find_element(By.ID, "status").text
    marker = browser.find_element(By.CSS_SELECTOR, "#answer a.marker")
    listed = browser.find_element(By.CSS_SELECTOR, "ol.citations > li > a")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "answer-kept.png")
    assert before.startswith("Still current: none of the text it quoted has changed")
    assert marker.get_attribute("href").endswith("#citation-1")
    assert listed.get_attribute("href") == harbor_url("queues")
    queues_edited()
    answers_recheck()

    browser.get(kept)
    status = browser.find_element(By.ID, "status").text
    current = browser.find_element(By.ID, "current").text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "answer-changed.png")
    assert status.startswith("This answer changed on")
    assert "1 line changed in Queues" in status
    assert "any new job" in current
    assert "any new job" not in browser.find_element(By.ID, "answer").text


def test_an_anonymous_feed_reader_follows_an_entry_to_what_changed(
    browser, live_server
):
    import feedparser
    from selenium.webdriver.common.by import By

    harbor = harbor_load()
    Source.objects.filter(pk=harbor.pk).update(public=True)
    queues_edited()
    # The feed reader fetches the feed, anonymously; its reader opens an entry.
    with urllib.request.urlopen(f"{live_server.url}/feeds/changes.atom") as answer:
        feed = feedparser.parse(answer.read())
    entry = next(e for e in feed.entries if "1 line changed" in e.title)

    browser.get(entry.link)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "feed-change.png")
    assert "/admin/" not in browser.current_url
    diff = browser.find_element(By.ID, "diff").text
    assert "any new job" in diff and "in Queues" in diff
    assert browser.find_elements(By.ID, "admin-diff") == []


def test_a_built_in_crawler_source_without_a_contact_url_reads_it_as_advice(
    browser, live_server, settings
):
    from selenium.webdriver.common.by import By

    settings.CRAWL_CONTACT_URL = ""
    source = Source.objects.create(
        name="Local docs", seed_urls="https://docs.example.com/guide/"
    )
    editor_create("ed")
    browser.set_window_size(1400, 1000)
    admin_login(browser, live_server, "ed", PASSWORD)

    browser.get(f"{live_server.url}/admin/sources/source/{source.pk}/change/")

    line = browser.find_element(By.CSS_SELECTOR, ".field-fetcher_status .readonly")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / "source-advice.png")
    assert line.find_elements(By.CSS_SELECTOR, ".kb-warning") == []
    assert "Complete." in line.text and "Advice: set CRAWL_CONTACT_URL" in line.text


def queues_edited() -> None:
    """Harbor's Queues page crawled again with one line changed."""
    queues = (FIXTURES / "corpus" / "queues.md").read_text()
    ingest_markdown(
        harbor_url("queues"),
        queues.replace("stops workers from taking new jobs",
                       "stops workers from taking any new job"),
    )  # fmt: skip


def reader_logs_in(browser, url: str) -> None:
    """A reader account made, and logged in at ``url`` (a page that asks for it)."""
    from selenium.webdriver.common.by import By

    User.objects.create_user("reader", password="a long password 1")
    browser.get(url)
    browser.find_element(By.NAME, "username").send_keys("reader")
    browser.find_element(By.NAME, "password").send_keys("a long password 1")
    browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
    _left_login(browser)


def editor_adds_local_docs(browser, live_server, seed: str) -> Source:
    """An editor logs in and adds the source "Local docs" of ``seed`` in the
    admin (which starts its first crawl); the source once saved."""
    from selenium.webdriver.common.by import By

    editor_create("ed")
    browser.set_window_size(1400, 1000)
    admin_login(browser, live_server, "ed", PASSWORD)
    browser.get(f"{live_server.url}/admin/sources/source/add/")
    browser.find_element(By.NAME, "name").send_keys("Local docs")
    browser.find_element(By.NAME, "seed_urls").send_keys(seed)
    browser.find_element(By.NAME, "_save").click()
    _left_page(browser, "/add/")
    return Source.objects.get(name="Local docs")


def admin_login(browser, live_server, username: str, password: str) -> None:
    """Log in to the admin and wait for the page after it: a page asked for while
    the login's answer is still on its way is sent to the login form again."""
    from selenium.webdriver.common.by import By

    browser.get(f"{live_server.url}/admin/")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    _left_login(browser)


def _left_login(browser) -> None:
    _left_page(browser, "/login/")


def _left_page(browser, path: str) -> None:
    """Wait until the browser is past the page at ``path``: the answer to what
    it submitted there has come (the rows it wrote are there to read)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(lambda b: path not in b.current_url)


def local_model_serves(settings) -> None:
    """The index moved to the default local model, with the floor it learns."""
    from retrieval.embeddings import get_embedder
    from retrieval.reembed import index_rebuild

    settings.EMBEDDING_BACKEND = "local"
    settings.EMBEDDING_MODEL = "all-MiniLM-L6-v2"
    settings.EMBEDDING_DIMENSIONS = 384
    settings.RELEVANCE_FLOOR = None
    list(index_rebuild(target=get_embedder()))


def reader_asks(browser, live_server, question: str) -> None:
    """A reader logs in on the Ask page and asks ``question``."""
    from selenium.webdriver.common.by import By

    reader_logs_in(browser, f"{live_server.url}/")
    browser.find_element(By.NAME, "q").send_keys(question)
    browser.find_element(By.CSS_SELECTOR, "form.ask button").click()


def spread_over_days(deliveries) -> None:
    """Deliveries made now, moved back over the past days (one day per step of
    five), so that the dashboard shows days rather than one bar."""
    now = timezone.now()
    for number, delivery in enumerate(reversed(list(deliveries))):
        delivery.received_at = now - timedelta(days=number // 3)
        delivery.save(update_fields=["received_at"])


def full_page_screenshot(browser, path: Path) -> None:
    """The whole page, not only the window: the window grows to the page's height."""
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, max(1000, height + 120))
    browser.save_screenshot(str(path))
    browser.set_window_size(1400, 1000)
