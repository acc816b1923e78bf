"""How translated responses end and what shape they have, seen by the official SDKs.

Real proxai, a scripted upstream of another API, the openai and anthropic SDKs (in a
worker thread): a stream the client has in full is never broken off; a translator that
fails ends the client's response with its API's error; a whole body is bounded, decoded,
and answered in the shape the client asked for.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest
from trio.testing import MockClock

from proxai.config import ConfigError
from proxai.config_file import load_config
from proxai.outcome import OutcomeKind
from proxai.protocols.chat.reader import ChatReader
from proxai.protocols.names import WireApi
from proxai.protocols.observer import Verdict
from proxai.testing import Reset, Script, Send, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.stream_checks import responses_final
from proxai.testing.streams import data_frames
from proxai.testing.streams import made_bytes as raw
from proxai.translate.decoders.chat import ChatDecoder
from proxai.translate.encoders import encoder_for
from proxai.translate.encoders.responses import ResponsesEncoder
from proxai.translate.ir import (
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
    Usage,
)
from proxai.translate.stream import ENDED_AT_END_OF_STREAM, ResponseTranslator
from proxai.wire.sse import SSEFramer
from tests.faults.kits import KITS
from tests.helpers import (
    CHAT_COMPLETION,
    CHAT_UPSTREAM,
    TEXT_STREAM,
    TOOL_CALL_STREAM,
    WEATHER_TOOL,
    anthropic_client,
    capture,
    chunk,
    messages_stream,
    openai_client,
    responses_stream,
    run,
    sse,
    stall_timeouts,
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


async def test_an_observer_that_fails_leaves_the_rest_to_the_translators_reader(
    start_upstream: Any, proxai_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observer fails on one chunk and is dropped; the decoder, which reads the
    reader's items, has the reader read the rest itself: the client's stream is whole."""
    original = ChatReader.read
    reads = 0

    def read_or_fail(self: ChatReader, event: str | None, data: bytes) -> object:
        nonlocal reads
        reads += 1
        if reads == 3:
            raise RuntimeError("observer bug")
        return original(self, event, data)

    monkeypatch.setattr(ChatReader, "read", read_or_fail)
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TOOL_CALL_STREAM)], responses_stream
    )
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert outcome.kind is OutcomeKind.COMPLETED
    assert "observer failed (RuntimeError: observer bug); relaying without it" in (
        outcome.anomalies
    )


async def test_a_chat_stream_without_done_completes_a_messages_clients_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(start_upstream, proxai_for, [sse(NO_DONE)], messages_stream)
    assert final.stop_reason == "tool_use"
    assert final.content[2].input == {"city": "Paris"}
    assert outcome.kind is OutcomeKind.COMPLETED


#: A Chat stream that ends cleanly right after its ``finish_reason``: no usage chunk, no
#: ``data: [DONE]``. The end of the stream is the decoder's third way to finish.
FINISH_ONLY = TOOL_CALL_STREAM[:-2]


async def test_a_chat_stream_ending_after_its_finish_reason_completes_a_responses_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY)], responses_stream
    )
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[2].arguments == '{"city": "Paris"}'
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.usage is None
    assert ENDED_AT_END_OF_STREAM in outcome.anomalies


async def test_a_chat_stream_ending_after_its_finish_reason_completes_a_messages_stream(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY)], messages_stream
    )
    assert final.stop_reason == "tool_use"
    assert final.content[2].input == {"city": "Paris"}
    assert outcome.kind is OutcomeKind.COMPLETED
    assert ENDED_AT_END_OF_STREAM in outcome.anomalies


async def test_a_chat_stream_ending_after_its_finish_reason_is_one_body_for_a_whole_client(
    start_upstream: Any, proxai_for: Any
) -> None:
    response, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY)], _responses_create
    )
    assert response.status == "completed"
    assert response.output[2].arguments == '{"city": "Paris"}'
    assert outcome.kind is OutcomeKind.COMPLETED
    assert ENDED_AT_END_OF_STREAM in outcome.anomalies
    message, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY)], _messages_create
    )
    assert message.stop_reason == "tool_use"
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_chat_stream_ending_before_its_finish_reason_or_by_a_reset_is_cut_short(
    start_upstream: Any, proxai_for: Any
) -> None:
    # Only a finished stream may end at the clean end of its body: not one cut in its
    # arguments, nor one whose connection broke after its finish_reason.
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY[:-1])], capture(responses_stream)
    )
    assert isinstance(error, openai.APIError)
    assert outcome.kind is OutcomeKind.UPSTREAM_EOF
    assert ENDED_AT_END_OF_STREAM not in outcome.anomalies
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(FINISH_ONLY, then=[Reset()])], capture(responses_stream)
    )
    assert isinstance(error, openai.APIError)
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET


async def test_a_chat_stream_that_goes_silent_after_its_usage_chunk_completes_at_once(
    autojump_clock: MockClock,
) -> None:
    # The client has response.completed; an upstream that then neither sends [DONE] nor
    # hangs up gets the after-terminal grace (1 s), not the idle timeout (30 s), and the
    # exchange is whole. On a virtual clock: the instants are exact.
    body = {
        "model": "qwen3-coder",
        "input": "Weather in Paris?",
        "tools": [WEATHER_TOOL],
        "store": False,
        "stream": True,
    }
    async with MemoryProxy([sse(NO_DONE, then=[Stall()])], upstream=CHAT_UPSTREAM) as proxy:
        exchange = await proxy.request(body)
        closed_at = await proxy.transport.requests[0].wait_closed()
    final = responses_final(exchange.body)  # the openai SDK's accumulator, strict
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert exchange.elapsed == 1.0  # the grace, not idle's 30 s
    assert closed_at == exchange.ended_at  # the upstream let go as the client's stream ended
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
    assert exchange.outcome.total_s == 1.0


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
    assert any(
        a.startswith("the upstream's stream ended as upstream_reset") and "after its terminal" in a
        for a in outcome.anomalies
    )


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
        pytest.param(_responses_events, RESPONSES_UPSTREAM, WireApi.RESPONSES, id="responses"),
        pytest.param(_chat_chunks, CHAT_UPSTREAM, WireApi.CHAT, id="chat"),
        pytest.param(_responses_events, CHAT_UPSTREAM, WireApi.CHAT, id="responses-over-chat"),
        pytest.param(_chat_chunks, RESPONSES_UPSTREAM, WireApi.RESPONSES, id="chat-over-responses"),
    ],
)
@pytest.mark.parametrize("stage", ["before_first_event", "mid_text"])
async def test_a_stall_has_one_code_passed_through_translated_and_before_the_first_byte(
    start_upstream: Any, proxai_for: Any, client: Any, upstream: Any, prefix: WireApi, stage: str
) -> None:
    sent = KITS[prefix].prefixes["mid_text"] if stage == "mid_text" else b""
    script = Script(steps=[Send(sent), Stall()])
    # What each client's SDK makes of the stall is the test (the deadline's logic is on a
    # virtual clock in tests/relay/test_deadlines.py): only idle is short.
    code, _, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [script],
        _raise_code(client),
        upstream=upstream,
        timeouts=stall_timeouts("idle"),
    )
    assert outcome.kind is OutcomeKind.STALLED_IDLE
    assert code == "upstream_timeout"


# --- item 10: a translator's failure is the client's protocol error --------------------------

#: A count orjson can read but no sum of it can be written (the usage of a broken server).
HUGE = 2**64 - 1
#: The largest count proxai passes on: the largest integer a JSON reader in JavaScript
#: holds exactly.
MAX_TOKEN_COUNT = 2**53 - 1


def _huge_usage_stream() -> list[bytes]:
    usage = {"prompt_tokens": HUGE, "completion_tokens": 1, "total_tokens": HUGE}
    return [*TEXT_STREAM[:3], chunk(None, usage=usage), b"data: [DONE]\n\n"]


async def test_absurd_usage_counts_are_clamped_for_a_responses_client(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(_huge_usage_stream())], responses_stream
    )
    assert final.output_text == "It is sunny."
    assert final.usage.input_tokens == MAX_TOKEN_COUNT
    assert final.usage.total_tokens == MAX_TOKEN_COUNT + 1
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_absurd_usage_counts_are_clamped_for_a_messages_client(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, _ = await run(
        start_upstream, proxai_for, [sse(_huge_usage_stream())], messages_stream
    )
    assert final.content[0].text == "It is sunny."
    assert final.usage.input_tokens == MAX_TOKEN_COUNT


@pytest.fixture
def failing_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Chat decoder raises on a chunk that says ``boom`` (a bug proxai must contain)."""
    original = ChatDecoder._chunk

    def chunk_or_boom(self: ChatDecoder, data: dict[str, Any]) -> list[Any]:
        if "boom" in json.dumps(data):
            raise ValueError("boom")
        return original(self, data)

    monkeypatch.setattr(ChatDecoder, "_chunk", chunk_or_boom)


BOOM = chunk({"content": "boom"})


async def test_a_translator_failure_mid_stream_is_the_responses_clients_error(
    start_upstream: Any, proxai_for: Any, failing_decoder: None
) -> None:
    stream = [*TEXT_STREAM[:2], BOOM, *TEXT_STREAM[2:]]
    error, upstream, (outcome,) = await run(
        start_upstream, proxai_for, [sse(stream, then=[Stall()])], capture(responses_stream)
    )
    assert isinstance(error, openai.APIError) and not isinstance(error, openai.APIStatusError)
    assert error.code == "translation_failed"
    assert "ValueError: boom" in error.message
    assert outcome.kind is OutcomeKind.TRANSLATION_FAILED
    assert upstream.requests[0].closed_at is not None  # the upstream was let go at once


async def test_a_translator_failure_mid_stream_is_the_messages_clients_error(
    start_upstream: Any, proxai_for: Any, failing_decoder: None
) -> None:
    stream = [*TEXT_STREAM[:2], BOOM, *TEXT_STREAM[2:]]
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(stream)], capture(messages_stream)
    )
    assert isinstance(error, anthropic.APIStatusError)
    assert error.body["error"]["type"] == "api_error"
    assert "translation failed" in error.body["error"]["message"]
    assert outcome.kind is OutcomeKind.TRANSLATION_FAILED


async def test_a_translator_failure_before_the_first_byte_is_a_502(
    start_upstream: Any, proxai_for: Any, failing_decoder: None
) -> None:
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse([BOOM, *TEXT_STREAM])], capture(responses_stream)
    )
    assert isinstance(error, openai.APIStatusError)
    assert (error.status_code, error.code) == (502, "translation_failed")
    assert outcome.kind is OutcomeKind.TRANSLATION_FAILED


async def test_a_translator_failure_on_a_whole_body_is_a_502(
    start_upstream: Any, proxai_for: Any, failing_decoder: None
) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "boom"}}],
    }

    def create(url: str) -> Any:
        return anthropic_client(url).messages.create(
            model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
        )

    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [Script.json(completion)], capture(create)
    )
    assert isinstance(error, anthropic.InternalServerError)
    assert error.status_code == 502
    assert error.body["error"]["type"] == "api_error"
    assert outcome.kind is OutcomeKind.TRANSLATION_FAILED


# --- the translator's containment, sans-io ---------------------------------------------------


class _FailingUsage(ResponsesEncoder):
    """Fails while it writes its terminal event, after marking itself finished."""

    def _usage_json(self) -> dict[str, Any]:
        raise OverflowError("no")


def _translator(encoder: type[ResponsesEncoder] = ResponsesEncoder) -> ResponseTranslator:
    ctx = TranslationContext(client=WireApi.RESPONSES, upstream=WireApi.CHAT, stream=True)
    translator = ResponseTranslator(ctx, ChatDecoder(), encoder(ctx))
    translator.start(200)
    return translator


def _frames(lines: list[bytes]) -> list[Any]:
    return SSEFramer().feed(b"".join(lines))


def test_an_encoder_that_fails_on_its_terminal_event_still_ends_the_stream_with_the_error() -> None:
    translator = _translator(_FailingUsage)
    out = raw(translator.frames(_frames(TEXT_STREAM[:4])))
    assert translator.broken == "translation failed (OverflowError: no)"
    assert translator.client_end is None
    events = [json.loads(f.data) for f in data_frames(out)]
    assert events[-1]["type"] == "response.output_item.done"  # whole events up to the failure
    closing = raw(translator.closing(Verdict(OutcomeKind.TRANSLATION_FAILED, translator.broken)))
    error, failed = (json.loads(f.data) for f in data_frames(closing))
    assert (error["type"], error["code"]) == ("error", "translation_failed")
    assert failed["type"] == "response.failed"
    assert (
        failed["sequence_number"]
        == error["sequence_number"] + 1
        == events[-1]["sequence_number"] + 2
    )
    assert raw(translator.frames(_frames(TEXT_STREAM[4:]))) == b""  # nothing more is taken


def test_a_failure_after_the_clients_end_adds_nothing_after_it() -> None:
    translator = _translator()
    out = raw(translator.frames(_frames(TEXT_STREAM[:4])))
    assert data_frames(out)[-1].event == "response.completed"
    translator._decoder.feed = _raise  # type: ignore[method-assign]
    assert raw(translator.frames(_frames(TEXT_STREAM[4:]))) == b""
    assert translator.broken is not None and translator.client_end is OutcomeKind.COMPLETED
    assert (
        raw(translator.closing(Verdict(OutcomeKind.TRANSLATION_FAILED, translator.broken))) == b""
    )


def _raise(*args: Any) -> Any:
    raise RuntimeError("late")


# --- item 11: a whole body in the shape the client asked for ----------------------------------

#: A whole ``chat.completion``: "Hello", 3 + 1 tokens.
COMPLETION = CHAT_COMPLETION


def _responses_create(url: str) -> Any:
    return openai_client(url).responses.create(model="qwen3-coder", input="Say hello")


def _messages_create(url: str) -> Any:
    return anthropic_client(url).messages.create(
        model="qwen3-coder", max_tokens=64, messages=[{"role": "user", "content": "Say hello"}]
    )


def _plain_stream(url: str) -> Any:
    with anthropic_client(url).messages.stream(
        model="qwen3-coder", max_tokens=64, messages=[{"role": "user", "content": "Say hello"}]
    ) as stream:
        return stream.get_final_message()


def _responses_final(url: str) -> Any:
    with openai_client(url).responses.stream(model="qwen3-coder", input="Say hello") as stream:
        return stream.get_final_response()


async def test_a_whole_body_from_an_upstream_that_ignored_stream_reaches_a_stream_client_as_events(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, (outcome,) = await run(
        start_upstream, proxai_for, [Script.json(COMPLETION)], _responses_final
    )
    assert final.output_text == "Hello"
    assert final.status == "completed" and final.usage.total_tokens == 4
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_whole_body_reaches_a_messages_stream_client_as_events(
    start_upstream: Any, proxai_for: Any
) -> None:
    final, _, _ = await run(start_upstream, proxai_for, [Script.json(COMPLETION)], _plain_stream)
    assert final.content[0].text == "Hello" and final.stop_reason == "end_turn"


async def test_a_stream_from_an_upstream_reaches_a_client_that_asked_for_none_as_one_body(
    start_upstream: Any, proxai_for: Any
) -> None:
    response, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TOOL_CALL_STREAM)], _responses_create
    )
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    assert response.output[2].arguments == '{"city": "Paris"}'
    assert response.usage.input_tokens == 120
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_stream_reaches_a_messages_client_that_asked_for_none_as_one_message(
    start_upstream: Any, proxai_for: Any
) -> None:
    message, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TOOL_CALL_STREAM)], _messages_create
    )
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_stream_cut_short_for_a_client_that_asked_for_none_is_a_502(
    start_upstream: Any, proxai_for: Any
) -> None:
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [sse(TEXT_STREAM[:2])], capture(_responses_create)
    )
    assert isinstance(error, openai.APIStatusError)
    assert (error.status_code, error.code) == (502, "upstream_closed")
    assert outcome.kind is OutcomeKind.UPSTREAM_EOF


def _html(status: int = 200) -> Script:
    page = b"<html><body>Welcome to nginx!</body></html>"
    return Script(
        status=status,
        headers=[("content-type", "text/html")],
        steps=[Send(page)],
        content_length=True,
    )


async def test_a_2xx_body_that_is_not_json_is_a_502_in_the_clients_shape(
    start_upstream: Any, proxai_for: Any
) -> None:
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [_html()], capture(_responses_create)
    )
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.code) == (502, "upstream_invalid_body")
    assert "not a JSON object" in error.message
    assert outcome.status == 502 and outcome.kind is OutcomeKind.PROXY_ERROR
    error, _, _ = await run(start_upstream, proxai_for, [_html()], capture(_messages_create))
    assert isinstance(error, anthropic.InternalServerError) and error.status_code == 502
    assert error.body["error"]["type"] == "api_error"


def _encoded(data: bytes, coding: str) -> Script:
    return Script(
        headers=[("content-type", "application/json"), ("content-encoding", coding)],
        steps=[Send(data)],
        content_length=True,
    )


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_whole_body_is_decoded_then_translated(
    start_upstream: Any, proxai_for: Any, coding: str
) -> None:
    raw = json.dumps(COMPLETION).encode()
    data = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
    response, _, (outcome,) = await run(
        start_upstream, proxai_for, [_encoded(data, coding)], _responses_create
    )
    assert response.output_text == "Hello"
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_a_whole_body_in_a_coding_proxai_cannot_decode_is_a_502_naming_it(
    start_upstream: Any, proxai_for: Any
) -> None:
    error, _, _ = await run(
        start_upstream, proxai_for, [_encoded(b"\x8b\x00", "br")], capture(_messages_create)
    )
    assert isinstance(error, anthropic.InternalServerError) and error.status_code == 502
    assert "content coding br" in error.body["error"]["message"]


async def test_a_whole_error_body_in_a_2xx_is_a_502_with_the_upstreams_words(
    start_upstream: Any, proxai_for: Any
) -> None:
    body = {"error": {"message": "model is loading", "type": "server_error", "code": "loading"}}
    error, _, (outcome,) = await run(
        start_upstream, proxai_for, [Script.json(body)], capture(_responses_create)
    )
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.code) == (502, "loading")
    assert error.body["message"] == "model is loading"
    assert outcome.kind is OutcomeKind.FAILED


# --- item 4: a whole body to translate is bounded ---------------------------------------------

LIMIT = 64 * 1024  # [server] max_translated_body_bytes in these tests


def _big_completion(size: int) -> dict[str, Any]:
    message = {"role": "assistant", "content": "x" * size}
    return {**COMPLETION, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def _chunked(body: dict[str, Any]) -> Script:
    """A JSON body sent in 8 KB chunks, without a Content-Length."""
    data = json.dumps(body).encode()
    steps = [Send(data[i : i + 8192]) for i in range(0, len(data), 8192)]
    return Script(headers=[("content-type", "application/json")], steps=steps)


@pytest.mark.parametrize(
    ("client", "script"),
    [
        pytest.param(_responses_create, Script.json(_big_completion(16 * LIMIT)), id="whole"),
        pytest.param(_responses_create, _chunked(_big_completion(16 * LIMIT)), id="chunked"),
        pytest.param(_responses_final, Script.json(_big_completion(16 * LIMIT)), id="to-stream"),
        pytest.param(
            _responses_create,
            Script.sse([chunk({"content": "x" * 4096}) for _ in range(256)]),
            id="from-stream",
        ),
        pytest.param(
            _responses_create,
            _encoded(gzip.compress(json.dumps(_big_completion(16 * LIMIT)).encode()), "gzip"),
            id="gzip",
        ),
    ],
)
async def test_a_body_to_translate_over_the_limit_is_a_502_in_the_clients_shape(
    start_upstream: Any, proxai_for: Any, client: Any, script: Script
) -> None:
    error, upstream, (outcome,) = await run(
        start_upstream,
        proxai_for,
        [script],
        capture(client),
        server={"max_translated_body_bytes": LIMIT},
    )
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.code) == (502, "upstream_body_too_large")
    assert f"over {LIMIT} bytes (max_translated_body_bytes)" in error.message
    assert outcome.kind is OutcomeKind.PROXY_ERROR and outcome.status == 502
    assert outcome.bytes_in < 8 * LIMIT  # proxai stopped reading soon past the limit
    assert upstream.requests[0].closed_at is not None


async def test_a_messages_client_gets_the_limits_502_in_its_shape(
    start_upstream: Any, proxai_for: Any
) -> None:
    error, _, _ = await run(
        start_upstream,
        proxai_for,
        [Script.json(_big_completion(16 * LIMIT))],
        capture(_messages_create),
        server={"max_translated_body_bytes": LIMIT},
    )
    assert isinstance(error, anthropic.InternalServerError) and error.status_code == 502
    assert error.body["error"]["type"] == "api_error"
    assert "max_translated_body_bytes" in error.body["error"]["message"]


async def test_a_body_within_the_limit_and_a_stream_passed_through_are_not_bounded_by_it(
    start_upstream: Any, proxai_for: Any
) -> None:
    # Under the limit: translated. A stream the client gets event by event is not held.
    stream = [chunk({"content": "x" * 4096}) for _ in range(40)] + TEXT_STREAM[2:]
    small, _, _ = await run(
        start_upstream,
        proxai_for,
        [Script.json(_big_completion(LIMIT // 2))],
        _responses_create,
        server={"max_translated_body_bytes": LIMIT},
    )
    assert len(small.output_text) == LIMIT // 2
    final, _, _ = await run(
        start_upstream,
        proxai_for,
        [sse(stream)],
        _responses_final,
        server={"max_translated_body_bytes": LIMIT},
    )
    assert len(final.output_text) == 40 * 4096


def test_the_limit_is_a_positive_integer_of_server_32_mib_by_default() -> None:
    upstream = {"base_url": "http://127.0.0.1:9/v1"}
    config = load_config(None, overrides={"upstream": upstream})
    assert config.server.max_translated_body_bytes == 32 * 1024 * 1024
    with pytest.raises(ConfigError, match=r"server\.max_translated_body_bytes: must be a positive"):
        load_config(
            None, overrides={"upstream": upstream, "server": {"max_translated_body_bytes": 0}}
        )


@pytest.mark.parametrize("client", [WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES])
def test_an_encoder_for_a_client_that_asked_for_no_stream_writes_no_frames(
    client: WireApi,
) -> None:
    # A whole answer's frames (its text in a delta, then again in each .done event and in
    # response.completed) were written only to be thrown away: several copies of the text.
    ctx = TranslationContext(client=client, upstream=WireApi.CHAT, stream=False)
    encoder = encoder_for(client, ctx)
    events = [
        Started(id="chatcmpl-1", model="m"),
        ItemStarted(0, ItemKind.TEXT),
        ItemDelta(0, "x" * 1000),
        ItemDone(0),
        Usage(input_tokens=3, output_tokens=1000),
        Finished(FinishReason.STOP),
    ]
    assert [encoder.feed(event) for event in events] == [[]] * len(events)
    assert encoder.finished
    body = json.loads(encoder.body())
    text = {
        WireApi.RESPONSES: lambda b: b["output"][0]["content"][0]["text"],
        WireApi.CHAT: lambda b: b["choices"][0]["message"]["content"],
        WireApi.MESSAGES: lambda b: b["content"][0]["text"],
    }[client](body)
    assert text == "x" * 1000
