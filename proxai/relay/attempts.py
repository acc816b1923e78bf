"""Opening the upstream: the attempts of one request, as its retry plan directs.

:class:`~proxai.policy.retry.RetryPlan` decides (which upstream next, after
what delay); this module does the I/O: each attempt's request, bounded by
``first_byte`` (or ``total``), the retry budget's say, and the closing of
every response that is not the answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import trio

from ..errors import ProxyError
from ..outcome import AttemptRecord, Outcome, listed
from ..policy.retry import retry_after_header
from ..upstream.client import UpstreamReply
from ..wire.headers import Headers
from .ending import head_timeout
from .exchange import Exchange, UpstreamTarget

__all__ = ["Answer", "AttemptHook", "AttemptTrace", "open_upstream"]

#: Told of each attempt as soon as it is decided, with its index (metrics).
AttemptHook = Callable[[AttemptRecord, int], None]


class AttemptTrace(Protocol):
    """A request's trace, as the attempts see it (:mod:`proxai.ops.telemetry`): each
    attempt's span starts as it goes upstream, carrying its context in the headers."""

    def attempt_started(self, attempt: AttemptRecord, index: int, headers: Headers) -> Headers:
        """The headers this attempt sends (``headers`` with the trace's context)."""
        ...

    def attempt_done(self, attempt: AttemptRecord) -> None:
        """The attempt was decided: its answer came, or how it failed is known."""
        ...


#: An answer's response, open: the caller closes it (``await answer.__aexit__(...)``).
Answer = AbstractAsyncContextManager[UpstreamReply]


async def open_upstream(
    exchange: Exchange,
    outcome: Outcome,
    *,
    started: float,
    total_deadline: float,
    on_attempt: AttemptHook | None = None,
    trace: AttemptTrace | None = None,
) -> tuple[UpstreamTarget, UpstreamReply | ProxyError, Answer | None]:
    """Try the route's upstreams until one answers for good; the last one tried, its
    answer (a response, whatever its status, or the failure before any) and, for a
    response, its context for the caller to exit once done with it.

    A retried response is closed at once, never relayed. Each retry needs the
    exchange's retry budget to have room for it; without, the failure at hand is the
    answer. (No exit stack holds the answer: each is a deque, and a held stream kept
    two of them for its whole life.)
    """
    plan, admission = exchange.plan, exchange.retry_admission
    name, delay = plan.first(), 0.0
    outcome.attempts = plan.attempts
    admission.note_request()
    while True:
        if delay:
            await trio.sleep(delay)
        target = exchange.targets[name]
        attempt = AttemptRecord(name, trio.current_time() - started)
        index = plan.record(attempt)
        outcome.upstream = name
        outcome.dropped = listed(target.dropped)
        headers = exchange.request.headers
        if trace is not None:
            headers = trace.attempt_started(attempt, index, headers)
        result, opened = await _attempt(exchange, target, total_deadline, headers)
        try:
            if isinstance(result, ProxyError):
                attempt.kind, attempt.detail = result.kind, result.message
            else:
                attempt.status = result.status
                attempt.retry_after = retry_after_header(result.headers, time.time())
            if trace is not None:
                trace.attempt_done(attempt)
            if on_attempt is not None:
                on_attempt(attempt, index)
            following = plan.next_attempt(attempt)
            if following is None or trio.current_time() + following[1] >= total_deadline:
                return target, result, opened
            if not admission.start_retry():
                outcome.retry_refused = True  # over budget: this failure is the answer
                return target, result, opened
        except BaseException as exc:
            if opened is not None:
                await opened.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if opened is not None:
            await opened.__aexit__(None, None, None)
        name, delay = following


async def _attempt(
    exchange: Exchange,
    target: UpstreamTarget,
    total_deadline: float,
    headers: Headers,
) -> tuple[UpstreamReply | ProxyError, Answer | None]:
    """One attempt: the upstream's response and its open context, or how it failed
    before one, within ``first_byte`` (or ``total``)."""
    request = exchange.request
    first_byte = math.inf
    if request.first_byte_applies:
        first_byte = trio.current_time() + target.timeouts.first_byte
    opening = target.client.open(
        request.method,
        target.raw_path if target.raw_path is not None else request.raw_path,
        target.query if target.query is not None else request.query,
        headers,
        target.body,
    )
    try:
        with trio.fail_at(min(first_byte, total_deadline)):
            return await opening.__aenter__(), opening
    except trio.TooSlowError:
        if first_byte <= total_deadline:
            return head_timeout(first_byte=True, seconds=target.timeouts.first_byte), None
        return head_timeout(first_byte=False, seconds=exchange.timeouts.total), None
    except ProxyError as exc:
        return exc, None
