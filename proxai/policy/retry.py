"""Retries and fallback before the first byte: which upstream next, and when.

Sans-io: the relay reports how each attempt went and :class:`RetryPlan` answers
with the next attempt (an upstream of the route and a delay) or ``None``. An
attempt is worth repeating only while nothing has reached the client, and only
for failures another try can fix: no connection, no response headers within
``first_byte``, a connection closed before the headers, ``429`` and ``5xx``.

By default each upstream of the route is tried at most once, in order, and at
once (as nginx's ``proxy_next_upstream``): with one upstream, a failure goes to
the client as it is, and the client's own retries are the only ones. Only a
``max_attempts`` above the number of upstreams goes around again: a revisited
upstream after exponential backoff with jitter, or after its ``Retry-After``
(capped by ``retry_after_max``).

Whatever the plan says, :class:`RetryBudget` (as Finagle's) keeps the retries
of all requests to a share of the requests over a sliding window, or to a floor of
retries a second when that is more, so that a storm of failures is not multiplied
(the upstreams see little more than the clients' own traffic) and a quiet proxai
still retries.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Iterable, Sequence

from ..config import RetriesConfig
from ..outcome import RETRYABLE_BEFORE_HEAD, AttemptRecord

__all__ = [
    "RetryBudget",
    "RetryPlan",
    "is_retryable",
    "parse_retry_after",
    "retry_after_header",
    "retryable_status",
]


_RNG = random.Random()  # one per process: seeding one per request costs a urandom call


def retryable_status(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def is_retryable(attempt: AttemptRecord) -> bool:
    """Whether another attempt might fare better than ``attempt``."""
    if attempt.status is not None:
        return retryable_status(attempt.status)
    return attempt.kind in RETRYABLE_BEFORE_HEAD


def parse_retry_after(value: bytes, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date;
    ``now`` is the Unix time). ``None`` if it says nothing usable."""
    text = value.decode("latin-1").strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def retry_after_header(headers: Iterable[tuple[bytes, bytes]], now: float) -> float | None:
    """Seconds to wait from a response's ``Retry-After`` header, if it has a usable one."""
    for name, value in headers:
        if name.lower() == b"retry-after":
            return parse_retry_after(value, now)
    return None


class RetryPlan:
    """The attempts of one request over a route's upstreams."""

    def __init__(
        self,
        upstreams: Sequence[str],
        retries: RetriesConfig,
        rng: random.Random | None = None,
    ) -> None:
        assert upstreams
        # Each upstream once per round, even if the route names it twice.
        self._upstreams = tuple(dict.fromkeys(upstreams))
        self._retries = retries
        #: Attempts in all: by default one per upstream, so nothing is revisited.
        self.max_attempts = retries.max_attempts or len(self._upstreams)
        self._rng = rng or _RNG
        #: Every attempt so far, in order (appended by :meth:`record` only).
        self.attempts: list[AttemptRecord] = []

    def first(self) -> str:
        return self._upstreams[0]

    def record(self, attempt: AttemptRecord) -> int:
        """Note an attempt as it starts; its index (0 for the request's first)."""
        self.attempts.append(attempt)
        return len(self.attempts) - 1

    def next_attempt(self, last: AttemptRecord) -> tuple[str, float] | None:
        """After ``last`` failed: the next upstream and the seconds to wait first,
        or ``None`` when ``last`` is final (not retryable, or no attempts left)."""
        if not is_retryable(last) or len(self.attempts) >= self.max_attempts:
            return None
        index = len(self.attempts)
        upstream = self._upstreams[index % len(self._upstreams)]
        if index < len(self._upstreams):
            return upstream, 0.0  # a fresh upstream: no reason to wait
        retries = self._retries
        round_ = index // len(self._upstreams)  # 1 on the first revisit
        ceiling = min(retries.backoff_max, retries.backoff_initial * 2 ** (round_ - 1))
        delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)  # "equal jitter"
        previous = next(a for a in reversed(self.attempts) if a.upstream == upstream)
        if previous.retry_after is not None:
            delay = max(delay, min(previous.retry_after, retries.retry_after_max))
        return upstream, delay


class RetryBudget:
    """How many retries the process may make: a share of its requests over a window,
    and never fewer than a floor.

    As Finagle's ``RetryBudget``: each request's first attempt deposits, each retry
    withdraws, both for ``window`` seconds. A retry may go only while the retries of
    the window stay within ``percent`` of its requests, or within ``per_second`` a
    second (``floor``: ``per_second * window`` in the window), whichever is more:
    Finagle's floor of 10 retries a second, so that a quiet proxai retries every
    failure it sees (a floor of three a window sent a quiet proxai's fourth 429 in ten
    seconds to the client). The floor is the larger of the two, not added to the share
    as Finagle adds it: a storm of more than ``floor * 100 / percent`` requests a
    window gets ``percent`` of them and no more, so the upstreams see at most
    ``1 + percent/100`` times the clients' attempts (one longer than the window: plus,
    in each later window, what the floor gave its first burst beyond the share).
    Retries deposit nothing, so a storm of failures cannot feed itself.

    The window slides in ``slices`` steps: counts are kept per slice of
    ``window / slices`` seconds and a slice leaves as a whole, so the memory is
    fixed whatever the traffic. Sans-io: the caller passes the time, a monotonic
    clock's seconds.
    """

    slices = 10

    def __init__(self, percent: float, per_second: float, window: float) -> None:
        assert percent >= 0 and per_second >= 0 and window > 0
        self.percent = percent
        self.per_second = per_second
        self.window = window
        #: Retries the window always has room for, whatever its requests.
        self.floor = math.floor(per_second * window + 1e-9)
        self._width = window / self.slices
        #: Per slice, in a ring: first attempts and retries counted there.
        self._requests = [0] * self.slices
        self._retries = [0] * self.slices
        self._in_window = [0, 0]  # the sums of both over the window
        self._slice: int | None = None  # the newest slice counted

    @classmethod
    def from_config(cls, retries: RetriesConfig) -> RetryBudget:
        return cls(retries.budget_percent, retries.budget_min_per_second, retries.budget_window)

    def deposit(self, now: float) -> None:
        """A request's first attempt is going upstream."""
        slot = self._advance(now)
        self._requests[slot] += 1
        self._in_window[0] += 1

    def withdraw(self, now: float) -> bool:
        """Count one retry if the window has room for it; ``False``: over budget, the
        failure stands."""
        if self.retries_left(now) < 1:
            return False
        slot = self._advance(now)
        self._retries[slot] += 1
        self._in_window[1] += 1
        return True

    def retries_left(self, now: float) -> int:
        """How many retries the window has room for now."""
        self._advance(now)
        requests, retries = self._in_window
        # In hundredths, so that 20% of 5 requests is exactly 1.
        share = math.floor(self.percent * requests / 100 + 1e-9)
        return max(0, max(share, self.floor) - retries)

    def _advance(self, now: float) -> int:
        """Move the window to ``now``; the ring slot of its slice."""
        current = math.floor(now / self._width)
        if self._slice is None or current > self._slice:
            gone = self.slices if self._slice is None else min(current - self._slice, self.slices)
            for step in range(gone):  # the slots of the new slices held the oldest ones
                slot = (current - step) % self.slices
                self._in_window[0] -= self._requests[slot]
                self._in_window[1] -= self._retries[slot]
                self._requests[slot] = self._retries[slot] = 0
            self._slice = current
        # A clock that steps back counts in the newest slice: nothing is forgotten early.
        return self._slice % self.slices
