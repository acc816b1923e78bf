"""The upstream clock stands still while the reader is blocked on a full channel, and
converts a deadline on it to trio's time (the relay's scope) with no clock read unless
the reader is blocked now."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from proxai.relay.clock import UpstreamClock
from proxai.relay.messages import Body


def _run_clock(_: MockClock) -> UpstreamClock:
    return UpstreamClock(trio.lowlevel.current_clock().current_time)


async def test_a_deadline_converts_by_the_time_paused(autojump_clock: MockClock) -> None:
    clock = _run_clock(autojump_clock)
    send, receive = trio.open_memory_channel[object](0)
    start = trio.current_time()
    assert clock.trio_time(clock.now() + 5.0) == pytest.approx(start + 5.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.send_paused, send, Body(b"x", (), 0.0))
        await trio.sleep(3.0)  # the reader is blocked on the full channel meanwhile
        # Blocked now: the clock reads 0 s more than at the start, and a deadline 5 s
        # on from now on it is 5 s on in trio's time as well.
        assert clock.now() == pytest.approx(start)
        assert clock.trio_time(clock.now() + 5.0) == pytest.approx(trio.current_time() + 5.0)
        await receive.receive()
    # Not blocked: 3 s were paused, so the upstream clock is 3 s behind trio's.
    assert clock.now() == pytest.approx(trio.current_time() - 3.0)
    assert clock.trio_time(clock.now() + 5.0) == pytest.approx(trio.current_time() + 5.0)
    assert clock.trio_time(10.0) == pytest.approx(13.0)
