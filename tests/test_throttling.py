"""The API throttle: at most N requests of a caller in any period, counted in the
shared database, answered 429 with the wait."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kbsite.models import ThrottleWindow
from kbsite.throttling import SharedRateThrottle, request_count
from tests.conftest import at_once


@pytest.mark.django_db
def test_requests_beyond_the_limit_wait_until_the_oldest_ages_out():
    counted = [request_count("k", now=t, period=60, limit=3) for t in (0, 10, 20)]

    assert counted == [None, None, None]
    assert request_count("k", now=30, period=60, limit=3) == 30  # 0 + 60 - 30
    assert request_count("k", now=59.5, period=60, limit=3) == 0.5
    assert request_count("k", now=60, period=60, limit=3) is None, "0 aged out"
    assert request_count("k", now=61, period=60, limit=3) == 9  # 10 + 60 - 61


@pytest.mark.django_db
def test_a_refused_request_is_not_counted_and_old_ones_are_dropped():
    for t in (0, 1):
        request_count("k", now=t, period=10, limit=2)
    for t in (2, 3, 4):
        assert request_count("k", now=t, period=10, limit=2) is not None

    assert request_count("k", now=10.5, period=10, limit=2) is None
    assert ThrottleWindow.objects.get(key="k").hits == [1.0, 10.5]


@pytest.mark.django_db
def test_a_lowered_limit_waits_for_enough_requests_to_age_out():
    for t in (0, 10, 20):
        request_count("k", now=t, period=60, limit=3)

    # Two of the three must age out before one more fits under two.
    assert request_count("k", now=30, period=60, limit=2) == 40  # 10 + 60 - 30


@pytest.mark.django_db
def test_a_limit_of_zero_refuses_every_request():
    assert request_count("k", now=0, period=60, limit=0) == 60
    assert not ThrottleWindow.objects.exists()


@pytest.mark.django_db
def test_callers_and_scopes_are_counted_apart():
    assert request_count("a", now=0, period=60, limit=1) is None
    assert request_count("b", now=0, period=60, limit=1) is None
    assert request_count("a", now=1, period=60, limit=1) == 59


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_of_one_caller_are_counted_one_by_one():
    results = at_once(
        lambda: request_count("busy", now=100.0, period=60, limit=5), times=8
    )

    assert sorted(results, key=lambda r: r is not None) == [None] * 5 + [60.0] * 3


@pytest.mark.django_db
def test_the_api_answers_429_with_the_wait_as_json():
    token = Token.objects.create(user=User.objects.create_user("hasty"))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    rates = {**SharedRateThrottle.THROTTLE_RATES, "search": "2/min"}

    with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
        statuses = [api.get("/api/search/", {"q": "x"}).status_code for _ in range(2)]
        refused = api.get("/api/search/", {"q": "x"})
        # Another scope has its own count.
        asked = api.post("/api/query/", {"question": "x"}, format="json")

    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]
    assert 0 < int(refused["Retry-After"]) <= 60
    assert asked.status_code == 200
