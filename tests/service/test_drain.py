"""Draining: a request admitted before the drain is served, even when its body comes after."""

from __future__ import annotations

import json
from typing import Any

import trio
from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes

TURN1 = turn_bytes(TURN1_EVENTS)


async def test_a_request_admitted_before_the_drain_is_served_after_its_body(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script.sse([TURN1])], server={"drain_timeout": 10.0}) as proxy:
        body = json.dumps(TURN1_REQUEST).encode()
        parts = [body[:5], body[5:]]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if parts:
                await trio.sleep(0.5)
                part = parts.pop(0)
                return {"type": "http.request", "body": part, "more_body": bool(parts)}
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/responses",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
        }
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proxy.app, scope, receive, send)
            await trio.sleep(0.1)
            assert proxy.app.in_flight == 1
            nursery.start_soon(proxy.app.drain)
    assert sent[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == TURN1
