"""A person in a real browser (Debian's headless Chromium): log in, ask, read.

`.ci/run` installs Chromium and sets KB_REQUIRE_BROWSER=1, so CI fails rather than
skips when the browser is missing; elsewhere the test is skipped without it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from retrieval.models import QueryLog
from tests.world import harbor_load, harbor_url, ingest_markdown

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
SCREENSHOT = Path(tempfile.gettempdir()) / "kb-ask-page.png"


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
    User.objects.create_user("reader", password="a long password 1")

    browser.get(f"{live_server.url}/")
    browser.find_element(By.NAME, "username").send_keys("reader")
    browser.find_element(By.NAME, "password").send_keys("a long password 1")
    browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
    question = browser.find_element(By.NAME, "q")
    question.send_keys("How do I upgrade the database schema?")
    browser.find_element(By.CSS_SELECTOR, "form.ask button").click()

    answer = browser.find_element(By.ID, "answer")
    code = answer.find_element(By.CSS_SELECTOR, "pre code").text
    marker = answer.find_element(By.CSS_SELECTOR, "a.marker")
    sources = browser.find_elements(By.CSS_SELECTOR, "ol.citations > li > a")
    browser.save_screenshot(str(SCREENSHOT))
    assert "harbor db upgrade --to latest" in code
    assert "```" not in answer.text
    assert marker.text == "[1]" and marker.get_attribute("href").endswith("#citation-1")
    assert sources[0].get_attribute("href") == harbor_url("upgrading") + "#schema"
    assert "verified" in browser.find_element(By.CSS_SELECTOR, "ol.citations").text
    assert "q=How+do+I+upgrade" in browser.current_url, "the answer has a link"


def test_the_shared_link_shows_the_same_answer(browser, live_server):
    from selenium.webdriver.common.by import By

    harbor_load()
    User.objects.create_user("reader", password="a long password 1")
    browser.get(f"{live_server.url}/accounts/login/?next=/%3Fq%3Dpause%2Ba%2Bqueue")
    browser.find_element(By.NAME, "username").send_keys("reader")
    browser.find_element(By.NAME, "password").send_keys("a long password 1")
    browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()

    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    answer = browser.find_element(By.ID, "answer").text
    browser.find_element(By.CSS_SELECTOR, "#feedback button[value='1']").click()
    WebDriverWait(browser, 10).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "feedback"), "Thanks")
    )

    assert "harbor queue pause NAME" in answer
    assert QueryLog.objects.get(kind="query").feedback == QueryLog.Feedback.HELPFUL
