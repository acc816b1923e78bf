"""Both limiters behind one contract (memory, and Redis on a real redis-server), then
what only Redis does: windows shared by two limiters, one round trip per decision, a
lease that lapses when nobody renews it, and a Redis that is away."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import coredis
import pytest
import trio

from proxai.config import StateBackend, StateConfig
from proxai.config_file import load_config
from proxai.outcome import Outcome
from proxai.policy.auth import UNAUTHENTICATED_TENANT
from proxai.policy.limits import KeyRule, Limit, Limiter, MemoryLimiter, Release
from proxai.service.limits import KeyLimits
from proxai.state import BACKENDS, StateUnavailable, open_backend
from proxai.state.redis_limits import RedisLimiter
from proxai.testing.redis import open_redis

from .conftest import needs_redis, redis_config
from .test_redis import Monitor

T = "a" * 64
HANG = 30
#: [state] timeout where a frozen Redis must time out: the same calls to a healthy one must
#: not, however loaded the machine (pauses of over half a second happen).
STATE_TIMEOUT = 1.0


@attrs.define
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", pytest.param("redis", marks=needs_redis)])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    if request.param == "memory":
        yield MemoryLimiter(lease=30.0, clock=Clock())
        return
    async with open_redis() as redis, open_backend(redis_config(redis)) as backend:
        yield backend.limiter(30.0, trio.current_time)


async def test_requests_per_minute(limiter: Limiter) -> None:
    rule = KeyRule("k", requests_per_minute=2)
    first = await limiter.admit(T, rule, "r1", 0)
    second = await limiter.admit(T, rule, "r2", 0)
    third = await limiter.admit(T, rule, "r3", 0)
    assert first.admitted and second.admitted
    assert first.requests is not None and first.requests.remaining == 1
    assert third.refused is Limit.REQUESTS
    assert 59 < third.retry_after <= 60  # the window's oldest leaves in a minute
    assert third.requests is not None and (third.requests.used, third.requests.remaining) == (2, 0)
    assert (await limiter.admit("b" * 64, rule, "r4", 0)).admitted  # another key's window


async def test_tokens_charged_at_the_end(limiter: Limiter) -> None:
    rule = KeyRule("k", tokens_per_minute=150)
    assert (await limiter.admit(T, rule, "r1", 0)).admitted
    await limiter.finish(T, rule, "r1", 100)
    second = await limiter.admit(T, rule, "r2", 0)
    assert second.admitted and second.tokens is not None
    assert (second.tokens.used, second.tokens.remaining) == (100, 50)
    await limiter.finish(T, rule, "r2", 100)
    third = await limiter.admit(T, rule, "r3", 0)
    assert third.refused is Limit.TOKENS and 59 < third.retry_after <= 60
    assert third.tokens is not None and (third.tokens.used, third.tokens.remaining) == (200, 0)


async def test_slots_of_the_key_and_the_fleet(limiter: Limiter) -> None:
    rule = KeyRule("k", max_concurrent_streams=1)
    free = KeyRule("f")
    assert (await limiter.admit(T, rule, "s1", 2)).admitted
    assert (await limiter.admit(T, rule, "s2", 2)).refused is Limit.STREAMS
    assert (await limiter.admit("b" * 64, free, "s3", 2)).admitted
    fleet = await limiter.admit("c" * 64, free, "s4", 2)
    assert fleet.refused is Limit.FLEET_STREAMS and fleet.retry_after == 1.0
    await limiter.finish(T, rule, "s1", 0)
    assert (await limiter.admit(T, rule, "s5", 2)).admitted
    await limiter.renew([(T, "s5", rule), ("b" * 64, "s3", free)])


async def test_releases_sent_late_free_their_slots_and_date_their_charges(
    limiter: Limiter,
) -> None:
    """What a backend did not answer is sent again later, many at once: the slots come
    back and each charge counts from when its request ended."""
    rule = KeyRule("k", tokens_per_minute=100, max_concurrent_streams=1)
    other = KeyRule("o", max_concurrent_streams=1)
    assert (await limiter.admit(T, rule, "s1", 2)).admitted
    assert (await limiter.admit("b" * 64, other, "s2", 2)).admitted
    assert (await limiter.admit("c" * 64, KeyRule("c"), "s3", 2)).refused is Limit.FLEET_STREAMS
    await limiter.release(
        [
            Release(T, rule, "s1", 80, age=50.0),
            Release("b" * 64, other, "s2"),
            Release(T, rule, "never-admitted"),  # an admission that never ran: nothing
        ]
    )
    after = await limiter.admit(T, rule, "s4", 2)
    assert after.admitted and after.tokens is not None and after.tokens.used == 80
    assert 9 < after.tokens.reset <= 10  # ended 50 s ago: it leaves the window in 10 s
    assert (await limiter.admit("b" * 64, other, "s5", 2)).admitted  # both slots came back
    await limiter.release([Release(T, rule, "s4", 500, age=61.0)])  # past the window
    last = await limiter.admit(T, rule, "s6", 2)
    assert last.admitted and last.tokens is not None and last.tokens.used == 80


@needs_redis
async def test_two_limiters_on_one_redis_share_every_window() -> None:
    rule = KeyRule("k", requests_per_minute=3, max_concurrent_streams=2)
    async with (
        open_redis() as redis,
        open_backend(redis_config(redis)) as one,
        open_backend(redis_config(redis)) as two,
    ):
        a, b = one.limiter(30.0, trio.current_time), two.limiter(30.0, trio.current_time)
        results = [await (a, b)[i % 2].admit(T, rule, f"r{i}", 0) for i in range(4)]
        assert [r.refused for r in results] == [None, None, Limit.STREAMS, Limit.STREAMS]
        await a.finish(T, rule, "r0", 0)
        third = await b.admit(T, rule, "r9", 0)
        assert third.admitted and third.requests is not None and third.requests.remaining == 0
        await b.finish(T, rule, "r9", 0)
        assert (await a.admit(T, rule, "r10", 0)).refused is Limit.REQUESTS
        assert a.use()[0].requests == 3


@needs_redis
async def test_admission_and_the_end_are_one_round_trip_each() -> None:
    rule = KeyRule("k", requests_per_minute=5, tokens_per_minute=500, max_concurrent_streams=2)
    async with open_redis() as redis, open_backend(redis_config(redis)) as backend:
        limiter = backend.limiter(30.0, trio.current_time)
        await limiter.admit(T, rule, "warm", 3)  # loads the scripts: the first use only
        await limiter.finish(T, rule, "warm", 10)
        await limiter.renew([(T, "warm", rule)])
        stream = await trio.open_tcp_stream("127.0.0.1", redis.port)
        async with stream, coredis.Redis.from_url(redis.url) as client:
            await client.ping()
            await stream.send_all(b"MONITOR\r\n")
            monitor = Monitor(stream, client)
            assert await monitor._line() == b"+OK"
            await limiter.admit(T, rule, "r1", 3)
            assert await monitor.commands() == ["evalsha"]
            await limiter.finish(T, rule, "r1", 42)
            assert await monitor.commands() == ["evalsha"]
            await limiter.renew([(T, "a", rule), (T, "b", rule)])
            assert await monitor.commands() == ["evalsha"]
            await limiter.release([Release(T, rule, f"p{i}", 5, age=1.0) for i in range(50)])
            assert await monitor.commands() == ["evalsha"]


@needs_redis
async def test_a_slot_nobody_renews_lapses_with_its_lease() -> None:
    # Redis's own clock (TIME) counts the lease: real time, so each step is half a second
    # from the instant that would change its answer (0.1 s was, on a loaded machine).
    rule = KeyRule("k", max_concurrent_streams=1)
    async with open_redis() as redis, open_backend(redis_config(redis)) as backend:
        limiter = backend.limiter(1.5, trio.current_time)
        assert (await limiter.admit(T, rule, "held", 0)).admitted
        assert (await limiter.admit(T, rule, "other", 0)).refused is Limit.STREAMS
        await trio.sleep(1.0)
        await limiter.renew([(T, "held", rule)])  # alive: 1.5 s more (to 2.5 s)
        await trio.sleep(1.0)  # 2.0 s: past the first lease, inside the renewed one
        assert (await limiter.admit(T, rule, "other", 0)).refused is Limit.STREAMS
        await trio.sleep(1.5)  # 3.5 s: its holder died (no renewal): free
        assert (await limiter.admit(T, rule, "other", 0)).admitted


@needs_redis
async def test_a_redis_away_is_state_unavailable_within_the_timeout_and_then_back() -> None:
    rule = KeyRule("k", requests_per_minute=5)
    async with open_redis() as redis:
        config = redis_config(redis, timeout=STATE_TIMEOUT)
        async with open_backend(config) as backend:
            limiter = backend.limiter(30.0, trio.current_time)
            assert (await limiter.admit(T, rule, "r1", 0)).admitted
            redis.freeze()
            started = trio.current_time()
            with trio.fail_after(HANG), pytest.raises(StateUnavailable):
                await limiter.admit(T, rule, "r2", 0)
            assert trio.current_time() - started < 5  # the 1 s timeout, not a hang
            redis.thaw()
            await redis.stop()
            with trio.fail_after(HANG), pytest.raises(StateUnavailable):
                await limiter.finish(T, rule, "r1", 0)
            await redis.start()
            with trio.fail_after(HANG):
                while True:
                    try:
                        decision = await limiter.admit(T, rule, "r3", 0)
                        break
                    except StateUnavailable:
                        await trio.sleep(0.05)
            assert decision.admitted  # an empty Redis: a new window


@needs_redis
async def test_an_admission_cut_off_by_the_timeout_runs_when_redis_wakes() -> None:
    """Why a timed-out admission must be released too: a frozen Redis runs what it had
    queued when it wakes, and the slot is taken for a request served without one."""
    free = KeyRule("f")
    async with (
        open_redis() as redis,
        open_backend(redis_config(redis, timeout=STATE_TIMEOUT)) as backend,
    ):
        limiter = backend.limiter(30.0, trio.current_time)
        await limiter.admit(T, free, "warm", 1)  # loads the script (a late EVALSHA runs)
        await limiter.release([Release(T, free, "warm")])
        redis.freeze()
        with trio.fail_after(HANG), pytest.raises(StateUnavailable):
            await limiter.admit(T, free, "timed-out", 1)
        redis.thaw()
        with trio.fail_after(HANG):
            taken = await limiter.admit(T, free, "next", 1)
            await limiter.release([Release(T, free, "timed-out")])
            freed = await limiter.admit(T, free, "after", 1)
    assert taken.refused is Limit.FLEET_STREAMS  # the late script took the only slot
    assert freed.admitted


@needs_redis
async def test_key_limits_send_what_redis_did_not_answer_once_it_answers() -> None:
    """A release that timed out, and an admission that did (served unlimited), each
    leave a slot taken in Redis; both are sent again by the lease task once Redis
    answers (the admission twice), not left to the lease: the fleet is whole again."""
    async with open_redis() as redis:
        overrides = {
            "upstream": {"base_url": "http://upstream.test/v1"},
            "state": {"backend": "redis", "url": redis.url, "timeout": STATE_TIMEOUT},
            "limits": {"fleet_max_concurrent_streams": 2, "slot_lease": 30.0},
        }
        config = load_config(None, overrides=overrides)
        limits = KeyLimits(config, None)
        async with open_backend(config.state) as backend, trio.open_nursery() as nursery:
            limits.open(backend)
            nursery.start_soon(limits.renew_leases)
            with trio.fail_after(HANG):
                first = await limits.admit(UNAUTHENTICATED_TENANT, "r1", Outcome("POST", "/"))
                assert first is not None
                redis.freeze()
                served = Outcome("POST", "/")
                assert await limits.admit(UNAUTHENTICATED_TENANT, "r2", served) is None
                ended = Outcome("POST", "/")
                await limits.finish(first, ended)
                assert len(limits.pending) == 2
                redis.thaw()
                thawed = trio.current_time()
                while len(limits.pending):  # noqa: ASYNC110 (a state of another task)
                    await trio.sleep(0.05)
                sent_in = trio.current_time() - thawed
                both = [
                    await limits.admit(UNAUTHENTICATED_TENANT, f"r{i}", Outcome("POST", "/"))
                    for i in (3, 4)
                ]
            nursery.cancel_scope.cancel()
    assert any("limits not enforced at admission" in w for w in served.warnings)
    assert any("sent again once it answers" in w for w in ended.warnings)
    assert sent_in < 10  # two tries of the lease task, a second apart (not the 30 s lease)
    assert all(a is not None for a in both)  # neither slot was left taken


async def test_the_memory_backend_is_per_process() -> None:
    async with open_backend(StateConfig()) as backend:
        limiter = backend.limiter(30.0, Clock())
    assert isinstance(limiter, MemoryLimiter) and not limiter.shared
    assert not BACKENDS[StateBackend.MEMORY].shared
    assert StateConfig().backend is StateBackend.MEMORY


@needs_redis
async def test_the_redis_limiter_is_built_on_its_store_s_connection() -> None:
    """No downcast of the store: the row builds both on the one connection it opens."""
    async with open_redis() as redis, open_backend(redis_config(redis)) as backend:
        limiter = backend.limiter(30.0, trio.current_time)
        assert isinstance(limiter, RedisLimiter) and limiter.shared
        assert limiter._connection is backend.store._connection  # type: ignore[attr-defined]
    assert BACKENDS[StateBackend.REDIS].shared


def test_every_backend_has_a_row() -> None:
    assert set(BACKENDS) == set(StateBackend)
    assert all(row.backend is backend for backend, row in BACKENDS.items())
