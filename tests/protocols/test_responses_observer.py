"""The Responses observer as a pure state machine: events and times in, state and deadlines out."""

from __future__ import annotations

import json
from typing import Any

from proxai.config import TimeoutsConfig
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.responses.events import (
    ArgumentsDelta,
    ErrorEvent,
    LifecycleEvent,
    MalformedEvent,
    OtherEvent,
    OutputItemAdded,
    TextDelta,
    parse_event,
)
from proxai.protocols.responses.observer import ResponsesObserver
from proxai.testing import sse_event
from proxai.testing.seed import TURN1_EVENTS, TURN2_EVENTS
from proxai.testing.streams import made_bytes as raw
from proxai.wire.sse import SSEFrame, SSEFramer

TIMEOUTS = TimeoutsConfig(idle=30.0, tool_arguments=20.0, total=1000.0)


def frames(*events: dict[str, Any] | bytes) -> list[SSEFrame]:
    raw = b"".join(e if isinstance(e, bytes) else sse_event(e) for e in events)
    framer = SSEFramer()
    out = framer.feed(raw)
    assert framer.close() == b""
    return out


def feed(observer: ResponsesObserver, events: list[dict[str, Any]], now: float) -> None:
    observer.on_frames(frames(*events), now)


def test_seed_turn1_aggregation() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    for i, event in enumerate(TURN1_EVENTS):
        feed(observer, [event], float(i))
        if event["type"] == "response.output_item.added":
            assert observer.open_items == ["function_call get_weather (call_weather_01)"]
    assert observer.function_calls == {
        1: {
            "call_id": "call_weather_01",
            "name": "get_weather",
            "arguments": '{"city":"北京","date":"today"}',
        }
    }
    assert observer.open_items == []
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)
    assert outcome.aggregates_match is True  # delta sum == arguments.done == output_item.done
    assert outcome.anomalies == []
    assert observer.on_end(fault=None, detail=None, now=10.0).kind is OutcomeKind.COMPLETED


def test_seed_turn2_text_aggregation() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    feed(observer, TURN2_EVENTS, 0.0)
    assert observer.texts == {(0, 0): TURN2_EVENTS[4]["text"]}
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)
    assert outcome.aggregates_match is True


def test_idle_counts_from_the_start_of_the_stream() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    observer.on_start(5000.0)
    assert observer.deadline() == 5030.0


def test_deadlines_follow_the_open_items() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    feed(observer, TURN1_EVENTS[:1], 0.0)
    assert observer.deadline() == 30.0  # idle only
    feed(observer, TURN1_EVENTS[1:5], 2.0)  # function_call opened at 2
    assert observer.deadline() == 22.0
    feed(observer, TURN1_EVENTS[5:6], 4.0)  # a delta at 4
    assert observer.deadline() == 24.0
    observer.on_frames(frames(b": ping\n\n"), 15.0)  # liveness, not progress
    assert observer.deadline() == 24.0
    verdict = observer.on_deadline(24.0)
    assert verdict.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert raw(verdict.closing).startswith(b"event: error\ndata: {")
    events = [json.loads(f.data) for f in SSEFramer().feed(raw(verdict.closing)) if f.data]
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert [e["sequence_number"] for e in events] == [6, 7]


def test_idle_wins_when_it_is_earlier() -> None:
    observer = ResponsesObserver(TimeoutsConfig(idle=5.0, tool_arguments=20.0))
    feed(observer, TURN1_EVENTS[:6], 0.0)
    assert observer.deadline() == 5.0
    verdict = observer.on_deadline(5.0)
    assert verdict.kind is OutcomeKind.STALLED_IDLE
    assert verdict.detail == (
        "upstream sent nothing for 5.0 s while streaming arguments of function_call get_weather "
        "(call_weather_01)"
    )


def test_after_a_terminal_event_only_a_short_grace_remains() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    feed(observer, TURN2_EVENTS, 3.0)
    assert observer.deadline() == 4.0
    verdict = observer.on_deadline(4.0)
    assert verdict.kind is OutcomeKind.COMPLETED
    assert raw(verdict.closing) == b""


def test_items_are_keyed_by_output_index_even_when_ids_rotate() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    item = {
        "type": "function_call",
        "id": "fc_A",
        "call_id": "call_1",
        "name": "f",
        "arguments": "",
    }
    feed(
        observer,
        [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 0,
                "item_id": "fc_B",
                "delta": "{}",
            },
            {
                "type": "response.function_call_arguments.done",
                "output_index": 0,
                "item_id": "fc_C",
                "arguments": "{}",
            },
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**item, "id": "fc_D", "arguments": "{}"},
            },
        ],
        0.0,
    )
    assert observer.function_calls[0]["arguments"] == "{}"
    assert observer.open_items == []
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)
    assert outcome.anomalies == []
    assert outcome.aggregates_match is True


def test_custom_tool_and_mcp_inputs_are_guarded_too() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    feed(
        observer,
        [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {
                    "type": "custom_tool_call",
                    "id": "ctc_1",
                    "call_id": "call_c",
                    "name": "grep",
                    "input": "",
                },
            },
            {
                "type": "response.custom_tool_call_input.delta",
                "output_index": 0,
                "item_id": "ctc_1",
                "delta": "a",
            },
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {
                    "type": "mcp_call",
                    "id": "mcp_1",
                    "name": "roll",
                    "server_label": "dice",
                    "arguments": "",
                },
            },
        ],
        0.0,
    )
    feed(
        observer,
        [{"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": "b"}],
        9.0,
    )
    assert observer.deadline() == 20.0  # the MCP call, silent since 0
    verdict = observer.on_deadline(20.0)
    assert (
        verdict.detail
        == "upstream stalled for 20.0 s while streaming arguments of mcp_call roll on dice (mcp_1)"
    )
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)
    assert [(c.type, c.arguments_length) for c in outcome.calls] == [
        ("custom_tool_call", 2),
        ("mcp_call", 0),
    ]
    assert outcome.stalled_item == "mcp_call roll on dice (mcp_1)"


def test_mismatches_and_oddities_are_recorded_not_fatal() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    observer.on_frames(
        frames(
            TURN1_EVENTS[4],
            {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{"},
            {"type": "response.function_call_arguments.done", "output_index": 1, "arguments": "{}"},
            {"type": "response.function_call_arguments.delta", "output_index": 9, "delta": "x"},
            b"event: response.output_item.done\ndata: not json\n\n",
            b"data: [1,2]\n\n",
        ),
        0.0,
    )
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)
    assert outcome.aggregates_match is False
    assert outcome.anomalies == [
        "response.function_call_arguments.delta for an item that is not open (output_index 9)",
        "response.output_item.done event: data is not JSON",
        "untyped event: data is not a JSON object",
        "aggregate differs: function_call get_weather (call_weather_01): "
        "response.function_call_arguments.done",
    ]


def test_parse_event_routes_by_event_name_and_falls_back_to_json() -> None:
    (named_other,) = frames(b"event: response.web_search_call.searching\ndata: {not even json\n\n")
    assert parse_event(named_other) == OtherEvent(
        "response.web_search_call.searching"
    )  # never parsed
    (unnamed,) = frames(
        b'data: {"type":"response.output_text.delta","output_index":0,'
        b'"content_index":1,"item_id":"m","delta":"hi","sequence_number":4}\n\n'
    )
    assert parse_event(unnamed) == TextDelta(0, 1, "m", "hi", 4)
    (delta,) = frames(TURN1_EVENTS[5])
    assert parse_event(delta) == ArgumentsDelta(
        "response.function_call_arguments.delta", 1, "fc_01", '{"city":"北京"', 5
    )
    (created,) = frames(TURN1_EVENTS[0])
    assert parse_event(created) == LifecycleEvent(
        "response.created", TURN1_EVENTS[0]["response"], 0
    )
    (added,) = frames(TURN1_EVENTS[4])
    parsed = parse_event(added)
    assert isinstance(parsed, OutputItemAdded) and parsed.item.call_id == "call_weather_01"
    (flat_error,) = frames({"type": "error", "code": 429, "message": "slow down", "param": None})
    assert parse_event(flat_error) == ErrorEvent(code="429", message="slow down")
    (bad,) = frames({"type": "response.output_item.added", "output_index": "one", "item": {}})
    assert isinstance(parse_event(bad), MalformedEvent)
    (keepalive,) = frames({"type": "keepalive", "sequence_number": 3})
    assert parse_event(keepalive) == OtherEvent("keepalive")


def test_no_snapshot_still_gives_a_full_failed_response() -> None:
    observer = ResponsesObserver(TIMEOUTS)
    observer.on_frames(frames(b": ping\n\n"), 0.0)
    verdict = observer.on_deadline(30.0)
    failed = json.loads(SSEFramer().feed(raw(verdict.closing))[1].data or b"")
    response = failed["response"]
    assert response["id"].startswith("resp_proxai_")
    assert response["object"] == "response"
    assert response["status"] == "failed"
    assert response["output"] == []
    assert failed["sequence_number"] == 1
