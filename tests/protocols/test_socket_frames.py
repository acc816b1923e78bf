"""The Responses WebSocket's frames as proxai relays them to and from an upstream
(:mod:`proxai.protocols.responses.socket_frames`)."""

from __future__ import annotations

import json

import orjson
import pytest

from proxai.protocols.responses.socket_frames import (
    as_sse,
    create_frame,
    event_type,
    request_error,
)
from proxai.wire.sse import SSEFramer


def test_the_create_frame_keeps_the_bodys_bytes_after_its_type() -> None:
    body = b' {"model": "gpt-5",\n "input": [{"x": 1.50}], "stream": true}'
    frame = create_frame(body)
    assert (
        frame
        == '{"type":"response.create","model": "gpt-5",\n "input": [{"x": 1.50}], "stream": true}'
    )
    assert list(json.loads(frame)) == ["type", "model", "input", "stream"]
    assert create_frame(b"{}") == '{"type":"response.create"}'
    assert create_frame(b" { } ") == '{"type":"response.create"}'


def test_a_body_with_a_type_of_its_own_gets_the_frames_type_once() -> None:
    frame = create_frame(b'{"model":"m","type":"response.create","input":"hi"}')
    assert frame == '{"type":"response.create","model":"m","input":"hi"}'


@pytest.mark.parametrize("body", [b"[1]", b'"text"', b"null"])
def test_a_body_that_is_not_an_object_is_refused(body: bytes) -> None:
    with pytest.raises(TypeError):
        create_frame(body)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (b'{"type":"response.created","sequence_number":0}', b"response.created"),
        (b'{"sequence_number":0,"type":"response.completed"}', b"response.completed"),
        (b'{ "type" : "error" }', b"error"),
        (b'{"type":"a\\"b"}', b'a"b'),
        (b'{"type":"a\\nb"}', None),  # could not be an event: line
        (b'{"type":"a\nb"}', None),
        (b'{"type":7}', None),
        (b"[]", None),
        (b"not json", None),
    ],
)
def test_the_event_type_of_a_frame(text: bytes, kind: bytes | None) -> None:
    assert event_type(text) == kind


def test_a_frame_is_one_sse_event_whose_data_is_its_text() -> None:
    """Made as a frame, never parsed: exactly the frame an SSE parser reads of its bytes."""
    text = b'{"type":"response.created","x":"\\n"}'
    made = as_sse(text, b"response.created")
    assert made.raw == b"event: response.created\ndata: " + text + b"\n\n"
    assert (made.event, made.data) == ("response.created", text)
    assert as_sse(text, None).raw == b"data: " + text + b"\n\n"
    multi = b'{\n "type": "x",\r\n "y": 1\r}'
    for kind in (b"x", None):
        made = as_sse(multi, kind)
        (frame,) = SSEFramer().feed(made.raw)
        assert frame == made
    assert frame.data is not None and json.loads(frame.data) == {"type": "x", "y": 1}
    assert frame.data == b'{\n "type": "x",\n "y": 1\n}'


def test_a_request_level_error_is_its_status_headers_and_error_body() -> None:
    frame = {
        "type": "error",
        "status": 429,
        "error": {"type": "rate_limit_error", "message": "slow"},
        "headers": {
            "Retry-After": 7,
            "x-ratelimit-remaining-requests": "0",
            "content-length": "999",  # proxai writes the body: not its length
            "connection": "close",
            "bad name": "x",
            "x-line": "a\r\nb",
            "x-flag": True,
            "x-object": {"a": 1},
        },
    }
    refused = request_error(orjson.dumps(frame))
    assert refused is not None and refused.status == 429
    assert refused.headers == [
        (b"retry-after", b"7"),
        (b"x-ratelimit-remaining-requests", b"0"),
        (b"content-type", b"application/json"),
    ]
    assert json.loads(refused.body) == {"error": frame["error"]}


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "error", "error": {"message": "mid-stream"}},  # no status: a stream event
        {"type": "error", "status": 200, "error": {}},
        {"type": "error", "status": True, "error": {}},
        {"type": "error", "status": "429", "error": {}},
        {"type": "response.failed", "status": 500},
    ],
)
def test_other_frames_are_not_request_errors(frame: dict[str, object]) -> None:
    assert request_error(orjson.dumps(frame)) is None
