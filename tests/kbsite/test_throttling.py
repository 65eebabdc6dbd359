"""The API throttle: at most N requests of a caller in any period, counted in the
shared database, answered 429 with the wait; anonymous readers per address (as
far as the trusted proxies say), kept only as a keyed hash, for a day."""

from __future__ import annotations

import re
import time
from unittest.mock import patch

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kbsite.models import ThrottleWindow
from kbsite.throttling import (
    LONGEST_PERIOD,
    SharedRateThrottle,
    address_key,
    request_count,
    throttle_windows_sweep,
)
from sources.models import Source
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


def _rates(**rates: str) -> dict[str, str]:
    return {**SharedRateThrottle.THROTTLE_RATES, **rates}


def test_an_address_is_counted_as_a_keyed_hash_and_ipv6_by_its_64():
    keys = {
        address: address_key(address)
        for address in ["203.0.113.7", "::ffff:203.0.113.7", "2001:db8:1:2::5",
                        "2001:db8:1:2:ffff::9", "2001:db8:1:3::5", None]
    }  # fmt: skip

    assert keys["203.0.113.7"] == keys["::ffff:203.0.113.7"]
    assert keys["2001:db8:1:2::5"] == keys["2001:db8:1:2:ffff::9"], "one /64"
    assert keys["2001:db8:1:2::5"] != keys["2001:db8:1:3::5"]
    # Only the hash is kept: no address as written ("203.0.113.7", "2001:db8:…")
    # fits in hex digits. (Testing for "203" in the hex itself failed by chance.)
    assert all(re.fullmatch(r"a[0-9a-f]{32}", key) for key in keys.values())
    with override_settings(SECRET_KEY="another site's key"):
        assert address_key("203.0.113.7") != keys["203.0.113.7"]


@pytest.mark.django_db
def test_anonymous_readers_are_counted_per_address_at_their_own_rate():
    Source.objects.create(name="Public docs", public=True)
    token = Token.objects.create(user=User.objects.create_user("app"))
    signed_in = APIClient()
    signed_in.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    first, second = (
        APIClient(REMOTE_ADDR="198.51.100.1"),
        APIClient(REMOTE_ADDR="198.51.100.2"),
    )
    rates = _rates(query="5/min", anon_query="2/min")

    with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
        ask = {"question": "x"}
        statuses = [
            first.post("/api/query/", ask, format="json").status_code for _ in range(2)
        ]
        refused = first.post("/api/query/", ask, format="json")
        other_address = second.post("/api/query/", ask, format="json").status_code
        users = [
            signed_in.post("/api/query/", ask, format="json").status_code
            for _ in range(3)
        ]

    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    assert other_address == 200
    assert users == [200, 200, 200], "a signed-in caller's rate is theirs"
    keys = list(ThrottleWindow.objects.values_list("key", flat=True))
    assert not [key for key in keys if "198.51.100" in key], "no address is stored"
    assert sum(key.startswith("throttle_anon_query_") for key in keys) == 2


@pytest.mark.django_db
def test_x_forwarded_for_counts_only_as_far_as_num_proxies_says():
    Source.objects.create(name="Public docs", public=True)
    rates = _rates(anon_search="1/min")

    def statuses() -> list[int]:
        ThrottleWindow.objects.all().delete()
        client = APIClient(REMOTE_ADDR="10.0.0.1")  # the proxy
        return [
            client.get(
                "/api/search/", {"q": "x"}, HTTP_X_FORWARDED_FOR=forwarded
            ).status_code
            for forwarded in ["203.0.113.1", "203.0.113.2, 203.0.113.1"]
        ]

    with patch.object(SharedRateThrottle, "THROTTLE_RATES", rates):
        # Unset: the header is not trusted, and both come from the proxy.
        assert statuses() == [200, 429]
        with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK,
                                                "NUM_PROXIES": 1}):  # fmt: skip
            # One proxy: the address it added, whatever the client wrote before.
            assert statuses() == [200, 429]
            ThrottleWindow.objects.all().delete()
            client = APIClient(REMOTE_ADDR="10.0.0.1")
            assert [
                client.get("/api/search/", {"q": "x"},
                           HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
                for n in (1, 2)
            ] == [200, 200], "two readers behind one proxy"  # fmt: skip


@pytest.mark.django_db
def test_idle_callers_are_forgotten_after_a_day():
    now = time.time()
    request_count("recent", now=now - 3600, period=60, limit=5)
    request_count("idle", now=now - LONGEST_PERIOD - 1, period=60, limit=5)

    assert throttle_windows_sweep() == "1 idle throttle windows forgotten"
    assert list(ThrottleWindow.objects.values_list("key", flat=True)) == ["recent"]
