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

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

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

    def admitted(
        self, tenant: str, incoming: Incoming, outcome: Outcome
    ) -> AbstractAsyncContextManager[LimitHold | None]:
        """Run a checked request within its key's limits (raises their 429/503 before
        it is in), counted in flight; gives its hold on the limits (``None``: none
        applies), whose ``x-ratelimit-*`` headers its answer carries."""
        return _Admitted(self, tenant, incoming, outcome)

    async def _enter(self, tenant: str, incoming: Incoming, outcome: Outcome) -> LimitHold | None:
        hold = await self._limits.admit(tenant, incoming.request_id, outcome)
        self._gate.enter()
        if self._metrics is not None:
            self._metrics.in_flight.inc()
        return hold

    async def _leave(self, hold: LimitHold | None, outcome: Outcome) -> None:
        self._gate.leave()
        if self._metrics is not None:
            self._metrics.in_flight.dec()
        if hold is not None:
            await self._limits.finish(hold, outcome)

    def draining(self) -> bool:
        return self._gate.draining

    async def wait_for_drain(self) -> None:
        await self._gate.wait_for_drain_request()


class _Admitted:
    """:meth:`Admission.admitted`'s bracket: an object with slots, not a generator's
    context (a stream holds it for its life; trio registers every async generator)."""

    __slots__ = ("_admission", "_hold", "_incoming", "_outcome", "_tenant")

    def __init__(
        self, admission: Admission, tenant: str, incoming: Incoming, outcome: Outcome
    ) -> None:
        self._admission = admission
        self._tenant = tenant
        self._incoming = incoming
        self._outcome = outcome
        self._hold: LimitHold | None = None

    async def __aenter__(self) -> LimitHold | None:
        self._hold = await self._admission._enter(self._tenant, self._incoming, self._outcome)
        return self._hold

    async def __aexit__(self, *exc_info: object) -> None:
        await self._admission._leave(self._hold, self._outcome)
