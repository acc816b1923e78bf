"""``[limits]`` in Redis: the windows and slots every process shares, exactly.

Each decision is one Lua script, so one round trip and no read-then-write race: Redis
runs a script alone. The arithmetic is :mod:`proxai.policy.limits`' (the same tests
hold both to it), on Redis's own clock (``TIME``, in milliseconds), so the processes'
clocks never disagree. Keys (``P`` is ``[state] key_prefix``, ``T`` a tenant):

- ``P lim:T:req``: the sliding log of admitted requests (a sorted set scored by time);
- ``P lim:T:tok`` and ``P lim:T:toksum``: token charges (members ``slot:tokens``,
  scored by time) and their running sum, less what left the window;
- ``P lim:T:slots`` and ``P lim:slots`` (the fleet's): slots scored by the end of their
  lease; an expired one counts for nothing and is dropped by the next decision.

Every key expires by itself once unused (the logs a second after their window, the
slots two leases after their last renewal), so nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from coredis.commands import Script

from ..policy.limits import Decision, Held, KeyRule, KeyUse, Limit, Release, WindowView
from .redis import RedisConnection

__all__ = ["RedisLimiter"]

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local W = 60000
"""
# KEYS: req, tok, toksum, slots, fleet slots
# ARGV: rpm, tpm, streams, fleet (0: none), lease ms, slot id
_ADMIT: Script[bytes] = Script(
    script=_NOW
    + """
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local streams, fleet = tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, slot = tonumber(ARGV[5]), ARGV[6]
local refused, retry = '', 0
local nreq, used, nslots, nfleet = 0, 0, 0, 0
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - W)
  nreq = redis.call('ZCARD', KEYS[1])
  if nreq >= rpm then
    local e = redis.call('ZRANGE', KEYS[1], nreq - rpm, nreq - rpm, 'WITHSCORES')
    refused, retry = 'requests_per_minute', tonumber(e[2]) + W - now
  end
end
if tpm > 0 then
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - W)
  if #gone > 0 then
    local freed = 0
    for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - W)
    redis.call('DECRBY', KEYS[3], freed)
  end
  used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used < 0 then used = 0 end
  if refused == '' and used >= tpm then
    local left = used
    local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    retry = W
    for i = 1, #entries, 2 do
      left = left - tonumber(string.match(entries[i], ':(%d+)$'))
      if left < tpm then retry = tonumber(entries[i + 1]) + W - now; break end
    end
    refused = 'tokens_per_minute'
  end
end
if streams > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  nslots = redis.call('ZCARD', KEYS[4])
  if refused == '' and nslots >= streams then refused, retry = 'max_concurrent_streams', 1000 end
end
if fleet > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  nfleet = redis.call('ZCARD', KEYS[5])
  if refused == '' and nfleet >= fleet then
    refused, retry = 'fleet_max_concurrent_streams', 1000
  end
end
if refused == '' then
  if rpm > 0 then
    redis.call('ZADD', KEYS[1], now, slot)
    redis.call('PEXPIRE', KEYS[1], W + 1000)
    nreq = nreq + 1
  end
  if streams > 0 then
    redis.call('ZADD', KEYS[4], now + lease, slot)
    redis.call('PEXPIRE', KEYS[4], 2 * lease)
    nslots = nslots + 1
  end
  if fleet > 0 then
    redis.call('ZADD', KEYS[5], now + lease, slot)
    redis.call('PEXPIRE', KEYS[5], 2 * lease)
    nfleet = nfleet + 1
  end
end
local req_reset, tok_reset = 0, 0
if nreq > 0 then
  local e = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if e[2] then req_reset = tonumber(e[2]) + W - now end
end
if used > 0 then
  local e = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if e[2] then tok_reset = tonumber(e[2]) + W - now end
end
return {refused, retry, nreq, req_reset, used, tok_reset, nslots, nfleet}
"""
)
# KEYS: fleet slots, then per request its tok, toksum, slots; ARGV: per request its
# slot id, the tokens to charge and how long ago it ended (ms: the charge is dated then)
_FINISH: Script[bytes] = Script(
    script=_NOW
    + """
for i = 0, (#KEYS - 1) / 3 - 1 do
  local tok, toksum, slots = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  local slot, n, age = ARGV[1 + 3 * i], tonumber(ARGV[2 + 3 * i]), tonumber(ARGV[3 + 3 * i])
  redis.call('ZREM', slots, slot)
  redis.call('ZREM', KEYS[1], slot)
  if n > 0 and age < W then
    redis.call('ZADD', tok, now - age, slot .. ':' .. n)
    redis.call('INCRBY', toksum, n)
    redis.call('PEXPIRE', tok, W + 1000)
    redis.call('PEXPIRE', toksum, W + 1000)
  end
end
return 1
"""
)
# KEYS: slot sets; ARGV: lease ms, then the slot id in each (XX: a lapsed slot stays gone)
_RENEW: Script[bytes] = Script(
    script=_NOW
    + """
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], 2 * lease)
end
return 1
"""
)


#: The limiter's scripts, which its connection loads first (with the store's).
LIMITER_SCRIPTS: tuple[Script[bytes], ...] = (_ADMIT, _FINISH, _RENEW)


@attrs.define
class _Seen:
    rule: KeyRule
    decision: Decision


class RedisLimiter:
    """A :class:`~proxai.policy.limits.Limiter` on the Redis backend's connection (the
    one its store is built on: :mod:`proxai.state.backends`)."""

    shared = True

    def __init__(self, connection: RedisConnection, *, lease: float) -> None:
        self._connection = connection
        self._lease_ms = max(1, round(lease * 1000))
        self._prefix = connection.key_prefix + "lim:"
        #: The last decision per key, for the live view (bounded: keys are configured).
        self._seen: dict[str, _Seen] = {}

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}{tenant}:"
        return [base + "req", base + "tok", base + "toksum", base + "slots", self._prefix + "slots"]

    async def admit(self, tenant: str, rule: KeyRule, slot: str, fleet: int) -> Decision:
        args: list[str | bytes | int] = [
            rule.requests_per_minute or 0,
            rule.tokens_per_minute or 0,
            rule.max_concurrent_streams or 0,
            fleet,
            self._lease_ms,
            slot,
        ]
        answer: Any = await self._connection.run_script(_ADMIT, self._keys(tenant), args)
        refused, retry, nreq, req_reset, used, tok_reset, nslots, nfleet = answer
        rpm, tpm = rule.requests_per_minute, rule.tokens_per_minute
        name = refused.decode() if isinstance(refused, bytes) else str(refused)
        decision = Decision(
            Limit(name) if name else None,
            max(0, int(retry)) / 1000,
            WindowView(rpm, max(0, rpm - nreq), nreq, req_reset / 1000) if rpm else None,
            WindowView(tpm, max(0, tpm - used), used, tok_reset / 1000) if tpm else None,
            int(nslots),
            int(nfleet),
        )
        self._seen[tenant] = _Seen(rule, decision)
        return decision

    async def finish(self, tenant: str, rule: KeyRule, slot: str, tokens: int) -> None:
        await self.release([Release(tenant, rule, slot, tokens)])

    async def release(self, releases: Sequence[Release]) -> None:
        if not releases:
            return
        keys = [self._prefix + "slots"]
        args: list[str | bytes | int] = []
        for r in releases:
            keys += self._keys(r.tenant)[1:4]
            charged = r.tokens if r.rule.tokens_per_minute is not None else 0
            args += [r.slot, charged, max(0, round(r.age * 1000))]
        await self._connection.run_script(_FINISH, keys, args)

    async def renew(self, held: Sequence[Held]) -> None:
        if not held:
            return
        keys: list[str] = []
        args: list[str | bytes | int] = [self._lease_ms]
        for tenant, slot, rule in held:
            names = self._keys(tenant)
            if rule.max_concurrent_streams is not None:
                keys.append(names[3])
                args.append(slot)
            keys.append(names[4])  # renewing a slot that is not there adds nothing (XX)
            args.append(slot)
        await self._connection.run_script(_RENEW, keys, args)

    def use(self) -> list[KeyUse]:
        """As of the last decision this process made for each key."""
        uses = []
        for seen in self._seen.values():
            rule, decision = seen.rule, seen.decision
            uses.append(
                KeyUse(
                    rule.label,
                    decision.requests.used if decision.requests else 0,
                    rule.requests_per_minute,
                    decision.tokens.used if decision.tokens else 0,
                    rule.tokens_per_minute,
                    decision.streams,
                    rule.max_concurrent_streams,
                )
            )
        return uses
