"""What the official openai SDK sees when proxai ends a stream: an error, never a hang.

Real hypercorn, real httpx, the scripted upstream on loopback; the SDK runs in a worker
thread as any synchronous client would. What the SDK makes of each ending is the test:
a stall's one deadline is short (0.3 s, so the SDK meets it quickly), every other one far
(:data:`~tests.helpers.REAL_TIMEOUTS`), so the stall is that deadline's however loaded
the machine; when deadlines fire, exactly, is tested on a virtual clock
(tests/relay/test_deadlines.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from proxai.outcome import OutcomeKind
from proxai.testing import Script, Send, Sleep, Stall, sse_event
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, TURN2_EVENTS, TURN2_REQUEST
from tests.helpers import REAL_TIMEOUTS, stall_timeouts

openai = pytest.importorskip("openai")


def iterate(base_url: str, request: dict[str, Any]) -> tuple[list[str], BaseException | None]:
    """Iterate a streamed Responses call; return the event types seen and what was raised."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0, timeout=20)
    seen: list[str] = []
    try:
        for event in client.responses.create(**request):
            seen.append(event.type)
    except Exception as exc:
        return seen, exc
    return seen, None


async def run_sdk(
    start_upstream: Any,
    proxai_for: Any,
    script: Script,
    request: dict[str, Any],
    timeouts: dict[str, float] = REAL_TIMEOUTS,
) -> Any:
    upstream = await start_upstream([script])
    async with proxai_for(upstream, timeouts=timeouts) as px:
        with trio.fail_after(15):
            seen, error = await trio.to_thread.run_sync(iterate, px.base_url, request)
            (outcome,) = await px.wait_for_outcomes(1)
    return seen, error, outcome


async def test_stall_mid_arguments_raises_api_error_while_iterating(
    start_upstream: Any, proxai_for: Any
) -> None:
    script = Script.sse(TURN1_EVENTS[:6], then=[Stall()])
    seen, error, outcome = await run_sdk(
        start_upstream, proxai_for, script, TURN1_REQUEST, stall_timeouts("tool_arguments")
    )
    assert seen == [e["type"] for e in TURN1_EVENTS[:6]]  # everything before the stall arrived
    assert isinstance(error, openai.APIError)
    assert not isinstance(error, openai.APIStatusError)  # raised mid-stream, not an HTTP status
    assert error.message == (
        "upstream stalled for 0.3 s while streaming arguments of function_call get_weather "
        "(call_weather_01)"
    )
    assert error.code == "upstream_timeout"  # as the 504 before the first byte says it
    assert error.type == "server_error"
    assert outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS


async def test_stall_mid_text_raises_api_error(start_upstream: Any, proxai_for: Any) -> None:
    script = Script.sse(TURN2_EVENTS[:3], then=[Stall()])
    seen, error, outcome = await run_sdk(
        start_upstream, proxai_for, script, TURN2_REQUEST, stall_timeouts("idle")
    )
    assert len(seen) == 3
    assert isinstance(error, openai.APIError)
    assert "while streaming text of message msg_01" in error.message
    assert outcome.kind is OutcomeKind.STALLED_IDLE


@pytest.mark.parametrize(
    "partial", [b"", b"event: response.function_call_arguments.delta\ndata: {"]
)
async def test_upstream_eof_mid_stream_raises_api_error(
    start_upstream: Any, proxai_for: Any, partial: bytes
) -> None:
    script = Script.sse(TURN1_EVENTS[:6], then=[Send(partial)] if partial else [])
    seen, error, outcome = await run_sdk(start_upstream, proxai_for, script, TURN1_REQUEST)
    assert len(seen) == 6
    assert isinstance(error, openai.APIError)  # not a JSONDecodeError: proxai wrote at a boundary
    assert error.message.startswith("upstream closed the stream before the response completed")
    assert outcome.kind is OutcomeKind.UPSTREAM_EOF


async def test_stall_before_the_first_event_is_a_retryable_http_error(
    start_upstream: Any, proxai_for: Any
) -> None:
    seen, error, outcome = await run_sdk(
        start_upstream, proxai_for, Script(steps=[Stall()]), TURN1_REQUEST, stall_timeouts("idle")
    )
    assert seen == []
    assert isinstance(error, openai.InternalServerError)  # 5xx: the SDK's own retries apply
    assert error.status_code == 504
    assert error.code == "upstream_timeout"
    assert outcome.kind is OutcomeKind.STALLED_IDLE


async def test_healthy_stream_is_untouched(start_upstream: Any, proxai_for: Any) -> None:
    # A pause after the headers and gaps between events, far under every deadline: the SDK
    # reads a paced stream whole. That gaps just under each deadline pass is on a virtual
    # clock (test_gaps_just_under_each_deadline_pass_untouched in test_deadlines.py).
    script = Script(steps=[Sleep(0.3), *Script.sse(TURN1_EVENTS, delay=0.1).steps])
    seen, error, outcome = await run_sdk(start_upstream, proxai_for, script, TURN1_REQUEST)
    assert error is None
    assert seen == [e["type"] for e in TURN1_EVENTS]
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_upstream_error_event_reaches_the_sdk_unchanged(
    start_upstream: Any, proxai_for: Any
) -> None:
    error_event = {
        "type": "error",
        "sequence_number": 1,
        "error": {
            "type": "insufficient_quota",
            "code": "insufficient_quota",
            "message": "quota",
            "param": None,
        },
    }
    failed = {
        "type": "response.failed",
        "sequence_number": 2,
        "response": {
            **TURN1_EVENTS[0]["response"],
            "status": "failed",
            "error": {"code": "insufficient_quota", "message": "quota"},
        },
    }
    script = Script(
        steps=[Send(sse_event(TURN1_EVENTS[0]) + sse_event(error_event) + sse_event(failed))]
    )
    seen, error, outcome = await run_sdk(start_upstream, proxai_for, script, TURN1_REQUEST)
    assert seen == ["response.created"]
    assert isinstance(error, openai.APIError)
    assert error.code == "insufficient_quota"
    assert outcome.kind is OutcomeKind.FAILED
