"""Chat Completions: recorded transcripts, the observer, deadlines, and the openai SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from proxai.config import TimeoutsConfig
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.chat.observer import ChatObserver
from proxai.testing import Close, Script, Send, Sleep, Stall, chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.streams import data_frames
from proxai.wire.sse import SSEFramer
from tests.fixtures import CHAT_TRANSCRIPTS, Transcript, transcript_params
from tests.helpers import REAL_TIMEOUTS, stall_timeouts

openai = pytest.importorskip("openai")

CHAT = "/v1/chat/completions"
REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
DONE = b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0) -> bytes:
    return chat_chunk(delta or {}, finish, index=index)


def call_start(index: int, name: str) -> bytes:
    return chunk(
        {
            "tool_calls": [
                {
                    "index": index,
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
            ]
        }
    )


def call_args(index: int, text: str) -> bytes:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})


ROLE = chunk({"role": "assistant", "content": None})
WEATHER = [call_start(0, "get_weather"), call_args(0, '{"city":'), call_args(0, '"北京"}')]
WEATHER_STREAM = [ROLE, *WEATHER, chunk(finish="tool_calls"), DONE]


def sdk_final(body: bytes) -> Any:
    """The completion as the official SDK's own accumulator builds it (independent of proxai)."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    state = ChatCompletionStreamState()
    for frame in SSEFramer().feed(body):
        if frame.data is None or frame.data == b"[DONE]":
            continue
        data = json.loads(frame.data)
        if "error" in data:
            continue
        state.handle_chunk(ChatCompletionChunk.construct(**data))
    return state.current_completion_snapshot


# --- recorded transcripts -----------------------------------------------------------------


@pytest.mark.parametrize("transcript", transcript_params(CHAT_TRANSCRIPTS))
async def test_chat_transcript_relays_byte_exact(
    transcript: Transcript, start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.sse([transcript.body], chunk_size=601)])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/chat/completions", json=REQUEST)
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.content == transcript.body
    expected = {
        "chat_finish_length.sse": OutcomeKind.INCOMPLETE,
        # Groq's own in-band error and no [DONE]: a terminal already, nothing is added
        "chat_groq_inband_error.1.sse": OutcomeKind.FAILED,
    }.get(transcript.name, OutcomeKind.COMPLETED)
    assert outcome.kind is expected
    assert outcome.anomalies == []


@pytest.mark.parametrize("transcript", transcript_params(CHAT_TRANSCRIPTS))
def test_chat_aggregates_equal_the_sdks_final_values(transcript: Transcript) -> None:
    observer = ChatObserver(TimeoutsConfig())
    framer = SSEFramer()
    for i in range(0, len(transcript.body), 97):
        observer.on_frames(framer.feed(transcript.body[i : i + 97]), float(i))
    final = sdk_final(transcript.body)
    texts = {c.index: c.message.content for c in final.choices if c.message.content}
    calls = {
        (c.index, j): (call.id, call.function.name, call.function.arguments)
        for c in final.choices
        for j, call in enumerate(c.message.tool_calls or [])
    }
    assert observer.texts == texts
    assert {
        k: (v["id"], v["name"], v["arguments"]) for k, v in observer.tool_calls.items()
    } == calls
    outcome = Outcome("POST", CHAT)
    observer.fill(outcome)
    assert [(c.name, c.arguments_length) for c in outcome.calls] == [
        (name, len(arguments)) for _, name, arguments in calls.values()
    ]
    if transcript.name == "chat_tool_call_single.sse":
        assert outcome.usage is not None and outcome.usage["total_tokens"] > 0


# --- deadlines on a virtual clock (first_byte 10, tool_arguments 20, idle 30) ---------------


def error_then_done(body: bytes) -> dict[str, Any]:
    """The synthesized tail: one error chunk, then [DONE]."""
    frames = data_frames(body, whole=False)
    assert frames[-1].data == b"[DONE]"
    error: dict[str, Any] = json.loads(frames[-2].data or b"")
    assert set(error) == {"error"}
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["type"] == "server_error"
    return error["error"]


async def test_stall_mid_tool_arguments(autojump_clock: MockClock) -> None:
    script = Script(steps=[Send(ROLE + b"".join(WEATHER[:2])), Sleep(4), Send(WEATHER[2]), Stall()])
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.elapsed == 24.0
    assert exchange.body.startswith(ROLE + b"".join(WEATHER))
    error = error_then_done(exchange.body)
    assert error["message"] == (
        "upstream stalled for 20.0 s while streaming arguments of tool call get_weather (call_0)"
    )
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.STALLED_TOOL_ARGUMENTS
    assert exchange.outcome.stalled_item == "tool call get_weather (call_0)"


async def test_parallel_calls_stream_one_after_another_and_each_is_guarded(
    autojump_clock: MockClock,
) -> None:
    # Chat streams a choice's calls one after another: call 0 whole, then call 1. A call
    # that takes longer than tool_arguments overall is fine while its fragments flow,
    # and a later call never makes an earlier, finished one look stalled.
    steps: list[Any] = [
        Send(ROLE + call_start(0, "a") + call_args(0, '{"x": 1}')),
        Send(call_start(1, "b")),
    ]
    for _ in range(10):  # 30 s of call 1, a fragment every 3 s
        steps += [Sleep(3), Send(call_args(1, "x"))]
    healthy = Script(steps=[*steps, Send(chunk(finish="tool_calls") + DONE)])
    async with MemoryProxy([healthy]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == healthy.body
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED

    # call 1 goes silent at t=30: it is the one named, 20 s later
    async with MemoryProxy([Script(steps=[*steps, Stall()])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.elapsed == 50.0
    assert exchange.outcome is not None and exchange.outcome.stalled_item == "tool call b (call_1)"

    # text after a whole call: the call is done, only idle is left
    text_after = Script(
        steps=[
            Send(ROLE + call_start(0, "a") + call_args(0, "{}")),
            Send(chunk({"content": "ok"})),
            Stall(),
        ]
    )
    async with MemoryProxy([text_after]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.elapsed == 30.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_IDLE

    # once the choice finishes, no call is guarded: only idle (30 s) is left before [DONE]
    finished = Script(
        steps=[
            Send(ROLE + call_start(0, "a") + call_args(0, "{}")),
            Send(chunk(finish="tool_calls")),
            Stall(),
        ]
    )
    async with MemoryProxy([finished]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.elapsed == 30.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_IDLE
    assert error_then_done(exchange.body)["message"] == (
        "upstream sent nothing for 30.0 s (after 4 events)"
    )


async def test_interleaved_calls_keep_their_arguments(autojump_clock: MockClock) -> None:
    body = b"".join(
        [
            ROLE,
            call_start(0, "a"),
            call_start(1, "b"),
            call_args(0, '{"x"'),
            call_args(1, '{"y"'),
            call_args(0, ":1}"),
            call_args(1, ":2}"),
            chunk(finish="tool_calls"),
            DONE,
        ]
    )
    async with MemoryProxy([Script(steps=[Send(body)])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.outcome is not None
    assert [(c.name, c.arguments_length) for c in exchange.outcome.calls] == [("a", 7), ("b", 7)]
    assert exchange.outcome.anomalies == []


async def test_an_error_event_is_terminal_whatever_its_data(autojump_clock: MockClock) -> None:
    error = b"event: error\ndata: upstream gateway timeout\n\n"
    async with MemoryProxy([Script(steps=[Send(ROLE + error), Stall()])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == ROLE + error
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.FAILED


async def test_stall_mid_text_is_idle(autojump_clock: MockClock) -> None:
    script = Script(steps=[Send(ROLE + chunk({"content": "今天"})), Stall()])
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.elapsed == 30.0
    assert error_then_done(exchange.body)["message"] == (
        "upstream sent nothing for 30.0 s while streaming text of choice 0"
    )


@pytest.mark.parametrize("ending", [None, Close()])
async def test_no_done_before_eof_gets_a_terminal(autojump_clock: MockClock, ending: Any) -> None:
    steps: list[Any] = [Send(b"".join(WEATHER_STREAM[:-1]))]
    if ending is not None:
        steps.append(ending)
    async with MemoryProxy([Script(steps=steps)]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body.startswith(b"".join(WEATHER_STREAM[:-1]))
    assert "before the response completed" in error_then_done(exchange.body)["message"]
    assert exchange.outcome is not None
    assert exchange.outcome.kind in (OutcomeKind.UPSTREAM_EOF, OutcomeKind.UPSTREAM_RESET)


async def test_gaps_under_the_deadlines_pass_untouched(autojump_clock: MockClock) -> None:
    steps: list[Any] = [Send(ROLE)]
    for part in WEATHER:
        steps += [Sleep(19.9), Send(part)]
    # the call stays open (guarded) until finish_reason; after it only idle is left
    steps += [
        Sleep(19.9),
        Send(chunk(finish="tool_calls")),
        Sleep(29.9),
        Send(b": ping\n\n"),
        Sleep(29.9),
        Send(DONE),
    ]
    script = Script(steps=steps)
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == script.body
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_an_in_band_error_is_terminal(autojump_clock: MockClock) -> None:
    error = (
        b'event: error\ndata: {"error":{"message":"bad tool","type":"invalid_request_error"}}\n\n'
    )
    async with MemoryProxy([Script(steps=[Send(ROLE + error), Stall()])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == ROLE + error  # nothing appended: the client has its error
    assert exchange.elapsed == 1.0
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.FAILED
    assert exchange.outcome.detail == "bad tool"


async def test_a_new_id_on_a_reused_index_is_a_new_call(autojump_clock: MockClock) -> None:
    second = chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "other", "arguments": "{}"},
                }
            ]
        }
    )
    body = (
        ROLE + call_start(0, "a") + call_args(0, "{}") + second + chunk(finish="tool_calls") + DONE
    )
    async with MemoryProxy([Script(steps=[Send(body)])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.outcome is not None
    assert [(c.name, c.call_id) for c in exchange.outcome.calls] == [
        ("a", "call_0"),
        ("other", "call_9"),
    ]


# --- the official openai SDK through a real server ------------------------------------------


def iterate_chat(base_url: str) -> tuple[list[Any], BaseException | None]:
    client = openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0, timeout=20)
    chunks: list[Any] = []
    try:
        for c in client.chat.completions.create(**REQUEST):
            chunks.append(c)
    except Exception as exc:
        return chunks, exc
    return chunks, None


async def test_sdk_raises_api_error_on_a_stall_in_tool_arguments(
    start_upstream: Any, proxai_for: Any
) -> None:
    # What the SDK makes of the stall is the test (its instant is on the virtual clock
    # above): only tool_arguments is short, every other deadline far.
    upstream = await start_upstream([Script(steps=[Send(ROLE + b"".join(WEATHER[:2])), Stall()])])
    async with proxai_for(upstream, timeouts=stall_timeouts("tool_arguments")) as px:
        started = trio.current_time()
        with trio.fail_after(15):
            chunks, error = await trio.to_thread.run_sync(iterate_chat, px.base_url)
        elapsed = trio.current_time() - started
    assert len(chunks) == 3
    assert isinstance(error, openai.APIError)
    assert error.message == (
        "upstream stalled for 0.3 s while streaming arguments of tool call get_weather (call_0)"
    )
    assert elapsed < 5  # the deadline, not the SDK's 600 s


async def test_sdk_reads_healthy_parallel_calls(start_upstream: Any, proxai_for: Any) -> None:
    body = b"".join(
        [
            ROLE,
            call_start(0, "a"),
            call_start(1, "b"),
            call_args(0, '{"x":1}'),
            call_args(1, '{"y":2}'),
            chunk(finish="tool_calls"),
            DONE,
        ]
    )
    upstream = await start_upstream([Script.sse([body], chunk_size=50)])
    # A healthy stream on real sockets: deadlines far above a loaded machine's pauses (with
    # a 0.6 s idle, one full run in seven answered 504 before the first event).
    async with proxai_for(upstream, timeouts=REAL_TIMEOUTS) as px:
        chunks, error = await trio.to_thread.run_sync(iterate_chat, px.base_url)
        (outcome,) = await px.wait_for_outcomes(1)
    assert error is None
    assert len(chunks) == 6
    assert outcome.kind is OutcomeKind.COMPLETED
    assert [(c.name, c.arguments_length) for c in outcome.calls] == [("a", 7), ("b", 7)]


async def test_malformed_chat_body_is_400_naming_the_path(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/chat/completions",
            json={
                "model": "m",
                "messages": [],
                "tools": [{"type": "function", "function": {"name": 1}}],
            },
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools[0].function.name"
    assert upstream.requests == []


SIX = [ROLE, *(chunk({"content": f"t{i}"}) for i in range(4)), chunk(finish="stop") + DONE]


async def test_total_while_the_client_is_stuck_still_delivers_the_terminal(
    autojump_clock: MockClock,
) -> None:
    # The client stops reading right away; the upstream sends the whole (short) stream.
    # total passes while proxai holds the last batch, [DONE] included: it is delivered
    # when the client reads again, and the stream counts as complete.
    script = Script(steps=[Send(p) for p in SIX])
    async with MemoryProxy([script], total=100.0) as proxy:
        exchange = await proxy.request(
            REQUEST, path=CHAT, read_delay=lambda n: 200.0 if n == 0 else 0.0
        )
    assert exchange.body == script.body
    assert not exchange.aborted
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED


async def test_a_stalled_client_gets_what_was_held_then_the_error(
    autojump_clock: MockClock,
) -> None:
    endless = [Send(ROLE)] + [
        s for i in range(400) for s in (Sleep(1), Send(chunk({"content": "x"})))
    ]
    async with MemoryProxy([Script(steps=endless)], client_write=50.0) as proxy:
        exchange = await proxy.request(
            REQUEST, path=CHAT, read_delay=lambda n: 100.0 if n == 0 else 0.0
        )
    assert not exchange.aborted
    error = error_then_done(exchange.body)
    assert error["message"] == "the client read nothing for 50.0 s (proxai client_write timeout)"
    # what the upstream sent before the release reached the client, in order (but for
    # the one read the reader held when it was cancelled)
    whole = b"".join(s.data for s in endless if isinstance(s, Send))
    delivered = exchange.body[: exchange.body.rindex(b'data: {"error"')]
    assert whole.startswith(delivered)
    assert len(delivered) >= proxy.transport.requests[0].bytes_sent - len(chunk({"content": "x"}))
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.CLIENT_STALLED


async def test_no_client_key_header_reaches_the_upstream(autojump_clock: MockClock) -> None:
    headers = [
        (b"authorization", b"Bearer client-1"),
        (b"x-api-key", b"client-2"),
        (b"api-key", b"client-3"),  # Azure OpenAI clients
        (b"x-goog-api-key", b"client-4"),
        (b"proxy-authorization", b"Basic client-5"),
    ]
    async with MemoryProxy([Script.json({"ok": True})]) as proxy:
        await proxy.request({**REQUEST, "stream": False}, path=CHAT, headers=headers)
    sent = proxy.transport.requests[0].headers
    assert not any(b"client-" in value for _, value in sent)
    assert (b"authorization", b"Bearer sk-up") in sent


USAGE = chat_chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13})


@pytest.mark.parametrize(
    ("finish", "kind"), [("tool_calls", OutcomeKind.COMPLETED), ("length", OutcomeKind.INCOMPLETE)]
)
@pytest.mark.parametrize(("then", "after"), [(Stall(), 1.0), (Close(), 0.0)])
async def test_silence_after_the_usage_chunk_ends_the_stream_cleanly(
    autojump_clock: MockClock, finish: str, kind: OutcomeKind, then: Any, after: float
) -> None:
    """The usage chunk (``choices: []``) after every choice's ``finish_reason`` is the
    last one OpenAI sends before ``[DONE]``: an upstream silent (or gone) after it has
    nothing left to say, so the client gets the ``[DONE]`` it was owed, after the
    after-terminal grace (or at once), never an error chunk after a response it has
    whole (found by the no-hang machine's long profile, ``chat-chat-sse-tools0``)."""
    sent = ROLE + b"".join(WEATHER) + chunk(finish=finish) + USAGE
    async with MemoryProxy([Script(steps=[Send(sent), then])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == sent + DONE
    assert exchange.elapsed == after
    assert exchange.outcome is not None and exchange.outcome.kind is kind
    assert sdk_final(exchange.body).choices[0].message.tool_calls[0].function.arguments == (
        '{"city":"北京"}'
    )


async def test_a_usage_chunk_while_a_choice_is_open_is_not_the_end(
    autojump_clock: MockClock,
) -> None:
    """vLLM's continuous usage, or a usage chunk mid-stream: choice 1 has not finished,
    so silence after it is still a stall of that choice."""
    sent = ROLE + chunk({"content": "a"}, index=1) + chunk(finish="stop") + USAGE
    async with MemoryProxy([Script(steps=[Send(sent), Stall()])]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body.startswith(sent)
    assert exchange.elapsed == 30.0
    assert "choice 1" in error_then_done(exchange.body)["message"]
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.STALLED_IDLE


async def test_done_after_the_usage_chunk_is_passed_through_once(
    autojump_clock: MockClock,
) -> None:
    script = Script.sse([ROLE, *WEATHER, chunk(finish="tool_calls"), USAGE, DONE])
    async with MemoryProxy([script]) as proxy:
        exchange = await proxy.request(REQUEST, path=CHAT)
    assert exchange.body == script.body
    assert exchange.outcome is not None and exchange.outcome.kind is OutcomeKind.COMPLETED
