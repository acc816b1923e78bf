"""The hot calls' one pipelined connection against a real redis-server: replies reach
their own callers in order, a finish in flight lands before the admission behind it,
and a Redis that dies or freezes mid-pipeline fails every waiter, nothing hangs."""

from __future__ import annotations

import trio
import trio.testing

from proxai.policy.limits import KeyRule, Limit
from proxai.state import StateUnavailable, open_backend
from proxai.state.redis_wire import Wire, WireTarget
from proxai.testing.redis import RunningRedis, open_redis

from .conftest import needs_redis, redis_config

pytestmark = needs_redis
T = "t" * 64
#: A bound on a test that would otherwise hang; never what a test asserts.
HANG = 30


def wire_for(redis: RunningRedis, timeout: float = 5.0) -> Wire:
    target = WireTarget.from_url(redis.url)
    assert target is not None
    return Wire(target, timeout=timeout)


async def test_concurrent_callers_get_their_own_replies_on_one_connection() -> None:
    async with open_redis() as redis, trio.open_nursery() as nursery:
        wire = wire_for(redis)
        await nursery.start(wire.run)
        got: dict[int, object] = {}
        ids: set[object] = set()

        async def one(i: int) -> None:
            await trio.sleep(0.001 * (i % 3))
            got[i] = await wire.call(["ECHO", f"n{i}" * (1 + i % 50)])
            ids.add(await wire.call(["CLIENT", "ID"]))

        with trio.fail_after(HANG):
            async with trio.open_nursery() as callers:
                for i in range(200):
                    callers.start_soon(one, i)
        assert got == {i: f"n{i}".encode() * (1 + i % 50) for i in range(200)}
        assert len(ids) == 1  # one connection for every task
        nursery.cancel_scope.cancel()


async def test_a_finish_in_flight_lands_before_the_admission_behind_it() -> None:
    """The end of a request and the next one of the same key, admitted at once: on the
    one connection Redis runs them in the order they were sent, so the next admission
    finds the slot free and the tokens charged (no over- or under-count)."""
    rule = KeyRule("k", tokens_per_minute=100, max_concurrent_streams=1)
    async with open_redis() as redis, open_backend(redis_config(redis)) as backend:
        limiter = backend.limiter(30.0, trio.current_time)
        assert (await limiter.admit(T, rule, "r1", 0)).admitted
        with trio.fail_after(HANG):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(limiter.finish, T, rule, "r1", 100)
                await trio.testing.wait_all_tasks_blocked()  # its script is sent
                after = await limiter.admit(T, rule, "r2", 0)
        assert after.refused is Limit.TOKENS  # the charge was seen: 100 of 100 used
        assert after.streams == 0  # and the slot was free
        assert after.tokens is not None and after.tokens.used == 100


async def test_redis_gone_mid_pipeline_fails_every_waiter_and_then_serves_again() -> None:
    async with open_redis() as redis, trio.open_nursery() as nursery:
        wire = wire_for(redis, timeout=1.0)
        await nursery.start(wire.run)
        assert await wire.call(["PING"]) == b"PONG"
        failures: list[str] = []

        async def waiter() -> None:
            try:
                await wire.call(["BLPOP", "nothing", "0"])  # answered by nobody
            except StateUnavailable as exc:
                failures.append(exc.message)

        with trio.fail_after(HANG):
            async with trio.open_nursery() as callers:
                for _ in range(20):
                    callers.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()
                await redis.stop()  # the connection ends under 20 waiters
            assert len(failures) == 20
            await redis.start()
            await _answered_again(wire)
        nursery.cancel_scope.cancel()


async def _answered_again(wire: Wire) -> None:
    """Return once ``wire`` answers a PING again (on a new connection)."""
    while True:
        try:
            answer = await wire.call(["PING"])
        except StateUnavailable:
            await trio.sleep(0.05)
        else:
            assert answer == b"PONG"
            return


async def test_a_frozen_redis_fails_every_waiter_within_the_timeout() -> None:
    async with open_redis() as redis, trio.open_nursery() as nursery:
        wire = wire_for(redis, timeout=0.5)
        await nursery.start(wire.run)
        await wire.call(["PING"])
        redis.freeze()
        failed: list[float] = []

        async def waiter() -> None:
            try:
                await wire.call(["GET", "k"])
            except StateUnavailable:
                failed.append(trio.current_time())

        started = trio.current_time()
        with trio.fail_after(HANG):
            async with trio.open_nursery() as callers:
                for _ in range(10):
                    callers.start_soon(waiter)
        redis.thaw()
        assert len(failed) == 10
        assert max(failed) - started < 5  # the 0.5 s timeout, not a hang
        with trio.fail_after(HANG):
            await _answered_again(wire)
        nursery.cancel_scope.cancel()


def test_urls_it_speaks_and_those_it_leaves_to_coredis() -> None:
    target = WireTarget.from_url("rediss://u%40x:p%3Aw@h.example:6380/2")
    assert target == WireTarget("h.example", 6380, 2, "u@x", "p:w", tls=True)
    assert target.handshake() == [["AUTH", "u@x", "p:w"], ["SELECT", 2]]
    assert WireTarget.from_url("redis://localhost") == WireTarget("localhost", 6379)
    assert WireTarget.from_url("unix:///tmp/redis.sock") is None
    assert WireTarget.from_url("redis://h/0?ssl_cert_reqs=none") is None


async def test_a_password_is_sent_on_connect() -> None:
    async with open_redis("--requirepass", "s3cret") as redis, trio.open_nursery() as nursery:
        url = redis.url.replace("redis://", "redis://:s3cret@")
        target = WireTarget.from_url(url)
        assert target is not None
        wire = Wire(target, timeout=5.0)
        await nursery.start(wire.run)
        with trio.fail_after(HANG):
            assert await wire.call(["PING"]) == b"PONG"
        bad = Wire(WireTarget("127.0.0.1", redis.port, password="wrong"), timeout=5.0)
        await nursery.start(bad.run)
        with trio.fail_after(HANG):
            try:
                await bad.call(["PING"])
                raise AssertionError("a wrong password was taken")
            except StateUnavailable as exc:
                assert "wrong" not in exc.message
        nursery.cancel_scope.cancel()
