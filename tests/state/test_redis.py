"""The Redis backend against a real redis-server: Redis does the expiry, one command per
call, and a Redis that is down, stopped or silent costs a 503 within the timeout and
nothing once it is back."""

from __future__ import annotations

import coredis
import pytest
import trio

from proxai.state import StateUnavailable, open_store
from proxai.testing.redis import RunningRedis, open_redis

from .conftest import item, needs_redis, record, redis_config

pytestmark = needs_redis
A = "a" * 64
#: A bound on a test that would otherwise hang; never what a test asserts.
HANG = 30


async def test_every_key_of_a_put_has_the_ttl_and_the_prefix() -> None:
    async with open_redis() as redis, open_store(redis_config(redis, ttl=90.0)) as store:
        await store.put(record(outputs=(item("message", "m1"), item("reasoning", "rs_1"))))
        async with coredis.Redis.from_url(redis.url) as client:
            keys = sorted(await client.keys("*"))
            assert keys == [
                f"test:item:{A}:m1".encode(),
                f"test:item:{A}:rs_1".encode(),
                f"test:resp:{A}:resp_1".encode(),
            ]
            for key in keys:
                assert 60_000 < await client.pttl(key) <= 90_000  # the same TTL on each


async def test_a_ttl_in_milliseconds_is_expired_by_redis() -> None:
    async with open_redis() as redis, open_store(redis_config(redis, ttl=0.02)) as store:
        await store.put(record())
        await trio.sleep(0.03)  # past the TTL, whatever the machine's load
        assert await store.get(A, "resp_1") is None
        assert await store.item(A, "msg_resp_1") is None


class Monitor:
    """The commands clients send Redis, as ``MONITOR`` shows them (a script's own
    commands, shown as ``[0 lua]``, are left out: they are no round trip)."""

    def __init__(self, stream: trio.SocketStream, client: coredis.Redis[bytes]) -> None:
        self._stream = stream
        self._client = client
        self._buffer = b""
        self._marks = 0

    async def _line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            self._buffer += await self._stream.receive_some(65536)
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    async def commands(self) -> list[str]:
        """Those sent since the last call."""
        self._marks += 1
        mark = f"mark-{self._marks}"
        await self._client.echo(mark)
        names = []
        while mark.encode() not in (line := await self._line()):
            if b" lua] " not in line:
                names.append(line.split(b'"')[1].decode().lower())
        return names


async def test_each_call_is_one_command() -> None:
    """One command is one round trip: the record and its index go in one script."""
    async with open_redis() as redis, open_store(redis_config(redis)) as store:
        await store.put(record("resp_0"))  # loads the scripts: the first use only
        await store.delete(A, "resp_0")
        await store.item(A, "x")
        stream = await trio.open_tcp_stream("127.0.0.1", redis.port)
        async with stream, coredis.Redis.from_url(redis.url) as client:
            await client.ping()  # its connection made before the monitor starts
            await stream.send_all(b"MONITOR\r\n")
            monitor = Monitor(stream, client)
            assert await monitor._line() == b"+OK"
            await store.put(record(outputs=(item("a", "1"), item("b", "2"), item("c", "3"))))
            assert await monitor.commands() == ["evalsha"]
            assert await store.get(A, "resp_1") is not None
            assert await monitor.commands() == ["get"]
            assert await store.item(A, "2") == item("b", "2")
            assert await monitor.commands() == ["evalsha"]
            assert await store.delete(A, "resp_1") is True
            assert await monitor.commands() == ["evalsha"]


async def test_a_stopped_redis_is_a_503_and_its_return_is_served() -> None:
    async with open_redis() as redis, open_store(redis_config(redis, timeout=0.5)) as store:
        await store.put(record())
        await redis.stop()
        with trio.fail_after(HANG):
            for call in (store.get(A, "resp_1"), store.put(record("resp_2"))):
                with pytest.raises(StateUnavailable) as raised:
                    await call
        error = raised.value
        assert (error.status, error.code) == (503, "state_unavailable")
        assert b"unavailable" in error.body() and redis.url.encode() not in error.body()
        await redis.start()  # same port, empty (nothing on disk)
        with trio.fail_after(HANG):
            assert await store.get(A, "resp_1") is None
            await store.put(record())
            assert await store.get(A, "resp_1") is not None


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "connecting"])
async def test_a_silent_redis_is_a_503_after_the_timeout_and_then_served(connected: bool) -> None:
    """A Redis that accepts connections and answers nothing (stopped with SIGSTOP):
    each call ends at the timeout, more of them than the pool has connections, on the
    connection the store had or on new ones stuck in their handshake; once Redis
    answers again the next call is served, with its own answer."""
    async with open_redis() as redis:
        # 0.5 s: the healthy calls before and after must not meet it on a loaded machine.
        config = redis_config(redis, timeout=0.5, url=redis.url + "?max_connections=2")
        await put_from_another_store(redis)
        async with open_store(config) as store:
            if connected:
                assert await store.get(A, "resp_1") == record()
            redis.freeze()
            try:
                with trio.fail_after(HANG):
                    for _ in range(5):
                        with pytest.raises(StateUnavailable, match=r"within 0\.5 s"):
                            await store.get(A, "resp_1")
            finally:
                redis.thaw()
            with trio.fail_after(HANG):
                assert await store.get(A, "resp_2") is None
                assert await store.get(A, "resp_1") == record()


async def put_from_another_store(redis: RunningRedis) -> None:
    async with open_store(redis_config(redis)) as store:
        await store.put(record())


async def test_redis_down_at_start_up_is_no_failure() -> None:
    async with open_redis() as redis:
        await redis.stop()
        async with open_store(redis_config(redis, timeout=0.5)) as store:
            with trio.fail_after(HANG), pytest.raises(StateUnavailable):
                await store.get(A, "resp_1")
            await redis.start()
            with trio.fail_after(HANG):
                await store.put(record())
                assert await store.get(A, "resp_1") is not None


async def test_the_password_goes_in_the_url() -> None:
    async with open_redis("--requirepass", "s3c@ret") as redis:
        url = redis.url.replace("redis://", "redis://:s3c%40ret@")  # %-encoded, as URLs are
        async with open_store(redis_config(redis, url=url)) as store:
            await store.put(record())
            assert await store.get(A, "resp_1") is not None
        async with open_store(redis_config(redis, timeout=0.5)) as store:
            with pytest.raises(StateUnavailable) as raised:
                await store.get(A, "resp_1")
            assert b"s3c" not in raised.value.body()


async def test_a_closed_store_answers_nothing() -> None:
    async with open_redis() as redis, open_store(redis_config(redis)) as store:
        await store.aclose()
        await store.aclose()
        with pytest.raises(StateUnavailable, match="closed"):
            await store.get(A, "resp_1")


async def test_an_id_cannot_leave_its_tenant_s_namespace() -> None:
    """Ids come from clients: a key's hash tag (``{...}``), a glob (``*``), a newline,
    a NUL, a Lua pattern, another tenant's digest and a colon, or the name of a record
    key, are text inside their own tenant's key, never another key's: every key stays
    under the prefix and the tenant, another tenant sees none of them, and a delete
    drops exactly the record's own."""
    b = "b" * 64
    odd = ["{proxai}*", "x\ny", "nul\x00byte", "%d+ (.+)$", f"{b}:m", "resp:" + b, "../*"]
    outputs = tuple(item("message", i) for i in odd)
    async with open_redis() as redis, open_store(redis_config(redis)) as store:
        await store.put(record("resp_1", outputs=outputs))
        await store.put(record("resp_1", tenant=b))  # B's own response of the same id
        for item_id in odd:
            assert await store.item(A, item_id) == item("message", item_id)
            assert await store.item(b, item_id) is None
        async with coredis.Redis.from_url(redis.url) as client:
            keys = set(await client.keys("*"))
            assert len(keys) == 2 + len(odd) + 1  # two records, A's pointers, B's one
            ours = {k for k in keys if k.startswith(f"test:item:{A}:".encode())}
            assert ours == {f"test:item:{A}:{i}".encode() for i in odd}
            assert await store.delete(A, "resp_1") is True
            left = set(await client.keys("*"))
        assert left == {f"test:resp:{b}:resp_1".encode(), f"test:item:{b}:msg_resp_1".encode()}
        assert await store.get(b, "resp_1") is not None
