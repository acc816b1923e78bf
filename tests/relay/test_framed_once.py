"""Each event is framed once, on every path (issue 37 item 1).

The reader frames the upstream's event stream; everything after it (the observer, a
translator, the store, the socket carrier, the id claims) takes those frames, and a
translator's or proxai's own events are made as frames. This counts the events every
:class:`~proxai.wire.sse.SSEFramer` in proxai's own code (not its test helpers)
dispatches during one response, and holds it to one per upstream event (none over an
upstream WebSocket, whose messages are events already).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing

from proxai.outcome import Outcome, OutcomeKind
from proxai.testing import chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import open_memory_socket
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn1_script
from proxai.testing.upstream import Script
from proxai.testing.ws_upstream import ScriptedSocketUpstream, SocketScript
from proxai.wire.sse import SSEFrame, SSEFramer
from tests.service.test_stored_responses import chat_proxy
from tests.service.test_websocket import CHAT, create

CHAT_PATH = "/v1/chat/completions"
CHAT_REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
CHAT_STREAM = [
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"content": "Hel"}),
    chat_chunk({"content": "lo"}),
    chat_chunk({}, "stop"),
    chat_chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
    b"data: [DONE]\n\n",
]


@contextmanager
def framings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The module of each event proxai's own code framed, one entry per event."""
    counted: list[str] = []
    feed = SSEFramer.feed

    def counting(self: SSEFramer, data: bytes) -> list[SSEFrame]:
        frames = feed(self, data)
        module = sys._getframe(1).f_globals.get("__name__", "")
        if module.startswith("proxai.") and not module.startswith("proxai.testing"):
            counted.extend(module for frame in frames if frame.data is not None)
        return frames

    monkeypatch.setattr(SSEFramer, "feed", counting)
    yield counted


def responses(outcomes: Sequence[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.kind is not None and o.method in ("POST", "response.create")]


def assert_once(counted: list[str], outcomes: Sequence[Outcome], events: int) -> None:
    (outcome,) = responses(outcomes)
    assert outcome.kind is OutcomeKind.COMPLETED
    assert outcome.events == events  # the upstream's events, each read by the relay
    assert len(counted) == events, f"{len(counted)} framings of {events} events: {counted}"
    assert set(counted) <= {"proxai.relay.reader"}


async def test_http_pass_through(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with MemoryProxy([turn1_script()]) as proxy:
        with framings(monkeypatch) as counted:
            exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.events() == TURN1_EVENTS
    assert_once(counted, proxy.outcomes, len(TURN1_EVENTS))


async def test_http_pass_through_whose_ids_are_claimed_for_a_tenant(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several client keys: the upstream's ids are claimed as the events pass."""
    keys = {"keys": ["sk-a", "sk-b"]}
    headers = [(b"authorization", b"Bearer sk-a")]
    async with MemoryProxy([turn1_script()], auth=keys, state={}) as proxy:
        with framings(monkeypatch) as counted:
            exchange = await proxy.request(TURN1_REQUEST, headers=headers)
    assert exchange.events() == TURN1_EVENTS
    assert_once(counted, proxy.outcomes, len(TURN1_EVENTS))


async def test_http_chat_pass_through(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Script.sse(CHAT_STREAM)
    async with MemoryProxy([script], upstream={"protocol": "openai_chat"}) as proxy:
        with framings(monkeypatch) as counted:
            exchange = await proxy.request(CHAT_REQUEST, path=CHAT_PATH)
    assert exchange.body == script.body
    assert_once(counted, proxy.outcomes, len(CHAT_STREAM))


async def test_http_translated_and_stored(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Responses client over a Chat upstream: the client's events are made as frames,
    and the store reads those, not the body."""
    async with chat_proxy() as proxy:
        with framings(monkeypatch) as counted:
            exchange = await proxy.request(TURN1_REQUEST)
    assert exchange.events()[-1]["type"] == "response.completed"
    (outcome,) = responses(proxy.outcomes)
    assert outcome.stored_as is not None
    assert_once(counted, proxy.outcomes, outcome.events)
    assert outcome.events > 0


@pytest.mark.parametrize("upstream", ["responses", "chat"])
async def test_socket_turn_over_http(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, upstream: str
) -> None:
    """The socket carrier sends each event's data as a frame: the relay's frames, so a
    stored translated turn (its socket's record and the store's) frames nothing more."""
    kwargs: dict[str, Any] = (
        {}
        if upstream == "responses"
        else {"upstreams": CHAT, "routes": [{"model": "*", "upstreams": ["chat"]}]}
    )
    responder: Any = [turn1_script()]
    if upstream == "chat":
        from tests.service.test_websocket import chat_turns

        responder = chat_turns
    async with MemoryProxy(responder, **kwargs) as proxy, open_memory_socket(proxy.app) as ws:
        with framings(monkeypatch) as counted:
            await ws.send(create(TURN1_REQUEST))
            got = await ws.response()
    assert got[-1]["type"] == "response.completed"
    (outcome,) = responses(proxy.outcomes)
    if upstream == "responses":
        assert got == TURN1_EVENTS
    assert_once(counted, proxy.outcomes, outcome.events)


async def test_socket_turn_over_an_upstream_socket_frames_nothing(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upstream WebSocket's messages are events: made as frames, never parsed as SSE."""
    upstream = ScriptedSocketUpstream([SocketScript.events(TURN1_EVENTS)])
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with (
            MemoryProxy(
                [turn1_script()], upstream={"websocket": True}, socket_upstream=upstream
            ) as proxy,
            open_memory_socket(
                proxy.app, headers=[(b"openai-beta", b"responses_websockets=2026-02-06")]
            ) as ws,
        ):
            with framings(monkeypatch) as counted:
                await ws.send(create(TURN1_REQUEST))
                assert await ws.response() == TURN1_EVENTS
        nursery.cancel_scope.cancel()
    (outcome,) = responses(proxy.outcomes)
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.events == len(TURN1_EVENTS)
    assert counted == []
