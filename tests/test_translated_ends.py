"""How translated responses end and what shape they have, seen by the official SDKs.

Real proxai, a scripted upstream of another API, the openai and anthropic SDKs (in a
worker thread): a stream the client has in full is never broken off; a translator that
fails ends the client's response with its API's error; a whole body is bounded, decoded,
and answered in the shape the client asked for.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxai.outcome import OutcomeKind
from proxai.testing import Reset, Script, Send, Stall
from proxai.testing.streams import FAST_TIMEOUTS
from tests.faults.kits import KITS
from tests.test_translation import (
    CHAT_UPSTREAM,
    TOOL_CALL_STREAM,
    messages_stream,
    openai_client,
    responses_stream,
    run,
    sse,
)

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

#: A Chat stream that ends cleanly after its usage chunk, without ``data: [DONE]``
#: (llama.cpp and some vLLM builds, proxies that drop the marker).
NO_DONE = TOOL_CALL_STREAM[:-1]


# --- item 6: a translated stream the client has in full is finished ---------------------------


async def test_a_chat_stream_without_done_completes_a_responses_clients_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(start_upstream, proxai_for, [sse(NO_DONE)], responses_stream)
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.usage is not None and outcome.usage["prompt_tokens"] == 120


async def test_a_chat_stream_without_done_completes_a_messages_clients_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(start_upstream, proxai_for, [sse(NO_DONE)], messages_stream)
    assert final.stop_reason == "tool_use"
    assert final.content[2].input == {"city": "Paris"}
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_chat_stream_that_goes_silent_after_its_usage_chunk_completes_at_once(
    start_upstream: Any, proxai_for: Any
) -> None:
    # The client has response.completed; an upstream that then neither sends [DONE] nor
    # hangs up gets the after-terminal grace, not the idle timeout, and the exchange is whole.
    final, _, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [sse(NO_DONE, then=[Stall()])],
        responses_stream,
        timeouts={**FAST_TIMEOUTS, "idle": 5.0},
    )
    assert final.status == "completed"
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.total_s is not None and outcome.total_s < 3.0  # not idle's 5 s


async def test_a_reset_after_the_clients_terminal_event_leaves_its_response_whole(
    start_upstream: Any, proxai_for: Any
) -> None:
    # Documented choice: the client already has its whole response; the upstream's broken
    # connection after it is recorded (an anomaly), not passed on as a broken response.
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(NO_DONE, then=[Reset()])], messages_stream
    )
    assert final.stop_reason == "tool_use"
    assert outcome.kind is OutcomeKind.COMPLETED
    assert any("after the client's response had ended" in a for a in outcome.anomalies)


# --- item 21: one stall, one code, on every path ---------------------------------------------

RESPONSES_UPSTREAM = {"protocol": "openai_responses"}


def _raise_code(call: Any) -> Any:
    """``call``'s error code as the openai SDK raised it (in the stream or as an HTTP error)."""

    def wrapped(url: str) -> Any:
        try:
            for _ in call(url):
                pass
        except openai.APIError as exc:
            return exc.code
        return None

    return wrapped


def _responses_events(url: str) -> Any:
    return openai_client(url).responses.create(model="m", input="hi", stream=True)


def _chat_chunks(url: str) -> Any:
    messages = [{"role": "user", "content": "hi"}]
    return openai_client(url).chat.completions.create(model="m", messages=messages, stream=True)


@pytest.mark.parametrize(
    ("client", "upstream", "prefix"),
    [
        pytest.param(_responses_events, RESPONSES_UPSTREAM, "responses", id="responses"),
        pytest.param(_chat_chunks, CHAT_UPSTREAM, "chat", id="chat"),
        pytest.param(_responses_events, CHAT_UPSTREAM, "chat", id="responses-over-chat"),
        pytest.param(_chat_chunks, RESPONSES_UPSTREAM, "responses", id="chat-over-responses"),
    ],
)
@pytest.mark.parametrize("stage", ["before_first_event", "mid_text"])
async def test_a_stall_has_one_code_passed_through_translated_and_before_the_first_byte(
    start_upstream: Any, proxai_for: Any, client: Any, upstream: Any, prefix: str, stage: str
) -> None:
    sent = KITS[prefix].prefixes["mid_text"] if stage == "mid_text" else b""
    script = Script(steps=[Send(sent), Stall()])
    code, _, (outcome,) = await run(
        start_upstream, proxai_for, [script], _raise_code(client), upstream=upstream
    )
    assert outcome.kind is OutcomeKind.STALLED_IDLE
    assert code == "upstream_timeout"
