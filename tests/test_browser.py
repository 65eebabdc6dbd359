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

from tests.world import harbor_load, harbor_url

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
    User.objects.create_user("reader", password="a long password 1")

    browser.get(f"{live_server.url}/")
    browser.find_element(By.NAME, "username").send_keys("reader")
    browser.find_element(By.NAME, "password").send_keys("a long password 1")
    browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
    question = browser.find_element(By.NAME, "question")
    question.send_keys("How do I pause a queue?")
    browser.find_element(By.CSS_SELECTOR, "form.ask button").click()

    answer = browser.find_element(By.ID, "answer").text
    sources = browser.find_elements(By.CSS_SELECTOR, "ol.citations li a")
    browser.save_screenshot(str(SCREENSHOT))
    assert "harbor queue pause NAME" in answer and "[1]" in answer
    assert sources[0].get_attribute("href") == harbor_url("queues")
    assert "verified" in browser.find_element(By.CSS_SELECTOR, "ol.citations").text
