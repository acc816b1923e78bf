"""``[limits]`` through the whole app, in memory on a virtual clock: 429 before the body
is read, in each API's shape and over a socket, Retry-After to the millisecond, the
``x-ratelimit-*`` headers on every answer, tokens charged from each protocol's usage
(translated or not, or estimated when a stream is cut), slots freed on every ending,
the fleet's 503, the outcome record, the metric and the live view."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from proxai.outcome import UPSTREAM_CUT_SHORT, OutcomeKind
from proxai.policy.limits import MemoryLimiter
from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import open_memory_socket
from proxai.testing.seed import TURN1_REQUEST
from proxai.testing.upstream import Close, Send, Stall, chat_chunk, sse_event
from tests.helpers import (
    ANTHROPIC_UPSTREAM,
    MESSAGES,
    REQUEST,
    TOKENS_IN,
    TOKENS_OUT,
    WHOLE,
    api_request,
    usage_answer,
)
from tests.service.test_websocket import create

KEYS = {"auth": {"keys": ["sk-alpha", "sk-beta"]}}
ALPHA = [(b"authorization", b"Bearer sk-alpha")]
BETA = [(b"authorization", b"Bearer sk-beta")]
ALPHA_LABEL = "sha256:" + hashlib.sha256(b"sk-alpha").hexdigest()[:12]


def completed(tokens_in: int = 30, tokens_out: int = 20) -> Script:
    """A Responses stream whose usage says ``tokens_in + tokens_out``."""
    usage = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }
    response = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
    return Script.sse(
        [
            {"type": "response.created", "sequence_number": 0, "response": response},
            {
                "type": "response.completed",
                "sequence_number": 1,
                "response": {**response, "usage": usage},
            },
        ]
    )


def limits(**entry: Any) -> dict[str, Any]:
    fleet = entry.pop("fleet", 0)
    return {"fleet_max_concurrent_streams": fleet, "keys": [{"key": "sk-alpha", **entry}]}


def header(exchange: Any, name: bytes) -> str | None:
    found = [v.decode() for n, v in exchange.headers if n == name]
    assert len(found) <= 1, f"{name!r} sent {len(found)} times"
    return found[0] if found else None


async def test_requests_over_the_minute_get_429_before_the_body_with_retry_after(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy(
        lambda _: completed(), limits=limits(requests_per_minute=3), **KEYS
    ) as proxy:
        start = trio.current_time()
        passed = []
        for _ in range(3):
            passed.append(await proxy.request(TURN1_REQUEST, headers=ALPHA))
            await trio.sleep(10)
        # Not even half its body arrived: had proxai waited for it, the answer were a 408.
        refused = await proxy.request(TURN1_REQUEST, headers=ALPHA, body_stalls=True)
        other_key = await proxy.request(TURN1_REQUEST, headers=BETA)  # no limits of its own
        await trio.sleep_until(start + 60)
        again = await proxy.request(TURN1_REQUEST, headers=ALPHA)
    assert [e.status for e in passed] == [200, 200, 200]
    assert [header(e, b"x-ratelimit-remaining-requests") for e in passed] == ["2", "1", "0"]
    assert header(passed[0], b"x-ratelimit-limit-requests") == "3"
    assert header(passed[2], b"x-ratelimit-reset-requests") == "40s"  # the first leaves at 60
    assert refused.status == 429 and refused.elapsed == 0
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "requests per minute: limit 3, used 3" in error["message"]
    assert "sk-alpha" not in refused.body.decode()
    # 30 s after the first request: it leaves the window in 30 s.
    assert header(refused, b"retry-after") == "30"
    assert header(refused, b"retry-after-ms") == "30000"
    assert header(refused, b"x-ratelimit-remaining-requests") == "0"
    assert len(proxy.transport.requests) == 5  # the refused one never went upstream
    assert other_key.status == 200 and header(other_key, b"x-ratelimit-limit-requests") is None
    assert again.status == 200
    assert refused.outcome is not None
    assert refused.outcome.kind is OutcomeKind.RATE_LIMITED
    assert (refused.outcome.limited, refused.outcome.limit_key) == (
        "requests_per_minute",
        ALPHA_LABEL,
    )
    metrics = proxy.app._metrics
    assert metrics is not None
    exposition = metrics.exposition().decode()
    assert (
        f'proxai_limited_total{{key="{ALPHA_LABEL}",limit="requests_per_minute"}} 1.0' in exposition
    )


async def test_proxais_headers_replace_the_upstreams_own(autojump_clock: MockClock) -> None:
    upstream = Script.sse(
        [completed().body],
        headers=(
            ("content-type", "text/event-stream"),
            ("x-ratelimit-limit-requests", "5000"),
            ("x-ratelimit-remaining-tokens", "123"),
        ),
    )
    async with MemoryProxy([upstream], limits=limits(requests_per_minute=9), **KEYS) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, headers=ALPHA)
    assert header(exchange, b"x-ratelimit-limit-requests") == "9"
    assert header(exchange, b"x-ratelimit-remaining-tokens") == "123"  # no tpm: the upstream's


async def test_anthropic_routes_get_rate_limit_error(autojump_clock: MockClock) -> None:
    body = b"".join(WHOLE)
    async with MemoryProxy(
        [Script.sse([body])] * 2,
        upstreams=ANTHROPIC_UPSTREAM,
        limits={"keys": [{"key": "*", "requests_per_minute": 1}]},
    ) as proxy:
        ok = await proxy.request(REQUEST, path=MESSAGES)
        refused = await proxy.request(REQUEST, path=MESSAGES)
    assert ok.status == 200
    assert refused.status == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert header(refused, b"retry-after") == "60"


async def test_tokens_are_charged_from_usage_and_refuse_once_the_window_is_spent(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy(
        lambda _: completed(60, 40), limits=limits(tokens_per_minute=250), **KEYS
    ) as proxy:
        start = trio.current_time()
        passed = []
        for _ in range(3):  # 0, 100, 200 used before each: all have room
            passed.append(await proxy.request(TURN1_REQUEST, headers=ALPHA))
            await trio.sleep(5)
        refused = await proxy.request(TURN1_REQUEST, headers=ALPHA)  # 300 used
        await trio.sleep_until(start + 60)  # the first charge left: 200 < 250
        again = await proxy.request(TURN1_REQUEST, headers=ALPHA)
    assert [e.status for e in passed] == [200, 200, 200]
    assert [header(e, b"x-ratelimit-remaining-tokens") for e in passed] == ["250", "150", "50"]
    assert [e.outcome.charged_tokens for e in passed if e.outcome] == [100, 100, 100]
    assert refused.status == 429
    assert refused.json()["error"]["type"] == "tokens"
    assert header(refused, b"retry-after") == "45"  # 15 s after the first charge
    assert header(refused, b"x-ratelimit-limit-tokens") == "250"
    assert again.status == 200


async def test_tokens_of_a_translated_stream_are_the_upstreams_usage(
    autojump_clock: MockClock,
) -> None:
    """A Responses client on a Chat upstream: the Chat usage chunk is what is charged."""
    stream = Script.sse(
        [
            chat_chunk({"role": "assistant", "content": "hi"}),
            chat_chunk({}, "stop"),
            chat_chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 4}),
            b"data: [DONE]\n\n",
        ]
    )
    async with MemoryProxy(
        [stream],
        upstream={"protocol": "openai_chat"},
        limits={"keys": [{"key": "*", "tokens_per_minute": 1000}]},
    ) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.status == 200 and exchange.outcome is not None
    assert exchange.outcome.translation == "responses→chat"
    assert exchange.outcome.charged_tokens == 15


async def test_a_stream_cut_before_its_usage_is_charged_an_estimate(
    autojump_clock: MockClock,
) -> None:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    events = [{"type": "response.created", "sequence_number": 0, "response": response}]
    events += [
        {"type": "response.output_text.delta", "sequence_number": i, "delta": "x"}
        for i in range(1, 9)
    ]
    cut = Script.sse(events, then=[Close()])
    async with MemoryProxy(
        [cut], limits={"keys": [{"key": "*", "tokens_per_minute": 1000}]}
    ) as proxy:
        exchange = await proxy.request(TURN1_REQUEST)
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind in UPSTREAM_CUT_SHORT
    body_bytes = len(json.dumps(TURN1_REQUEST, ensure_ascii=False).encode())
    assert outcome.charged_tokens == -(-body_bytes // 4) + outcome.events
    assert any("estimated from the bytes" in w for w in outcome.warnings)


async def test_key_streams_over_the_limit_get_429_and_come_back_on_every_ending(
    autojump_clock: MockClock,
) -> None:
    stalled = Script(steps=(Send(sse_event({"type": "response.created"})), Stall()))
    async with MemoryProxy(
        lambda _: stalled, limits=limits(max_concurrent_streams=2), **KEYS
    ) as proxy:
        results: list[Any] = []
        async with trio.open_nursery() as nursery:
            for hang_up in (5, 8):  # two streams held open, then the clients go away

                async def held(after: float = hang_up) -> None:
                    results.append(
                        await proxy.request(TURN1_REQUEST, headers=ALPHA, disconnect_after=after)
                    )

                nursery.start_soon(held)
            await trio.sleep(1)
            third = await proxy.request(TURN1_REQUEST, headers=ALPHA, disconnect_after=1)
            beta = await proxy.request(TURN1_REQUEST, headers=BETA, disconnect_after=1)
        fourth = await proxy.request(TURN1_REQUEST, headers=ALPHA, disconnect_after=1)
    assert third.status == 429
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert "concurrent streams: limit 2, open 2" in third.json()["error"]["message"]
    assert header(third, b"retry-after") == "1"
    assert third.outcome is not None and third.outcome.limited == "max_concurrent_streams"
    assert beta.status == 200  # another key's streams are its own
    assert fourth.status == 200  # both slots came back when their clients hung up


async def test_the_fleets_streams_over_its_limit_get_503(autojump_clock: MockClock) -> None:
    stalled = Script(steps=(Send(sse_event({"type": "response.created"})), Stall()))
    async with MemoryProxy([stalled] * 3, limits={"fleet_max_concurrent_streams": 1}) as proxy:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: proxy.request(TURN1_REQUEST, disconnect_after=5))
            await trio.sleep(1)
            refused = await proxy.request(TURN1_REQUEST)
        limiter = proxy.app._limits._limiter
        assert isinstance(limiter, MemoryLimiter) and limiter.state.fleet_streams == 0
    assert refused.status == 503
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "proxy_overloaded")
    assert "[limits] fleet_max_concurrent_streams" in error["message"]
    assert header(refused, b"retry-after") == "1"
    assert refused.outcome is not None
    assert refused.outcome.kind is OutcomeKind.OVERLOADED
    assert refused.outcome.limited == "fleet_max_concurrent_streams"


async def test_a_socket_turn_over_the_limit_is_an_error_frame_and_the_socket_goes_on(
    autojump_clock: MockClock,
) -> None:
    async with (
        MemoryProxy(
            lambda _: completed(), limits={"keys": [{"key": "*", "requests_per_minute": 1}]}
        ) as proxy,
        open_memory_socket(proxy.app) as socket,
    ):
        await socket.send(create(TURN1_REQUEST))
        frames = [await socket.frame() for _ in range(2)]
        await socket.send(create(TURN1_REQUEST))
        error = await socket.frame()
        await trio.sleep(60)
        await socket.send(create(TURN1_REQUEST))
        after = await socket.frame()
    assert [f["type"] for f in frames if isinstance(f, dict)] == [
        "response.created",
        "response.completed",
    ]
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["status"] == 429
    assert error["error"]["code"] == "rate_limit_exceeded"
    assert error["headers"]["retry-after"] == "60"
    assert isinstance(after, dict) and after["type"] == "response.created"
    limited = [o for o in proxy.outcomes if o.limited]
    assert [o.transport for o in limited] == ["websocket"]


async def test_the_live_view_shows_each_keys_use_by_name(autojump_clock: MockClock) -> None:
    entry = {"key": "sk-alpha", "name": "team-a", "requests_per_minute": 5}
    async with MemoryProxy(
        lambda _: completed(),
        limits={"keys": [entry]},
        **KEYS,
    ) as proxy:
        proxy.app._live_view._access.allows = lambda client: True  # type: ignore[method-assign]
        await proxy.request(TURN1_REQUEST, headers=ALPHA)
        await proxy.request(TURN1_REQUEST, headers=ALPHA)
        view = proxy.app._live_view._body()
    keys = json.loads(view)["keys"]
    assert keys == [
        {
            "key": "team-a",
            "requests": 2,
            "requests_per_minute": 5,
            "tokens": 0,
            "tokens_per_minute": None,
            "streams": 0,
            "max_concurrent_streams": None,
        }
    ]


# -- every path charges the upstream's usage (issue 38) --------------------------------

#: (client API, upstream protocol, the upstream's API): each client API passed through
#: and translated from each other API.
PATHS = [
    ("responses", "openai", "responses"),
    ("responses", "openai_chat", "chat"),
    ("responses", "anthropic_messages", "messages"),
    ("chat", "openai", "chat"),
    ("chat", "openai_responses", "responses"),
    ("chat", "anthropic_messages", "messages"),
    ("messages", "anthropic_messages", "messages"),
    ("messages", "openai_chat", "chat"),
    ("messages", "openai_responses", "responses"),
]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(("client", "protocol", "upstream_api"), PATHS)
async def test_every_api_streamed_or_whole_translated_or_not_charges_the_upstreams_usage(
    autojump_clock: MockClock, client: str, protocol: str, upstream_api: str, stream: bool
) -> None:
    """Issue 38: a whole (non-streamed) answer was charged an estimate from its bytes,
    not the usage its body reports."""
    path, body = api_request(client, stream)
    async with MemoryProxy(
        lambda _: usage_answer(upstream_api, stream),
        upstream={"protocol": protocol},
        limits={"keys": [{"key": "*", "tokens_per_minute": 1000}]},
    ) as proxy:
        first = await proxy.request(body, path=path)
        second = await proxy.request(body, path=path)
    assert first.status == 200, first.body
    assert first.outcome is not None
    assert (first.outcome.translation is None) == (client == upstream_api)
    assert first.outcome.charged_tokens == TOKENS_IN + TOKENS_OUT, first.outcome.warnings
    # Read into one shape by the upstream API's reader, whichever API that is.
    tokens = first.outcome.tokens
    assert tokens is not None and (tokens.input_tokens, tokens.output_tokens) == (
        TOKENS_IN,
        TOKENS_OUT,
    )
    assert not any("estimated from the bytes" in w for w in first.outcome.warnings)
    # The limiter was charged it: the next request sees 400 of the 1000 used.
    assert header(second, b"x-ratelimit-remaining-tokens") == "600"
