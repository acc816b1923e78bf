"""The socket's send watch (``ClientSocket.watch_sends``): one task per socket bounds
every frame of a turn, instead of a cancel scope per frame. Virtual time, exact instants."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio
import trio.testing

from proxai.service.socket_io import ClientSocket

BOUND = 6.0


class _Client:
    """An ASGI send whose every frame takes the time ``delays`` gives it (``inf``:
    the client never reads that frame)."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.sent: list[tuple[float, str]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await trio.sleep(self.delays[len(self.sent)] if self.delays else 0)
        self.sent.append((trio.current_time(), message["text"]))

    async def receive(self) -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError


@contextmanager
def _counted_wakes(limit: int | None = None) -> Iterator[list[float]]:
    """Every ``trio.sleep_until`` while inside (the watch's wakes), by deadline; more
    than ``limit`` fails at once (a watch spinning never lets the clock move)."""
    wakes: list[float] = []
    original = trio.sleep_until

    async def counted(deadline: float) -> None:
        wakes.append(deadline)
        if limit is not None and len(wakes) > limit:
            raise AssertionError("the watch spins on a frame it already cut")
        await original(deadline)

    trio.sleep_until = counted  # type: ignore[assignment]
    try:
        yield wakes
    finally:
        trio.sleep_until = original


async def _turn(socket: ClientSocket, frames: int) -> tuple[int, float]:
    """Send ``frames`` frames in one turn's scope; how many went and when it ended."""
    sends = socket.turn_sends = trio.CancelScope()
    sent = 0
    with sends:
        for i in range(frames):
            await socket.send_text(b"frame %d" % i)
            sent += 1
    return sent, trio.current_time()


async def test_a_client_that_reads_slowly_but_steadily_is_never_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Every frame takes 3/4 of the bound: 10 frames, 45 s in all, none cut.
    client = _Client([0.75 * BOUND] * 10)
    socket = ClientSocket(client.send, client.receive, max_message_bytes=1 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(socket.watch_sends, BOUND)
        start = trio.current_time()
        sent, ended = await _turn(socket, 10)
        nursery.cancel_scope.cancel()
    assert sent == 10 and len(client.sent) == 10
    assert ended - start == 10 * 0.75 * BOUND
    assert not socket.broken


async def test_a_frame_blocked_past_the_bound_is_cut_at_its_instant(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Three quick frames, then one the client never takes: cut BOUND after it began.
    client = _Client([1.0, 1.0, 1.0, float("inf")])
    socket = ClientSocket(client.send, client.receive, max_message_bytes=1 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(socket.watch_sends, BOUND)
        start = trio.current_time()
        with trio.fail_after(100):  # without the watch the turn would wait forever
            sent, ended = await _turn(socket, 5)
        nursery.cancel_scope.cancel()
    assert sent == 3
    assert ended - start == 3.0 + BOUND
    assert socket.broken
    # A broken socket sends nothing more.
    await socket.send_text(b"late")
    assert len(client.sent) == 3


async def test_the_watch_wakes_once_per_bound_while_frames_flow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 1,000 frames 0.01 s apart: the watch checks the frame in flight a handful of
    # times (once per BOUND of sending), not once per frame.
    client = _Client([0.01] * 1000)
    socket = ClientSocket(client.send, client.receive, max_message_bytes=1 << 20)
    with _counted_wakes() as wakes:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(socket.watch_sends, BOUND)
            sent, _ = await _turn(socket, 1000)
            nursery.cancel_scope.cancel()
    assert sent == 1000 and not socket.broken
    assert 1 <= len(wakes) <= 1000 * 0.01 / BOUND + 2


async def test_a_frame_blocked_outside_a_turn_is_marked_once_not_spun_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # No turn's scope to cancel (proxai's own frame between turns): the watch marks the
    # socket broken once and waits for the next send; it does not loop on the same one.
    client = _Client([3 * BOUND])
    socket = ClientSocket(client.send, client.receive, max_message_bytes=1 << 20)
    with _counted_wakes(limit=10) as wakes:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(socket.watch_sends, BOUND)
            await socket.send_text(b"between turns")
            await trio.sleep(BOUND)
            nursery.cancel_scope.cancel()
    assert socket.broken and len(wakes) == 1
