"""The upstream clock: time that runs only while proxai waits for the upstream.

It measures only time the reader spent waiting for the upstream: while the
reader is blocked handing a read to a full channel (the client is slow), the
clock stands still. Observers get their times from it, so their deadlines
measure the upstream's silence, never proxai's own waiting.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .messages import ToObserver

__all__ = ["UpstreamClock"]


class UpstreamClock:
    """Trio time minus the time the reader spent blocked on a full channel.

    ``time`` reads trio's time: the run's clock's own ``current_time`` (from
    ``trio.lowlevel.current_clock()``) is two calls fewer per read than
    ``trio.current_time``, and this clock is read once per event."""

    __slots__ = ("_paused_since", "_paused_total", "_time", "queued")

    def __init__(self, time: Callable[[], float] = trio.current_time) -> None:
        self._time = time
        self._paused_total = 0.0
        self._paused_since: float | None = None
        #: Messages the reader has handed the observer task that it has not taken yet
        #: (the reader counts each in, the observer each out): it looks for a queued
        #: one only when there is one.
        self.queued = 0

    def now(self) -> float:
        wall = self._time()
        paused = self._paused_total
        if self._paused_since is not None:
            paused += wall - self._paused_since
        return wall - paused

    def trio_time(self, at: float) -> float:
        """The trio time at which this clock reads ``at``, if the reader does not block
        meanwhile (a deadline on this clock, for a trio scope). Unless the reader is
        blocked now, this is the time paused so far added, with no clock read."""
        paused_since = self._paused_since
        if paused_since is None:
            return at + self._paused_total
        # Blocked: this clock stands at paused_since - paused_total, while trio's runs.
        return self._time() + (at - (paused_since - self._paused_total))

    async def send_paused(
        self, channel: trio.MemorySendChannel[ToObserver], message: ToObserver
    ) -> None:
        """Send on ``channel``; the clock stands still while the send is blocked."""
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            pass
        else:
            self.queued += 1
            return
        self._paused_since = self._time()
        try:
            await channel.send(message)
        finally:
            self._paused_total += self._time() - self._paused_since
            self._paused_since = None
        self.queued += 1
