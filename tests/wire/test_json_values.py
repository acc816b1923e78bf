"""The one reading of "a string, else nothing" and "a JSON object, else nothing"."""

from __future__ import annotations

import pytest

from proxai.wire.json_values import json_object_or_none, str_or_none


@pytest.mark.parametrize("value", ["", "x"])
def test_a_string_is_itself(value: str) -> None:
    assert str_or_none(value) == value


@pytest.mark.parametrize("value", [None, 1, True, b"x", ["x"], {"x": 1}])
def test_anything_else_is_no_string(value: object) -> None:
    assert str_or_none(value) is None


def test_a_json_object_is_parsed() -> None:
    assert json_object_or_none(b' {"a": [1]} ') == {"a": [1]}
    assert json_object_or_none(bytearray(b"{}")) == {}


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", b'"s"', b"null", b"{", b"\xff"])
def test_anything_else_is_no_object(data: bytes) -> None:
    assert json_object_or_none(data) is None
