"""Admission, once for both carriers: the gate, the client keys and ``[limits]``.

An HTTP request and a socket's turn are admitted alike: :meth:`Admission.check`
refuses at once what proxai will not take now (draining, over
``server.max_concurrent_streams``, a missing or wrong key, not started) and says
whose request it is (its tenant, computed once: a turn's is its socket's); then
:meth:`Admission.admitted` is the bracket the request runs in: its key's limits
admitted (:class:`~proxai.service.limits.KeyLimits`), counted in flight, and on the
way out, however it ends, counted out and its slots freed and tokens charged. A
socket's upgrade is checked by :meth:`Admission.check_upgrade`; its turns, not the
socket, count in flight.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ..errors import ProxyError
from ..ops.metrics import Metrics
from ..outcome import Outcome
from ..policy.auth import ClientKeys, tenant_of
from .gate import Gate
from .limits import KeyLimits, LimitHold
from .plan import Incoming

__all__ = ["Admission"]


class Admission:
    """Who gets in, and the bracket an admitted request runs in (``started``: whether
    the upstream clients are open)."""

    def __init__(
        self,
        gate: Gate,
        keys: ClientKeys | None,
        limits: KeyLimits,
        *,
        metrics: Metrics | None,
        started: Callable[[], bool],
    ) -> None:
        self._gate = gate
        self._keys = keys
        self._limits = limits
        self._metrics = metrics
        self._started = started

    def check(self, incoming: Incoming, *, tenant: str | None = None) -> str:
        """Raise what refuses a request now; its tenant (``tenant``: known already, a
        socket's turn's)."""
        self._gate.check_open()
        if tenant is None:
            tenant = tenant_of(self._keys, incoming.headers, incoming.sdk)
        self._gate.check_room()
        self._check_started()
        return tenant

    def check_upgrade(self, incoming: Incoming) -> str:
        """The checks of a socket's upgrade after the browser policy's (draining, the
        client key, a started proxai); the socket's tenant, which its turns keep."""
        self._gate.check_open()
        tenant = tenant_of(self._keys, incoming.headers, incoming.sdk)
        self._check_started()
        return tenant

    def _check_started(self) -> None:
        if not self._started():
            raise ProxyError(503, "proxai is not started", "server_error")

    @asynccontextmanager
    async def admitted(
        self, tenant: str, incoming: Incoming, outcome: Outcome
    ) -> AsyncIterator[LimitHold | None]:
        """Run a checked request within its key's limits (raises their 429/503 before
        it is in), counted in flight; yields its hold on the limits (``None``: none
        applies), whose ``x-ratelimit-*`` headers its answer carries."""
        hold = await self._limits.admit(tenant, incoming.request_id, outcome)
        self._gate.enter()
        if self._metrics is not None:
            self._metrics.in_flight.inc()
        try:
            yield hold
        finally:
            self._gate.leave()
            if self._metrics is not None:
                self._metrics.in_flight.dec()
            if hold is not None:
                await self._limits.finish(hold, outcome)

    def draining(self) -> bool:
        return self._gate.draining

    async def wait_for_drain(self) -> None:
        await self._gate.wait_for_drain_request()
