"""The WebSocket mode's client side, sans-io: frames read, the socket's conversation
(what a turn is sent as, for each kind of upstream), its bound, the record of a
response's events, warm-ups and error frames."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxai.errors import ProxyError
from proxai.protocols.responses.history import expand
from proxai.protocols.responses.record import ResponseRecord
from proxai.protocols.responses.socket import (
    Conversation,
    error_frame,
    read_frame,
    warm_up_events,
)
from proxai.testing.seed import TURN1_EVENTS
from proxai.testing.work import kept_by

USER = {"type": "message", "role": "user", "content": "hi"}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "42"}


def events(
    response_id: str, items: list[dict[str, Any]], end: str = "response.completed"
) -> list[bytes]:
    created = {"type": "response.created", "response": {"id": response_id, "output": []}}
    done = [
        {"type": "response.output_item.done", "output_index": i, "item": it}
        for i, it in enumerate(items)
    ]
    # The terminal's output left empty, as the seed's is: the state comes from the items.
    terminal = {"type": end, "response": {"id": response_id, "output": []}}
    return [orjson.dumps(e) for e in (created, *done, terminal)]


def run(
    conversation: Conversation,
    frame: dict[str, Any],
    record_events: list[bytes],
    *,
    keeps_state: bool,
) -> dict[str, Any]:
    turn = conversation.turn(frame, upstream_keeps_state=keeps_state)
    record = ResponseRecord(conversation.max_bytes)
    for data in record_events:
        record.event(data)
    conversation.keep(turn, record)
    body: dict[str, Any] = orjson.loads(turn.body)
    return body


def test_read_frame_takes_response_create_and_drops_processed() -> None:
    assert read_frame('{"type": "response.create", "model": "m"}') == {
        "type": "response.create",
        "model": "m",
    }
    assert read_frame('{"type": "response.processed", "response_id": "r"}') is None


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ("{", None),
        ("[]", None),
        ('{"type": "session.update"}', "type"),
        ('{"type": "response.create", "background": true}', "background"),
    ],
)
def test_read_frame_refuses_with_a_400(text: str, param: str | None) -> None:
    with pytest.raises(ProxyError) as refused:
        read_frame(text)
    assert refused.value.status == 400 and refused.value.param == param


def test_a_chained_turn_is_expanded_over_an_upstream_without_state() -> None:
    conversation = Conversation(1 << 20)
    first = run(
        conversation,
        {"type": "response.create", "input": [USER], "client_metadata": {}, "generate": True},
        events("resp_a", [CALL]),
        keeps_state=False,
    )
    assert first["stream"] is True and {"type", "client_metadata", "generate"}.isdisjoint(first)
    second = run(
        conversation,
        {"type": "response.create", "previous_response_id": "resp_a", "input": [OUTPUT]},
        events("resp_b", []),
        keeps_state=False,
    )
    assert "previous_response_id" not in second
    assert second["input"] == [USER, CALL, OUTPUT]


def test_a_stored_turn_is_named_to_an_upstream_with_state_and_an_unstored_one_expanded() -> None:
    conversation = Conversation(1 << 20)
    run(
        conversation,
        {"type": "response.create", "input": [USER]},
        events("resp_a", [CALL]),
        keeps_state=True,
    )
    named = run(
        conversation,
        {
            "type": "response.create",
            "previous_response_id": "resp_a",
            "input": [OUTPUT],
            "store": False,
        },
        events("resp_b", [CALL]),
        keeps_state=True,
    )
    assert named["previous_response_id"] == "resp_a" and named["input"] == [OUTPUT]
    # resp_b was store: false: OpenAI keeps it only for the socket; proxai expands it,
    # anchored on resp_a, which the upstream has.
    expanded = run(
        conversation,
        {"type": "response.create", "previous_response_id": "resp_b", "input": [OUTPUT]},
        events("resp_c", []),
        keeps_state=True,
    )
    assert expanded["previous_response_id"] == "resp_a"
    assert expanded["input"] == [OUTPUT, CALL, OUTPUT]


def test_an_unknown_previous_response_is_400_unless_the_upstream_may_have_it() -> None:
    frame = {"type": "response.create", "previous_response_id": "resp_x", "input": []}
    with pytest.raises(ProxyError) as refused:
        Conversation(1000).turn(frame, upstream_keeps_state=False)
    assert refused.value.code == "previous_response_not_found"
    with pytest.raises(ProxyError):
        Conversation(1000).turn({**frame, "store": False}, upstream_keeps_state=True)
    turn = Conversation(1000).turn(frame, upstream_keeps_state=True)
    assert orjson.loads(turn.body)["previous_response_id"] == "resp_x"


def test_a_failed_response_leaves_the_state_as_it_was() -> None:
    conversation = Conversation(1 << 20)
    run(
        conversation,
        {"type": "response.create", "input": [USER]},
        events("resp_a", [CALL]),
        keeps_state=False,
    )
    run(
        conversation,
        {"type": "response.create", "previous_response_id": "resp_a", "input": [OUTPUT]},
        events("resp_b", [], "response.failed"),
        keeps_state=False,
    )
    assert conversation.last_id == "resp_a"


def test_the_state_is_bounded_and_a_turn_naming_what_was_too_large_is_told_so() -> None:
    conversation = Conversation(200)
    big = {"type": "message", "role": "user", "content": "x" * 500}
    run(
        conversation,
        {"type": "response.create", "input": [big]},
        events("resp_a", [CALL]),
        keeps_state=False,
    )
    assert conversation.size == 0 and conversation.items == ()
    with pytest.raises(ProxyError) as refused:
        conversation.turn(
            {"type": "response.create", "previous_response_id": "resp_a", "input": []},
            upstream_keeps_state=False,
        )
    assert "websocket_max_state_bytes" in refused.value.message


def test_an_output_past_the_bound_is_not_held_while_it_streams() -> None:
    record = ResponseRecord(1000)
    for data in events("resp_a", [dict(CALL, arguments="y" * 300)] * 10):
        record.event(data)
    assert record.overflowed and record.items == [] and record.terminal == "response.completed"


def test_a_hundred_thousand_items_are_kept_and_expanded_once_each() -> None:
    conversation = Conversation(64 << 20)
    many = [{"type": "message", "role": "user", "content": str(i)} for i in range(100_000)]
    run(
        conversation,
        {"type": "response.create", "input": many},
        events("resp_a", []),
        keeps_state=False,
    )
    body = run(
        conversation,
        {"type": "response.create", "previous_response_id": "resp_a", "input": [USER]},
        events("resp_b", []),
        keeps_state=False,
    )
    assert len(body["input"]) == 100_001 and body["input"][-1] == USER


def test_types_quoted_inside_strings_do_not_count() -> None:
    record = ResponseRecord(1 << 20)
    record.event(
        orjson.dumps({"type": "response.output_text.delta", "delta": '"response.completed"'})
    )
    record.event(
        orjson.dumps(
            {"type": "response.output_text.delta", "delta": "x", "m": "response.completed"}
        )
    )
    assert record.terminal is None


@given(st.lists(st.text(max_size=20), max_size=20))
def test_kept_items_are_the_input_then_the_output_in_order(texts: list[str]) -> None:
    conversation = Conversation(1 << 20)
    inputs = [{"type": "message", "role": "user", "content": t} for t in texts]
    outputs = [dict(CALL, id=f"fc_{i}") for i in range(len(texts))]
    run(
        conversation,
        {"type": "response.create", "input": inputs},
        events("resp_a", outputs),
        keeps_state=False,
    )
    body = run(
        conversation,
        {"type": "response.create", "previous_response_id": "resp_a", "input": []},
        events("resp_b", []),
        keeps_state=False,
    )
    assert body["input"] == [*inputs, *outputs]


def test_warm_up_events_are_a_created_and_a_completed_response_with_no_output() -> None:
    created, completed = (
        orjson.loads(e) for e in warm_up_events({"model": "m", "input": [USER]}, "resp_w", 1.0e9)
    )
    assert created["type"] == "response.created" and created["response"]["status"] == "in_progress"
    assert completed["response"]["id"] == "resp_w" and completed["response"]["output"] == []
    assert completed["response"]["status"] == "completed"


def test_error_frames_carry_the_pacing_headers_in_both_places() -> None:
    body = b'{"error": {"type": "rate_limit_error", "message": "slow"}}'
    frame = orjson.loads(
        error_frame(
            429,
            body,
            [
                (b"Retry-After", b"7"),
                (b"set-cookie", b"x"),
                (b"x-ratelimit-remaining-requests", b"0"),
            ],
        )
    )
    assert frame["status"] == 429 and frame["error"]["message"] == "slow"
    assert (
        frame["headers"]
        == frame["error"]["headers"]
        == {"retry-after": "7", "x-ratelimit-remaining-requests": "0"}
    )
    plain = orjson.loads(error_frame(502, b"bad gateway", []))
    assert plain["error"]["type"] == "server_error" and "headers" not in plain


def test_a_record_of_ids_only_keeps_the_item_ids_within_its_bound() -> None:
    """What claiming an upstream's ids follows: the ids, never the items' bytes."""
    record = ResponseRecord(20, ids_only=True)
    for event in TURN1_EVENTS:
        record.event(orjson.dumps(event))
    assert (record.response_id, record.item_ids, record.items) == ("resp_01", ["fc_01"], [])
    for n in range(5):
        record._keep({"type": "message", "id": f"msg_{n:05}"})
    assert record.overflowed and record.item_ids == []  # past 20 bytes of ids: none


# -- the copies around the store, at their size (issue 38, item 6) ------------------------

BIG_ITEMS = [
    {"type": "message", "id": f"msg_{i}", "role": "user", "content": "x" * 50_000}
    for i in range(20)
]
BIG_SIZE = sum(len(orjson.dumps(item)) for item in BIG_ITEMS)


def test_a_records_items_are_held_at_their_size() -> None:
    """What a socket keeps and a store is given: each item's JSON, not orjson's growth
    buffer of it (12 to 16 times as large)."""
    frames = events("resp_1", BIG_ITEMS)

    def follow() -> ResponseRecord:
        record = ResponseRecord(10**9)
        for frame in frames:
            record.event(frame)
        return record

    assert kept_by(follow) <= 1.1 * BIG_SIZE + 64 * 1024


def test_an_expanded_turns_items_are_held_at_their_size() -> None:
    held = kept_by(lambda: expand({"input": BIG_ITEMS})[1])
    assert held <= 1.1 * BIG_SIZE + 64 * 1024
