from __future__ import annotations

import pytest

from kbsite.canonical import canonical_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTPS://DOCS.EXAMPLE.COM:443/Upper#x?", "https://docs.example.com/Upper"),
        ("HTTPS://DOCS.EXAMPLE.COM/Upper", "https://docs.example.com/Upper"),
        ("https://docs.example.com/Upper", "https://docs.example.com/Upper"),
        ("http://Docs.Example.com:80/a", "http://docs.example.com/a"),
        ("https://docs.example.com/a?", "https://docs.example.com/a"),
        ("https://docs.example.com/a#section", "https://docs.example.com/a"),
        ("https://docs.example.com", "https://docs.example.com/"),
    ],
)
def test_spellings_of_one_page_become_one_url(url, expected):
    assert canonical_url(url) == expected


def test_the_path_keeps_its_case():
    assert canonical_url("https://x.example/Guide/Install.HTML") == (
        "https://x.example/Guide/Install.HTML"
    )


def test_a_port_that_is_not_the_default_stays():
    assert canonical_url("https://x.example:8443/a") == "https://x.example:8443/a"
    assert canonical_url("http://x.example:443/a") == "http://x.example:443/a"


def test_user_information_survives_dropping_the_port():
    assert canonical_url("https://u:p@X.example:443/") == "https://u:p@x.example/"


def test_tracking_parameters_are_removed_and_the_query_sorted():
    url = "https://x.example/a?utm_source=news&b=2&gclid=1&UTM_Medium=m&a=1&fbclid=9"

    assert canonical_url(url) == "https://x.example/a?a=1&b=2"


def test_a_query_of_tracking_parameters_only_goes_away():
    assert canonical_url("https://x.example/a?utm_campaign=x") == "https://x.example/a"


def test_parameters_that_only_look_like_tracking_stay():
    assert canonical_url("https://x.example/?utmost=1&gclid_x=2") == (
        "https://x.example/?gclid_x=2&utmost=1"
    )


def test_repeated_parameters_are_all_kept():
    assert canonical_url("https://x.example/?a=2&a=1") == "https://x.example/?a=1&a=2"


@pytest.mark.parametrize(
    "url", ["http://", "https://x.example:99999/", "https://x.example:abc/"]
)
def test_an_unusable_url_raises_value_error(url):
    with pytest.raises(ValueError):
        canonical_url(url)
