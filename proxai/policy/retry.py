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

Whatever the plan says, :class:`RetryBudget` (Envoy's retry budget) caps the
retries in progress across all requests, so that a storm of failures is not
multiplied: the upstream sees little more than the clients' own traffic.
"""

from __future__ import annotations

import email.utils
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
    """How many retries may be in progress at once, over all of a process's requests.

    As Envoy's retry budget: at most ``percent`` of the requests in flight, but
    always ``minimum``, so that a lone failing request may still fail over. A
    retry holds its place from the moment it is decided (its backoff included)
    until its attempt has an answer or has failed.
    """

    def __init__(self, percent: float, minimum: int) -> None:
        self.percent = percent
        self.minimum = minimum
        #: Retries in progress now.
        self.active = 0

    @classmethod
    def from_config(cls, retries: RetriesConfig) -> RetryBudget:
        return cls(retries.budget_percent, retries.budget_min)

    def limit(self, in_flight: int) -> float:
        """The most retries that may be in progress with ``in_flight`` requests."""
        return max(float(self.minimum), in_flight * self.percent / 100)

    def start(self, in_flight: int) -> bool:
        """Take a place for one retry if the budget has one; ``False``: over budget,
        the failure stands."""
        if self.active >= self.limit(in_flight):
            return False
        self.active += 1
        return True

    def end(self) -> None:
        """A retry that :meth:`start` let through has its answer (or was abandoned)."""
        assert self.active > 0
        self.active -= 1
