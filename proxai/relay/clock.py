"""The upstream clock: time that runs only while proxai waits for the upstream.

It measures only time the reader spent waiting for the upstream: while the
reader is blocked handing a read to a full channel (the client is slow), the
clock stands still. Observers get their times from it, so their deadlines
measure the upstream's silence, never proxai's own waiting.
"""

from __future__ import annotations

import trio

from .messages import ToObserver

__all__ = ["UpstreamClock"]


class UpstreamClock:
    """Trio time minus the time the reader spent blocked on a full channel."""

    def __init__(self) -> None:
        self._paused_total = 0.0
        self._paused_since: float | None = None

    def now(self) -> float:
        wall = trio.current_time()
        paused = self._paused_total
        if self._paused_since is not None:
            paused += wall - self._paused_since
        return wall - paused

    async def send_paused(
        self, channel: trio.MemorySendChannel[ToObserver], message: ToObserver
    ) -> None:
        """Send on ``channel``; the clock stands still while the send is blocked."""
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            pass
        else:
            return
        self._paused_since = trio.current_time()
        try:
            await channel.send(message)
        finally:
            self._paused_total += trio.current_time() - self._paused_since
            self._paused_since = None
