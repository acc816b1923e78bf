"""``[limits]`` on the request path: admission, the answers that refuse, the end.

A request's key (its digest, :func:`~proxai.policy.auth.tenant_of`) is looked up in
the rules; with limits for it (or a fleet limit), :meth:`KeyLimits.admit` asks the
limiter once, before the body is read: admitted, the request holds its slots and its
answer carries the ``x-ratelimit-*`` headers; refused, it gets a 429 (a limit of its
key) or a 503 (the fleet's concurrency) with ``Retry-After``. :meth:`KeyLimits.finish`
frees the slots and charges the tokens its response reported, once it has ended
however it ended. A lifespan task renews the leases of the slots this process holds.

When the backend does not answer (within ``[state] timeout``), the request is served
unlimited with a warning in its record and a count in
``proxai_limits_unavailable_total`` (``fail_closed = true``: 503 instead); nothing
waits longer, and the next request asks again. What the backend did not answer may
still hold a slot there (a release that did not run, an admission that runs late), so
it is kept (:class:`~proxai.policy.limits.PendingReleases`) and sent again: by the
lease task every :data:`~proxai.policy.limits.RELEASE_RETRY` seconds, and before the
next admission, so that a backend back from a blip finds no slot held by a request
that has ended.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import trio

from ..config import Config
from ..errors import ProxyError
from ..outcome import Outcome, OutcomeKind
from ..policy.auth import ClientKeys
from ..policy.limits import (
    RELEASE_RETRY,
    Decision,
    Held,
    KeyRule,
    KeyUse,
    Limit,
    Limiter,
    LimitRules,
    PendingReleases,
    Release,
    estimated_tokens,
    ratelimit_headers,
    reset_text,
    retry_after_headers,
)
from ..state import Backend, StateUnavailable

__all__ = ["KeyLimits", "LimitHold"]

log = logging.getLogger("proxai")


@attrs.define
class LimitHold:
    """An admitted request's hold on its key's limits."""

    tenant: str
    rule: KeyRule
    slot: str
    #: ``x-ratelimit-*``: what every answer to the request carries.
    headers: list[tuple[bytes, bytes]]


#: Counts a refusal: (key label, limit).
CountLimited = Callable[[str, str], None]


class KeyLimits:
    """The ``[limits]`` of one proxai process (see the module's docstring)."""

    def __init__(
        self,
        config: Config,
        keys: ClientKeys | None,
        *,
        count_limited: CountLimited | None = None,
        count_unavailable: Callable[[], None] | None = None,
    ) -> None:
        self._config = config
        self._rules = LimitRules.from_config(config.limits, keys)
        self._fleet = config.limits.fleet_max_concurrent_streams
        self._fail_closed = config.limits.fail_closed
        self._lease = config.limits.slot_lease
        self._limiter: Limiter | None = None
        #: The slots this process holds, by slot id: their leases are renewed.
        self._held: dict[str, Held] = {}
        #: Releases the backend did not answer (and admissions it may run late).
        self.pending = PendingReleases()
        #: Set when the releases being sent again have their answer (one send at a time).
        self._flushed: trio.Event | None = None
        self._flush_failed: StateUnavailable | None = None
        self._count_limited = count_limited
        self._count_unavailable = count_unavailable

    @property
    def enabled(self) -> bool:
        return self._rules is not None

    def open(self, backend: Backend) -> None:
        """Start on the open ``[state]`` backend (at startup): its limiter shares the
        store's connection."""
        if self._rules is not None:
            self._limiter = backend.limiter(self._lease, trio.current_time)

    async def close(self) -> None:
        """Stop (at shutdown): the pending releases get one last try (bounded by
        ``[state] timeout``), as nobody would send them again."""
        limiter, self._limiter = self._limiter, None
        if limiter is not None and len(self.pending):
            with trio.CancelScope(shield=True):
                try:
                    await self._send_pending(limiter)
                except StateUnavailable as exc:
                    log.warning(
                        "limits: %d slot releases not sent at shutdown (%s); their leases "
                        "free them",
                        len(self.pending),
                        exc.message,
                    )

    async def renew_leases(self) -> None:
        """Renew the held slots' leases every third of a lease, and send the pending
        releases again every :data:`RELEASE_RETRY` s while there are any, until
        cancelled (a lifespan task): a failure is logged and the next turn tries again."""
        if self._rules is None:
            return
        period = self._lease / 3
        retry = min(RELEASE_RETRY, period)
        renew_at = trio.current_time() + period
        failing = False
        while True:
            await trio.sleep_until(min(renew_at, trio.current_time() + retry))
            limiter = self._limiter
            if limiter is None:
                continue
            if len(self.pending):
                try:
                    await self._send_pending(limiter)
                except StateUnavailable as exc:
                    if not failing:  # once a streak: it is tried every second
                        log.warning(
                            "limits: %d slot releases not sent (%s); sent again until the "
                            "backend answers",
                            len(self.pending),
                            exc.message,
                        )
                    failing = True
                else:
                    failing = False
            if trio.current_time() < renew_at:
                continue
            renew_at = trio.current_time() + period
            if not self._held:
                continue
            try:
                await limiter.renew(list(self._held.values()))
            except StateUnavailable as exc:
                log.warning("limits: slot leases not renewed (%s)", exc.message)

    async def _send_pending(self, limiter: Limiter) -> None:
        """Send each pending release once (an admission's second round goes in the next
        send); a caller that finds a send under way waits for its answer instead
        (raises StateUnavailable when that failed)."""
        flushed = self._flushed
        if flushed is not None:
            await flushed.wait()
            if self._flush_failed is not None:
                raise self._flush_failed
            return
        flushed = self._flushed = trio.Event()
        self._flush_failed = None
        try:
            for batch in self.pending.due(trio.current_time()):
                await limiter.release(batch)
                self.pending.answered(batch)
        except StateUnavailable as exc:
            self._flush_failed = exc
            raise
        finally:
            self._flushed = None
            flushed.set()

    def use(self) -> list[KeyUse]:
        """Each key's use, for the live view."""
        return self._limiter.use() if self._limiter is not None else []

    async def admit(self, tenant: str, slot: str, outcome: Outcome) -> LimitHold | None:
        """Admit a request of ``tenant`` (``slot``: its request id) or raise its 429/503;
        ``None``: no limit applies to it, or the backend did not answer (fail open)."""
        rules, limiter = self._rules, self._limiter
        if rules is None or limiter is None:
            return None
        rule = rules.rule_for(tenant)
        if rule is None:
            return None
        outcome.limit_key = rule.label
        holds = rule.max_concurrent_streams is not None or bool(self._fleet)
        try:
            if len(self.pending):  # slots of ended requests may still be held: free them first
                with trio.CancelScope(shield=True):  # bounded by [state] timeout
                    await self._send_pending(limiter)
            try:
                decision = await limiter.admit(tenant, rule, slot, self._fleet)
            except BaseException:
                # Not answered (a timeout, or the client gone): the script may have run,
                # or may yet run; its slot is released once the backend answers.
                if holds:
                    self.pending.add(Release(tenant, rule, slot), trio.current_time(), rounds=2)
                raise
        except StateUnavailable as exc:
            self._unavailable(outcome, exc, "admission")
            return None
        headers = ratelimit_headers(decision)
        if decision.refused is not None:
            outcome.limited = decision.refused.value
            if self._count_limited is not None:
                self._count_limited(rule.label, decision.refused.value)
            raise _refusal(decision, rule, self._fleet, headers)
        admission = LimitHold(tenant, rule, slot, headers)
        if holds:
            self._held[slot] = (tenant, slot, rule)
        return admission

    def _unavailable(self, outcome: Outcome, exc: StateUnavailable, step: str) -> None:
        if self._count_unavailable is not None:
            self._count_unavailable()
        if self._fail_closed and step == "admission":
            raise ProxyError(
                503,
                f"proxai cannot check this key's limits ({exc.message}; "
                "[limits] fail_closed = true); retry the request",
                "server_error",
                code="limits_unavailable",
                headers=tuple(retry_after_headers(1.0)),
                kind=OutcomeKind.STATE_UNAVAILABLE,
            )
        outcome.warnings.append(
            f"limits not enforced at {step}: the [state] backend did not answer ({exc.message})"
        )

    async def finish(self, admission: LimitHold, outcome: Outcome) -> None:
        """Free the request's slots and charge its tokens (shielded: it runs once the
        request ended, however it ended; bounded by ``[state] timeout``)."""
        held = self._held.pop(admission.slot, None) is not None
        limiter = self._limiter
        if limiter is None:
            return
        tokens = 0
        if admission.rule.tokens_per_minute is not None:
            tokens = self._tokens(outcome)
            outcome.charged_tokens = tokens
        if not held and not tokens:
            return  # nothing to free or charge: no round trip
        with trio.CancelScope(shield=True):
            try:
                await limiter.finish(admission.tenant, admission.rule, admission.slot, tokens)
            except StateUnavailable as exc:
                release = Release(admission.tenant, admission.rule, admission.slot, tokens)
                self.pending.add(release, trio.current_time())
                self._unavailable(outcome, exc, "the end (sent again once it answers)")

    @staticmethod
    def _tokens(outcome: Outcome) -> int:
        """What the upstream reported, or, for a response cut before its usage, an
        estimate from the bytes (nothing for a request no upstream answered well)."""
        reported = outcome.tokens.charged if outcome.tokens is not None else None
        if reported is not None:
            return reported
        if outcome.status is None or not 200 <= outcome.status < 300 or not outcome.bytes_in:
            return 0
        estimate = estimated_tokens(outcome.bytes_request, outcome.events, outcome.bytes_in)
        outcome.warnings.append(
            f"no usage reported: {estimate} tokens charged, estimated from the bytes"
        )
        return estimate


def _refusal(
    decision: Decision, rule: KeyRule, fleet: int, headers: list[tuple[bytes, bytes]]
) -> ProxyError:
    retry = decision.retry_after
    all_headers = tuple(retry_after_headers(retry) + headers)
    wait = reset_text(math.ceil(retry * 1000) / 1000)
    if decision.refused is Limit.FLEET_STREAMS:
        return ProxyError(
            503,
            f"proxai is at its fleet's limit of {fleet} concurrent requests "
            f"([limits] fleet_max_concurrent_streams); retry in {wait}",
            "server_error",
            code="proxy_overloaded",
            headers=all_headers,
            kind=OutcomeKind.OVERLOADED,
        )
    if decision.refused is Limit.REQUESTS:
        view = decision.requests
        assert view is not None
        what, kind = f"requests per minute: limit {view.limit}, used {view.used}", "requests"
    elif decision.refused is Limit.TOKENS:
        view = decision.tokens
        assert view is not None
        what, kind = f"tokens per minute: limit {view.limit}, used {view.used}", "tokens"
    else:
        what = f"concurrent streams: limit {rule.max_concurrent_streams}, open {decision.streams}"
        kind = "requests"
    return ProxyError(
        429,
        f"Rate limit reached for key {rule.label} on {what} (proxai [limits]). "
        f"Please try again in {wait}.",
        kind,
        code="rate_limit_exceeded",
        headers=all_headers,
        kind=OutcomeKind.RATE_LIMITED,
    )
