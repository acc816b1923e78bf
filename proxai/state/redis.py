"""The Redis backend (``[state] backend = "redis"``), on coredis over trio.

Keys (``P`` is ``[state] key_prefix``; a tenant is hex or ``unauthenticated``, so
never holds a colon):

- ``P resp:<tenant>:<id>``: the record's bytes (:meth:`StoredResponse.to_bytes`);
- ``P item:<tenant>:<item id>``: ``"<offset> <length> <record key>"``, where the item
  lies in the record it was last stored with;
- ``P owner:<id>``: the tenant that claimed an id an upstream that keeps state minted
  (one script sets them ``NX`` with the store's TTL, one ``MGET`` reads them).

Both are written by one Lua script with the same ``PX`` TTL, so Redis expires a record
and its index together and one round trip stores them; ``get`` is one ``GET``, an item
one script (the pointer, then a ``GETRANGE`` of the record: a pointer whose record was
deleted or evicted answers nothing), ``delete`` one script (it reads the record's
header for its item ids, and drops the pointers that still point into it).

Every call is bounded by ``[state] timeout`` and any failure is
:class:`~proxai.state.store.StateUnavailable`. A :class:`RedisConnection` lives in
:meth:`RedisConnection.run`'s task and any task may call it: the backend's one
connection, which the store here and the limiter (:mod:`proxai.state.redis_limits`)
are both built on. The hot calls (:meth:`~RedisConnection.run_script`, ``get``,
``mget``) go on one pipelined stream (:mod:`proxai.state.redis_wire`), in the order
they are sent; :meth:`~RedisConnection.call` is coredis's pool, for the rest (and for
every call when the URL is one the stream does not speak). Either way a connection
that died is replaced by the next call that needs one: a Redis that went away, or
stopped answering, is served again as soon as it is back, with nothing to reset.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import coredis
import coredis.exceptions
import trio
from coredis.commands import Script

from ..config import StateConfig
from .records import RecordFormatError, StoredResponse
from .redis_wire import Wire, WireTarget
from .resp import ErrorReply, Reply
from .store import StateUnavailable

__all__ = ["RedisConnection", "RedisStore", "open_redis"]

log = logging.getLogger("proxai.state")
T = TypeVar("T")

# drop(record key, item key prefix): forget a record and the pointers into it.
_DROP = """
local function drop(rec, items)
  local head = redis.call('GETRANGE', rec, 0, 23)
  if head == '' then return 0 end
  local nl = string.find(head, '\\n', 1, true)
  local n = tonumber(string.sub(head, 1, nl - 1))
  local header = cjson.decode(redis.call('GETRANGE', rec, nl, nl + n - 1))
  for _, id in ipairs(header['item_ids']) do
    if id ~= cjson.null then
      local key = items .. id
      local ptr = redis.call('GET', key)
      if ptr and string.match(ptr, '^%d+ %d+ (.+)$') == rec then
        redis.call('DEL', key)
      end
    end
  end
  redis.call('DEL', rec)
  return 1
end
"""
# KEYS: record, then item pointers; ARGV: item prefix, ttl ms, record, then pointers.
_PUT: Script[bytes] = Script(
    script=_DROP
    + """
drop(KEYS[1], ARGV[1])
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 2], 'PX', ARGV[2])
end
return 1
"""
)
_DELETE: Script[bytes] = Script(script=_DROP + "\nreturn drop(KEYS[1], ARGV[1])\n")
_ITEM: Script[bytes] = Script(
    script="""
local ptr = redis.call('GET', KEYS[1])
if not ptr then return false end
local s, n, rec = string.match(ptr, '^(%d+) (%d+) (.+)$')
if not rec then return false end
local value = redis.call('GETRANGE', rec, tonumber(s), tonumber(s) + tonumber(n) - 1)
if value == '' then return false end
return value
"""
)

# KEYS: owner keys; ARGV: tenant, ttl ms. The first owner stays (NX).
_CLAIM: Script[bytes] = Script(
    script="""
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2])
end
return 1
"""
)


#: The store's scripts, which its connection loads first (with the limiter's).
STORE_SCRIPTS: tuple[Script[bytes], ...] = (_PUT, _DELETE, _ITEM, _CLAIM)


class RedisConnection:
    """The Redis backend's connection pool (see the module's docstring); started with
    ``await nursery.start(connection.run)``, ended by :meth:`aclose`."""

    def __init__(
        self, config: StateConfig, scripts: Sequence[Script[bytes]] = STORE_SCRIPTS
    ) -> None:
        assert config.url is not None
        self._url = config.url
        self._timeout = config.timeout
        self._prefix = config.key_prefix
        self._client: coredis.Redis[bytes] | None = None
        self._closed = trio.Event()
        self._ready = trio.Event()  # set: a pool is open (or never will be again)
        self._closing = False
        self._done = trio.Event()
        target = WireTarget.from_url(config.url)
        #: The hot calls' one pipelined connection (None: a URL it does not speak).
        self._wire = (
            Wire(target, timeout=config.timeout, scripts=[s.script for s in scripts])
            if target is not None
            else None
        )

    def _new_client(self) -> coredis.Redis[bytes]:
        # A connection attempt gives up before the call's own deadline, so a silent
        # Redis fails inside coredis first; a URL's user and password are %-decoded.
        return coredis.Redis.from_url(
            self._url, decode_components=True, connect_timeout=self._timeout / 2
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold a connection pool open until :meth:`aclose` (a new one should it fail).
        Redis need not be up: connections are made by the calls, as needed."""
        async with trio.open_nursery() as nursery:
            if self._wire is not None:
                await nursery.start(self._wire.run)
            task_status.started()
            try:
                await self._hold_pool()
            finally:
                nursery.cancel_scope.cancel()

    async def _hold_pool(self) -> None:
        try:
            while not self._closing:
                client = self._new_client()
                try:
                    async with client:
                        self._open(client)
                        await self._closed.wait()
                except Exception as exc:  # a pool that failed: the next one may not
                    log.warning("state: the Redis connection pool failed (%s)", type(exc).__name__)
                    with trio.move_on_after(min(self._timeout, 1.0)):
                        await self._closed.wait()
                finally:
                    if self._client is not None:
                        self._client = None
                        self._ready = trio.Event()
        finally:
            self._done.set()
            self._ready.set()  # calls waiting for a pool: there will be none

    def _open(self, client: coredis.Redis[bytes]) -> None:
        self._client = client
        self._ready.set()

    async def aclose(self) -> None:
        """Close the pool (idempotent): every call fails from then on."""
        if self._done.is_set():
            return
        self._closing = True
        if self._wire is not None:
            self._wire.close()
        self._closed.set()
        await self._done.wait()

    @property
    def key_prefix(self) -> str:
        return self._prefix

    async def call(self, call: Callable[[coredis.Redis[bytes]], Awaitable[T]]) -> T:
        """``call`` on the pool, within ``[state] timeout``; raises StateUnavailable."""
        with trio.move_on_after(self._timeout):
            while (client := self._client) is None:  # a pool being replaced: wait for it
                if self._closing:
                    raise StateUnavailable("the store is closed")
                await self._ready.wait()
            try:
                return await call(client)
            except (coredis.exceptions.RedisError, OSError, RuntimeError) as exc:
                # Never the exception's text: it may quote the URL or the data.
                raise StateUnavailable(f"Redis: {type(exc).__name__}") from None
        raise StateUnavailable(f"Redis did not answer within {self._timeout:g} s")

    async def run_script(
        self, script: Script[bytes], keys: list[str], args: list[str | bytes | int]
    ) -> Any:
        """One Lua script, one round trip (``EVALSHA``; ``EVAL`` once if Redis does not
        hold it yet), under the timeout; raises StateUnavailable."""
        wire = self._wire
        if wire is None:
            return await self.call(lambda client: script(keys=keys, args=args, client=client))
        reply = await wire.call(["EVALSHA", script.sha, len(keys), *keys, *args])
        if isinstance(reply, ErrorReply) and reply.kind == "NOSCRIPT":
            reply = await wire.call(["EVAL", script.script, len(keys), *keys, *args])
        return _answer(reply)

    async def get(self, key: str) -> bytes | None:
        """``GET key``; raises StateUnavailable."""
        wire = self._wire
        if wire is None:
            return await self.call(lambda client: client.get(key))
        reply = _answer(await wire.call(["GET", key]))
        return reply if isinstance(reply, bytes) else None

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """``MGET keys``; raises StateUnavailable."""
        wire = self._wire
        if wire is None:
            return list(await self.call(lambda client: client.mget(keys)))
        reply = _answer(await wire.call(["MGET", *keys]))
        assert isinstance(reply, list)
        return [v if isinstance(v, bytes) else None for v in reply]


def _answer(reply: Reply) -> Reply:
    """A reply, or the StateUnavailable of an error reply (its kind, never its text)."""
    if isinstance(reply, ErrorReply):
        raise StateUnavailable(f"Redis: {reply.kind}")
    return reply


class RedisStore:
    """A :class:`~proxai.state.store.StateStore` on a :class:`RedisConnection`."""

    def __init__(self, connection: RedisConnection, *, ttl: float) -> None:
        self._connection = connection
        self._ttl_ms = max(1, round(ttl * 1000))
        self._prefix = connection.key_prefix

    async def aclose(self) -> None:
        await self._connection.aclose()

    # -- the calls -----------------------------------------------------------------------

    def _record_key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}resp:{tenant}:{response_id}"

    def _items_prefix(self, tenant: str) -> str:
        return f"{self._prefix}item:{tenant}:"

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = self._record_key(tenant, response_id)
        data = await self._connection.get(key)
        if data is None:
            return None
        try:
            record = StoredResponse.from_bytes(data)
        except RecordFormatError:
            log.warning("state: a stored record of another format was skipped")
            return None
        return record if record.tenant == tenant and record.id == response_id else None

    async def put(self, record: StoredResponse) -> None:
        rec = self._record_key(record.tenant, record.id)
        items = self._items_prefix(record.tenant)
        keys = [rec]
        args: list[str | bytes | int] = [items, self._ttl_ms, record.to_bytes()]
        for item_id, offset, length in record.item_spans():
            keys.append(items + item_id)
            args.append(f"{offset} {length} {rec}")
        await self._connection.run_script(_PUT, keys, args)

    async def delete(self, tenant: str, response_id: str) -> bool:
        keys = [self._record_key(tenant, response_id)]
        args: list[str | bytes | int] = [self._items_prefix(tenant)]
        dropped: Any = await self._connection.run_script(_DELETE, keys, args)
        return bool(dropped)

    async def item(self, tenant: str, item_id: str) -> bytes | None:
        keys = [self._items_prefix(tenant) + item_id]
        found: Any = await self._connection.run_script(_ITEM, keys, [])
        return found if isinstance(found, bytes) else None

    def _owner_key(self, claimed: str) -> str:
        return f"{self._prefix}owner:{claimed}"

    async def claim(self, tenant: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        keys = [self._owner_key(i) for i in ids]
        args: list[str | bytes | int] = [tenant, self._ttl_ms]
        await self._connection.run_script(_CLAIM, keys, args)

    async def owners(self, ids: Sequence[str]) -> tuple[str | None, ...]:
        if not ids:
            return ()
        keys = [self._owner_key(i) for i in ids]
        found = await self._connection.mget(keys)
        return tuple(v.decode() if isinstance(v, bytes) else None for v in found)


@asynccontextmanager
async def open_redis(
    config: StateConfig, scripts: Sequence[Script[bytes]] = STORE_SCRIPTS
) -> AsyncIterator[RedisConnection]:
    """A :class:`RedisConnection` running for the ``async with`` block, loading
    ``scripts`` on every connection it makes."""
    async with trio.open_nursery() as nursery:
        connection = RedisConnection(config, scripts)
        await nursery.start(connection.run)
        try:
            yield connection
        finally:
            with trio.CancelScope(shield=True):
                await connection.aclose()
