"""MemorySocket behaves as hypercorn does once the client leaves: what the app sends to
a gone client is dropped at once (a send blocked on the client's window returns), and a
close frame is answered before the app is told."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from proxai.testing.memory_socket import Closed, open_memory_socket


def app_sending(count: int, sent: list[int], told: list[dict[str, Any]]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        async with trio.open_nursery() as nursery:

            async def listen() -> None:
                told.append(await receive())

            nursery.start_soon(listen)
            for i in range(count):
                await send({"type": "websocket.send", "text": str(i)})
                sent.append(i)

    return app


async def test_a_send_blocked_on_a_gone_client_returns_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent: list[int] = []
    told: list[dict[str, Any]] = []
    async with open_memory_socket(app_sending(10, sent, told), buffer=2) as ws:
        await ws.accepted.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [0, 1]  # the third send waits on the full window
        left = trio.current_time()
        await ws.close()
        with trio.fail_after(5):
            await ws.finished.wait()
        assert trio.current_time() == left
    assert sent == list(range(10))
    assert [text for _, text in ws.delivered] == ["0", "1"]  # nothing after the hang-up
    assert told == [{"type": "websocket.disconnect", "code": 1000}]


async def test_a_close_frame_is_answered_then_the_app_is_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent: list[int] = []
    told: list[dict[str, Any]] = []
    async with open_memory_socket(app_sending(3, sent, told), buffer=8) as ws:
        await ws.accepted.wait()
        await trio.testing.wait_all_tasks_blocked()
        await ws.send_close(1000)
        frames = [(await ws.receive())[1] for _ in range(4)]
    assert frames == ["0", "1", "2", Closed(1000)]
    assert ws.close_frame_code == 1000
    assert told == [{"type": "websocket.disconnect", "code": 1000}]
