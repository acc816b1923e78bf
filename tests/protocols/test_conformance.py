"""Recorded Responses transcripts: relayed byte for byte, understood by the observer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from trio.testing import MockClock

from proxai.config import TimeoutsConfig
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.responses.observer import ResponsesObserver
from proxai.testing import Script, Send, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.streams import data_frames, payloads
from proxai.wire.sse import SSEFramer
from tests.fixtures import FIXTURES, TRANSCRIPTS, Transcript, transcript_params


def streamed(events: list[dict[str, Any]]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """Arguments and texts as the deltas spell them, computed here independently."""
    calls: dict[int, str] = {}
    texts: dict[tuple[int, int], str] = {}
    for e in events:
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call":
            calls[e["output_index"]] = e["item"].get("arguments", "")
        elif e["type"] == "response.function_call_arguments.delta":
            calls[e["output_index"]] += e["delta"]
        elif e["type"] == "response.output_text.delta":
            key = (e["output_index"], e["content_index"])
            texts[key] = texts.get(key, "") + e["delta"]
    return calls, texts


def final_output(events: list[dict[str, Any]]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    output = events[-1]["response"].get("output") or []
    calls = {
        i: item["arguments"] for i, item in enumerate(output) if item.get("type") == "function_call"
    }
    texts = {
        (i, j): part["text"]
        for i, item in enumerate(output)
        if item.get("type") == "message"
        for j, part in enumerate(item.get("content") or [])
        if part.get("type") == "output_text"
    }
    return calls, texts


def consistent(events: list[dict[str, Any]]) -> bool:
    """Whether the recording's deltas add up to its final output (one vercel fixture
    is abridged and does not: proxai must notice, not pretend)."""
    calls, texts = streamed(events)
    final_calls, final_texts = final_output(events)
    return all(final_calls.get(i) == v for i, v in calls.items()) and all(
        final_texts.get(k) == v for k, v in texts.items()
    )


def expected_kind(events: list[dict[str, Any]]) -> OutcomeKind:
    last = events[-1]["type"]
    return {
        "response.completed": OutcomeKind.COMPLETED,
        "response.incomplete": OutcomeKind.INCOMPLETE,
        "response.failed": OutcomeKind.FAILED,
    }[last]


def test_fixtures_are_present() -> None:
    """In this project the transcripts are always there; elsewhere the others skip."""
    if not FIXTURES.is_dir():
        pytest.skip(f"no recorded transcripts at {FIXTURES} (set PROXAI_FIXTURES)")
    names = {t.name.split("#")[0] for t in TRANSCRIPTS}
    assert "responses_function_call_usage.1.sse" in names
    assert len(TRANSCRIPTS) >= 15


@pytest.mark.parametrize("transcript", transcript_params())
async def test_transcript_relays_byte_exact_through_a_real_server(
    transcript: Transcript, start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.sse([transcript.body], chunk_size=997)])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/responses", json={"model": "m", "stream": True}
        )
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.content == transcript.body
    events = payloads(transcript.body)
    assert outcome.kind is expected_kind(events)
    assert outcome.events == len(events)
    if consistent(events):
        assert outcome.anomalies == []
    else:
        assert outcome.aggregates_match is False
        assert all(
            a.startswith("aggregate differs: text at output_index") for a in outcome.anomalies
        )


@pytest.mark.parametrize("transcript", transcript_params())
def test_observer_aggregates_equal_the_final_output(transcript: Transcript) -> None:
    """The seed's aggregation, checked here independently of the observer's own check."""
    observer = ResponsesObserver(TimeoutsConfig())
    framer = SSEFramer()
    body = transcript.body
    for i in range(0, len(body), 301):  # fed in odd-sized pieces
        observer.on_frames(framer.feed(body[i : i + 301]), now=float(i))
    outcome = Outcome("POST", "/v1/responses")
    observer.fill(outcome)

    events = payloads(body)
    calls, texts = streamed(events)
    assert {i: c["arguments"] for i, c in observer.function_calls.items()} == calls
    assert observer.texts == texts
    final_calls, final_texts = final_output(events)
    if consistent(events):
        assert calls == {i: final_calls[i] for i in calls}
        assert texts == {k: final_texts[k] for k in texts}
        assert outcome.aggregates_match is (True if calls or texts else None)
        assert outcome.anomalies == []
    else:
        assert outcome.aggregates_match is False
    final = events[-1]["response"]
    if final.get("usage"):
        assert outcome.usage == final["usage"]
    assert [c.name for c in outcome.calls if c.type == "function_call"] == [
        final["output"][i]["name"] for i in sorted(final_calls)
    ]


@pytest.mark.parametrize("transcript", transcript_params())
async def test_cut_anywhere_the_terminal_continues_the_sequence(
    autojump_clock: MockClock, transcript: Transcript
) -> None:
    """Cut each transcript at several points and stall: proxai's error and
    response.failed carry the next sequence numbers and the last snapshot's id."""
    frames = data_frames(transcript.body)
    events = payloads(transcript.body)
    numbered = all("sequence_number" in e for e in events)
    for cut in sorted({1, len(frames) // 3, len(frames) // 2, len(frames) - 1}):
        script = Script(steps=[Send(b"".join(f.raw for f in frames[:cut])), Stall()])
        async with MemoryProxy([script]) as proxy:
            exchange = await proxy.request({"model": "m", "stream": True})
        got = exchange.events()
        assert got[:cut] == events[:cut]
        assert exchange.outcome is not None
        if any(e["type"] == "error" for e in events[:cut]):
            # the client already has the upstream's error: nothing is added
            assert got == events[:cut]
            assert exchange.outcome.kind is OutcomeKind.FAILED
            continue
        error, failed = got[cut:]
        assert exchange.outcome.kind in (
            OutcomeKind.STALLED_IDLE,
            OutcomeKind.STALLED_TOOL_ARGUMENTS,
        )
        if numbered:
            assert error["sequence_number"] == events[cut]["sequence_number"]
            assert failed["sequence_number"] == events[cut]["sequence_number"] + 1
        assert failed["response"]["id"] == events[0]["response"]["id"]
        assert failed["response"]["status"] == "failed"
