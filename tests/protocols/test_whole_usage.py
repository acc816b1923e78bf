"""The ``usage`` of a whole JSON answer, read from its bytes in any pieces: the same
object a JSON parser finds at the top level, never one nested deeper or quoted."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.protocols.whole_usage import MAX_USAGE_BYTES, WholeUsage, is_json_body

USAGE = {"input_tokens": 300, "output_tokens": 100, "details": {"cached": [1, 2]}}

BODIES: list[dict[str, Any]] = [
    # Responses: instructions and output before usage, a "usage" inside an item
    {
        "id": "resp_1",
        "instructions": 'say "usage": {x} \\ [not] , here',
        "output": [{"type": "message", "usage": {"input_tokens": 9}, "text": "usage"}],
        "usage": USAGE,
        "metadata": {"usage": "no"},
    },
    # Chat: usage last, a value that spells the key
    {"id": "c", "object": "usage", "choices": [], "usage": USAGE},
    # Messages: usage first
    {"usage": USAGE, "content": [{"type": "text", "text": "}}}]]]"}]},
    # none, or not an object
    {"id": "x", "output": []},
    {"usage": None, "id": "n"},
    {"usage": [1, 2], "id": "n"},
    # a key that only starts like it, and an escaped one
    {"usages": USAGE, "usag": 1, "\\usage": 2},
]


def scanned(data: bytes, cuts: list[int]) -> dict[str, Any] | None:
    scanner = WholeUsage("usage")
    at = 0
    for cut in [*sorted(cuts), len(data)]:
        scanner.feed(data[at:cut])
        at = max(at, cut)
    return scanner.usage


def expected(body: dict[str, Any]) -> dict[str, Any] | None:
    usage = body.get("usage")
    return usage if isinstance(usage, dict) else None


def test_every_split_of_each_body_finds_the_top_level_usage() -> None:
    for body in BODIES:
        for indent in (None, 2):
            data = json.dumps(body, indent=indent, ensure_ascii=False).encode()
            want = expected(body)
            for cut in range(len(data) + 1):
                assert scanned(data, [cut]) == want, (data, cut)
            assert scanned(data, list(range(len(data)))) == want  # byte by byte


def test_a_usage_larger_than_the_bound_is_not_kept() -> None:
    data = orjson.dumps({"usage": {"x": "y" * MAX_USAGE_BYTES}, "id": "big"})
    assert scanned(data, [100, 5000]) is None
    # ...and the scan goes on: a usage after it is found.
    data = orjson.dumps({"usage": {"x": "y" * MAX_USAGE_BYTES}, "more": 1})[:-1] + (
        b',"usage":{"total_tokens":5}}'
    )
    assert scanned(data, [7]) == {"total_tokens": 5}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='usage"\\{}[]:, \n\u00e9'),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["usage", "u", "usag", "x", 'us"age']), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(st.sampled_from(["usage", "id", "output", "a"]), JSON, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_any_body_in_any_pieces_agrees_with_a_parser(body: dict[str, Any], cuts: list[int]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    assert scanned(data, [c for c in cuts if c <= len(data)]) == expected(body)


def test_only_2xx_json_bodies_are_scanned() -> None:
    json_head = [(b"content-type", b"application/json; charset=utf-8")]
    assert is_json_body(200, json_head)
    assert is_json_body(200, [(b"Content-Type", b"application/problem+json")])
    assert not is_json_body(429, json_head)
    assert not is_json_body(200, [(b"content-type", b"audio/mpeg")])
    assert not is_json_body(200, [])


def test_the_key_is_the_rows_not_a_guess() -> None:
    """An API whose whole answers keep their usage under another key (Gemini's
    ``usageMetadata``) is read by that key, and a ``usage`` beside it is not."""
    scanner = WholeUsage("usageMetadata")
    body = b'{"usage": {"x": 1}, "usageMetadata": {"promptTokenCount": 3}}'
    for at in range(0, len(body), 5):
        scanner.feed(body[at : at + 5])
    assert scanner.usage == {"promptTokenCount": 3}
