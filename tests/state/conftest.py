"""Both state backends behind one fixture: the contract tests run against each.

The Redis one is a real ``redis-server`` (:mod:`proxai.testing.redis`); without one
installed those cases skip, saying how to get it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import attrs
import coredis
import orjson
import pytest
import trio

from proxai.config import StateBackend, StateConfig
from proxai.state import ResponseStatus, StateStore, StoredResponse, open_store
from proxai.testing.redis import REDIS_SERVER, RunningRedis, open_redis

NO_REDIS = "redis-server is not installed: `make redis` installs Debian's"
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=NO_REDIS)


class FakeClock:
    """Unix time that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def item(kind: str, item_id: str | None, text: str = "x") -> bytes:
    value: dict[str, object] = {"type": kind, "content": text}
    if item_id is not None:
        value["id"] = item_id
    return orjson.dumps(value)


def record(
    response_id: str = "resp_1",
    tenant: str = "a" * 64,
    *,
    inputs: tuple[bytes, ...] = (),
    outputs: tuple[bytes, ...] = (),
    instructions: bytes | None = b'"be brief"',
    status: ResponseStatus = ResponseStatus.COMPLETED,
) -> StoredResponse:
    inputs = inputs or (item("message", None, "hello"),)
    outputs = outputs or (item("message", f"msg_{response_id}", "hi"),)
    response = orjson.dumps({"id": response_id, "object": "response", "status": status})
    return StoredResponse(
        id=response_id,
        tenant=tenant,
        created_at=1_700_000_000.5,
        instructions=instructions,
        input_items=inputs,
        output_items=outputs,
        response=response,
        status=status,
    )


@attrs.define
class Backend:
    """A store under test, and how to make everything in it reach its TTL."""

    name: str
    store: StateStore
    expire_all: Callable[[], Awaitable[None]]
    redis: RunningRedis | None = None


def redis_config(redis: RunningRedis, **changes: object) -> StateConfig:
    return attrs.evolve(
        StateConfig(backend=StateBackend.REDIS, url=redis.url, key_prefix="test:"), **changes
    )


async def expire_redis_keys(url: str) -> None:
    """Give every key a TTL of 1 ms, and let it pass: Redis then answers none of them
    (it expires a key when it is read, if its sweep has not yet)."""
    async with coredis.Redis.from_url(url) as client:
        for key in await client.keys("*"):
            await client.pexpire(key, 1)
    await trio.sleep(0.01)


@pytest.fixture(params=["memory", pytest.param("redis", marks=needs_redis)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = FakeClock()
        config = StateConfig(ttl=60.0)

        async def advance() -> None:
            clock.advance(61.0)

        async with open_store(config, clock=clock) as store:
            yield Backend("memory", store, advance)
        return
    async with open_redis() as redis, open_store(redis_config(redis, ttl=60.0)) as store:
        yield Backend("redis", store, lambda: expire_redis_keys(redis.url), redis)


@pytest.fixture
def fake_clock() -> Iterator[FakeClock]:
    yield FakeClock()
