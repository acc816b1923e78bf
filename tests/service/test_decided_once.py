"""What the pipeline decides about a request it decides once (issue 37): a chained
``POST /v1/responses`` is routed once, its tenant computed once and its body parsed
once, history expansion included; a stored response's path is matched once; a
socket's turn is routed once and parses nothing past its frame, its tenant the
socket's. Counted by wrapping the one function each decision goes through."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio.testing

import proxai.service.plan as plan_module
from proxai.policy.auth import ClientKeys
from proxai.policy.routes import Router
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import open_memory_socket
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST

from .test_websocket import CHAT, HANDSHAKE, chat_turns, create

KEY = [(b"authorization", b"Bearer sk-a")]
AUTH = {"keys": ["sk-a"]}
ROUTES = [{"model": "*", "upstreams": ["chat"]}]


class Counts:
    """Calls of each wrapped function since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return function(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.calls = {}

    def __getitem__(self, name: str) -> int:
        return self.calls.get(name, 0)


class _CountedPattern:
    """A compiled pattern whose matches are counted."""

    def __init__(self, pattern: Any, counts: Counts) -> None:
        self.fullmatch = counts.wrap("stored path matched", pattern.fullmatch)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    counts = Counts()
    monkeypatch.setattr(Router, "route_for", counts.wrap("routed", Router.route_for))
    monkeypatch.setattr(ClientKeys, "check", counts.wrap("tenant", ClientKeys.check))
    monkeypatch.setattr(
        plan_module, "load_json_object", counts.wrap("parsed", plan_module.load_json_object)
    )
    pattern = _CountedPattern(plan_module._STORED_REF, counts)
    monkeypatch.setattr(plan_module, "_STORED_REF", pattern)
    yield counts


def chat_proxy() -> MemoryProxy:
    """A Chat-only upstream: proxai holds the responses, a chained turn is expanded."""
    return MemoryProxy(chat_turns, upstreams=CHAT, routes=ROUTES, auth=AUTH)


async def test_a_chained_post_is_routed_keyed_and_parsed_once(
    autojump_clock: trio.testing.MockClock, counts: Counts
) -> None:
    async with chat_proxy() as proxy:
        first = await proxy.request(TURN1_REQUEST, headers=KEY)
        rid = first.events()[-1]["response"]["id"]
        counts.reset()
        second = await proxy.request({**TURN2_REQUEST, "previous_response_id": rid}, headers=KEY)
        assert second.events()[-1]["type"] == "response.completed"
    # Expanded from the stored turn: the upstream got the whole conversation.
    roles = [m["role"] for m in proxy.transport.requests[1].json()["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert counts.calls == {"routed": 1, "tenant": 1, "parsed": 1}


async def test_a_stored_response_path_is_matched_and_routed_once(
    autojump_clock: trio.testing.MockClock, counts: Counts
) -> None:
    async with chat_proxy() as proxy:
        rid = (await proxy.request(TURN1_REQUEST, headers=KEY)).events()[-1]["response"]["id"]
        for path in (f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
            counts.reset()
            got = await proxy.request(b"", method="GET", path=path, headers=KEY)
            assert got.status == 200
            assert counts.calls == {"stored path matched": 1, "routed": 1, "tenant": 1}


async def test_a_socket_turn_is_routed_once_and_keyed_by_its_socket(
    autojump_clock: trio.testing.MockClock, counts: Counts
) -> None:
    async with (
        chat_proxy() as proxy,
        open_memory_socket(proxy.app, headers=[*HANDSHAKE, *KEY]) as ws,
    ):
        await ws.send(create(TURN1_REQUEST))
        turn1 = await ws.response()
        assert counts["tenant"] == 1  # the upgrade's
        counts.reset()
        rid = turn1[-1]["response"]["id"]
        await ws.send(create({**TURN2_REQUEST, "previous_response_id": rid}))
        assert (await ws.response())[-1]["type"] == "response.completed"
    # The turn's body is its frame's parse, the socket's conversation expanded into it.
    assert counts.calls == {"routed": 1}
