from __future__ import annotations

import json

import pytest

from kbsite import boundedjson


def test_it_parses_json_within_the_bound():
    text = json.dumps({"a": [{"b": [1, 2]}], "c": "[[[[ in a string ]]]]"})

    assert boundedjson.loads(text, max_depth=4) == json.loads(text)


def test_nesting_past_the_bound_is_refused():
    with pytest.raises(boundedjson.TooDeep):
        boundedjson.loads('{"a": [{"b": [1]}]}', max_depth=3)


def test_nesting_past_the_interpreters_limit_is_refused_not_a_recursion_error():
    with pytest.raises(boundedjson.TooDeep):
        boundedjson.loads('{"a":' * 100_000)


def test_too_deep_is_a_value_error_like_any_bad_json():
    assert issubclass(boundedjson.TooDeep, ValueError)


def test_a_wide_document_is_not_deep():
    boundedjson.check_depth([[1]] * 10_000, max_depth=2)
