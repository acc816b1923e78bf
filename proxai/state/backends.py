"""The ``[state]`` backends, one row each: what proxai needs to know of a backend.

A row says whether the backend is shared by every process that names it (what the
start-up warnings about several workers read), what its configuration must hold
(:func:`backend_problems`), and how to open it: :func:`open_backend` opens the
backend's one connection and builds on it both the store of
:mod:`proxai.service.conversations` and the limiter of :mod:`proxai.service.limits`, so
the two share the connection by construction. The Redis row's modules (trio and
coredis) load only when it is opened. Adding a backend is a member of
:class:`~proxai.config.StateBackend`, a row here, and the module that implements it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs

from ..config import StateBackend, StateConfig
from ..policy.limits import Limiter, MemoryLimiter
from .memory import MemoryStore
from .store import StateStore

__all__ = ["BACKENDS", "Backend", "BackendRow", "backend_problems", "open_backend", "open_store"]

#: A clock: seconds as a float.
Clock = Callable[[], float]


@attrs.frozen
class Backend:
    """An open backend: its store, and the limiter on the same connection."""

    store: StateStore
    #: ``(lease, clock)`` -> the backend's limiter for ``[limits]`` (``lease``:
    #: ``[limits] slot_lease``; ``clock``: monotonic seconds, for a limiter that keeps time
    #: itself).
    limiter: Callable[[float, Clock], Limiter]


@attrs.frozen
class BackendRow:
    """One ``[state] backend``."""

    backend: StateBackend
    #: Whether every process naming the same backend sees the same records and limits
    #: (if not, each worker keeps its own: start-up warns under several workers).
    shared: bool
    #: The backend open for an ``async with`` block, from its config and the store's
    #: clock (unix seconds).
    open: Callable[[StateConfig, Clock], AbstractAsyncContextManager[Backend]]
    #: What a config naming this backend lacks, as start-up problems.
    problems: Callable[[StateConfig], list[str]] = lambda config: []


@asynccontextmanager
async def _open_memory(config: StateConfig, clock: Clock) -> AsyncIterator[Backend]:
    store = MemoryStore(max_bytes=config.max_bytes, ttl=config.ttl, clock=clock)
    try:
        yield Backend(store, lambda lease, clock: MemoryLimiter(lease=lease, clock=clock))
    finally:
        await store.aclose()


@asynccontextmanager
async def _open_redis(config: StateConfig, clock: Clock) -> AsyncIterator[Backend]:
    from .redis import STORE_SCRIPTS, RedisStore, open_redis  # trio, coredis: when used
    from .redis_limits import LIMITER_SCRIPTS, RedisLimiter

    async with open_redis(config, (*STORE_SCRIPTS, *LIMITER_SCRIPTS)) as connection:
        yield Backend(
            RedisStore(connection, ttl=config.ttl),
            lambda lease, clock: RedisLimiter(connection, lease=lease),
        )


def _redis_problems(config: StateConfig) -> list[str]:
    if config.url is None:
        return ['state.url: backend "redis" needs the Redis URL (redis://host:6379/0)']
    return []


BACKENDS: dict[StateBackend, BackendRow] = {
    row.backend: row
    for row in (
        BackendRow(StateBackend.MEMORY, shared=False, open=_open_memory),
        BackendRow(StateBackend.REDIS, shared=True, open=_open_redis, problems=_redis_problems),
    )
}


def backend_problems(config: StateConfig) -> list[str]:
    """What ``config`` lacks for the backend it names (start-up refuses it)."""
    return BACKENDS[config.backend].problems(config)


def open_backend(
    config: StateConfig, *, clock: Clock = time.time
) -> AbstractAsyncContextManager[Backend]:
    """The backend ``config`` names, open for the ``async with`` block (enter it in a
    task that outlives the requests using it, e.g. the ASGI lifespan's; any task may
    call its store and limiter). Redis need not be up: calls fail with
    :class:`~proxai.state.store.StateUnavailable` until it is. ``clock`` is the memory
    store's time (unix seconds)."""
    return BACKENDS[config.backend].open(config, clock)


@asynccontextmanager
async def open_store(config: StateConfig, *, clock: Clock = time.time) -> AsyncIterator[StateStore]:
    """The store of the backend ``config`` names, alone (:func:`open_backend`)."""
    async with open_backend(config, clock=clock) as backend:
        yield backend.store
