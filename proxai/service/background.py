"""What a background task does with its own failures: report them and go on.

proxai's background tasks (the idle-connection sweep, the drain) share the ASGI
lifespan's nursery, and the upstream clients live exactly as long as it: one
task's uncaught exception would end the lifespan and leave every request a 503.
So a task runs each step inside :meth:`Failures.contain`: a failure is logged
(the first with its traceback, then a summary at most once a minute, so a step
that fails every 50 ms cannot flood the log), counted in
``proxai_background_failures_total``, and the task goes on. Cancellation passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

__all__ = ["LOG_EVERY", "Failures"]

log = logging.getLogger("proxai")

#: Seconds between two log lines about the same task's failures (the first has its traceback).
LOG_EVERY = 60.0


class Failures:
    """The failures of one background task (``task`` names it in logs and metrics)."""

    def __init__(self, task: str, count: Callable[[str], None] | None = None) -> None:
        self.task = task
        self.count = 0
        self._on_failure = count
        self._logged_at: float | None = None
        self._unlogged = 0

    @contextmanager
    def contain(self) -> Iterator[None]:
        """Run one step of the task: an ``Exception`` in it is reported, not raised."""
        try:
            yield
        except Exception as exc:
            self.record(exc)

    def record(self, exc: Exception) -> None:
        self.count += 1
        if self._on_failure is not None:
            self._on_failure(self.task)
        now = trio.current_time()
        if self._logged_at is None:
            log.error("background task %s failed; it goes on", self.task, exc_info=exc)
        elif now - self._logged_at >= LOG_EVERY:
            log.error(
                "background task %s failed %d more time(s) in the last %.0f s, last with "
                "%s: %s; it goes on",
                self.task,
                self._unlogged + 1,
                now - self._logged_at,
                type(exc).__name__,
                exc,
            )
        else:
            self._unlogged += 1
            return
        self._logged_at, self._unlogged = now, 0
