"""The limiters' one interface, the in-process one, and the factory that picks one.

A limiter keeps ``[limits]``' windows and slots in the ``[state]`` backend: the
memory backend's per process (:class:`MemoryLimiter`, over the sans-io
:class:`~proxai.policy.limits.LimitsState`), Redis's shared by every process that
names it (:mod:`proxai.state.redis_limits`). Each decision is one call: one round trip
on admission, one at the end, and a batched lease renewal now and then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..config import LimitsConfig, StateBackend, StateConfig
from ..policy.limits import Decision, KeyRule, KeyUse, LimitsState, Release
from .store import StateStore

__all__ = ["Held", "Limiter", "MemoryLimiter", "limiter_for"]

#: A slot this process holds: (tenant, slot id, the tenant's rule).
Held = tuple[str, str, KeyRule]


class Limiter(Protocol):
    """Admission and release for ``[limits]``. Every async method may raise
    :class:`~proxai.state.store.StateUnavailable` (never after more than ``[state]
    timeout``)."""

    #: Whether the windows are shared by every process (exact across a fleet).
    shared: bool

    async def admit(self, tenant: str, rule: KeyRule, slot: str, fleet: int) -> Decision:
        """Admit a request (holding its slots) or say which limit refuses it."""
        ...

    async def finish(self, tenant: str, rule: KeyRule, slot: str, tokens: int) -> None:
        """The request ended: free its slots and charge its tokens."""
        ...

    async def release(self, releases: Sequence[Release]) -> None:
        """Free the slots of requests that ended earlier and charge their tokens, dated
        when they ended (all in one call: releases an earlier call could not make)."""
        ...

    async def renew(self, held: Sequence[Held]) -> None:
        """Extend the leases of the slots this process holds (all in one call)."""
        ...

    def use(self) -> list[KeyUse]:
        """Each key's use as this process knows it (the live view)."""
        ...


class MemoryLimiter:
    """:class:`LimitsState` as a :class:`Limiter`; ``clock`` is monotonic seconds."""

    shared = False

    def __init__(self, *, lease: float, clock: Callable[[], float]) -> None:
        self.state = LimitsState(lease=lease)
        self._clock = clock

    async def admit(self, tenant: str, rule: KeyRule, slot: str, fleet: int) -> Decision:
        return self.state.admit(tenant, rule, slot, fleet, self._clock())

    async def finish(self, tenant: str, rule: KeyRule, slot: str, tokens: int) -> None:
        self.state.finish(tenant, rule, slot, tokens, self._clock())

    async def release(self, releases: Sequence[Release]) -> None:
        now = self._clock()
        for r in releases:
            self.state.finish(r.tenant, r.rule, r.slot, r.tokens, now, r.age)

    async def renew(self, held: Sequence[Held]) -> None:
        self.state.renew(((tenant, slot) for tenant, slot, _ in held), self._clock())

    def use(self) -> list[KeyUse]:
        return self.state.use(self._clock())


def limiter_for(
    limits: LimitsConfig, state: StateConfig, store: StateStore, *, clock: Callable[[], float]
) -> Limiter:
    """The limiter of the backend ``state`` names, on ``store`` (the open ``[state]``
    store: Redis's limiter shares its connection pool and timeout)."""
    if state.backend is StateBackend.REDIS:
        from .redis_limits import RedisLimiter  # trio and coredis load only when used

        return RedisLimiter(store, lease=limits.slot_lease)
    return MemoryLimiter(lease=limits.slot_lease, clock=clock)
