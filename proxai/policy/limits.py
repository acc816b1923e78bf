"""Per-client-key limits, as pure decisions fed the time (``[limits]``).

Each key has up to three limits, and the fleet one more:

- **requests per minute**, a sliding log: a request is admitted while fewer than the
  limit were admitted in the last 60 s (the window ``(now - 60, now]``), so no 60 s
  window, wherever it starts, ever holds more (a fixed minute lets twice through at
  its edge). A refused request is not logged. ``Retry-After`` is when the oldest
  logged request leaves the window: the next request would pass then;
- **tokens per minute**, charged when a response's usage is known, at that time: a
  request is admitted while the tokens charged in the last 60 s are under the limit
  (its own tokens are not known yet), and refused until enough of them leave;
- **streams at once**, per key and for the fleet: a slot from admission to the end of
  the response, with a lease (``[limits] slot_lease``) its process renews while the
  response runs, so a process that dies frees its slots when their leases pass. A
  release the backend did not answer is kept (:class:`PendingReleases`) and sent again
  until it does, so a backend away for a moment does not keep slots for a lease.

:class:`Limiter` is what the request path asks of a backend (one call per decision: one
round trip on admission, one at the end, and a batched lease renewal now and then).
:class:`LimitsState` is the in-process arithmetic, :class:`MemoryLimiter` it as a
:class:`Limiter`; the Redis one runs the same arithmetic in one Lua script per decision
(:mod:`proxai.state.redis_limits`), and each ``[state]`` backend's row
(:mod:`proxai.state.backends`) builds its limiter on its own connection. All answer a
:class:`Decision`, which :func:`ratelimit_headers` turns into OpenAI's
``x-ratelimit-*`` headers. Keys are known by their digest (:func:`proxai.policy.auth.tenant_of`),
and named in metrics by their configured ``name`` or a digest prefix: never the key.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from ..config import ConfigError, KeyLimitsConfig, LimitsConfig
from .auth import HASH_PREFIX, UNAUTHENTICATED_TENANT, ClientKeys, entry_digest

__all__ = [
    "WINDOW",
    "Decision",
    "Held",
    "KeyRule",
    "KeyUse",
    "Limit",
    "LimitRules",
    "Limiter",
    "LimitsState",
    "MemoryLimiter",
    "PendingReleases",
    "Release",
    "WindowView",
    "estimated_tokens",
    "ratelimit_headers",
    "reset_text",
    "retry_after_headers",
]

#: The window of the per-minute limits, in seconds.
WINDOW = 60.0
#: Seconds a refusal by concurrency says to wait (a slot frees when a response ends).
STREAMS_RETRY = 1.0
#: Hex digits of a key's digest that name it where it has no ``name``.
LABEL_DIGITS = 12
#: Seconds between two tries of the releases the backend did not answer (at most: a
#: third of ``slot_lease`` when that is shorter).
RELEASE_RETRY = 1.0
#: Releases kept for a backend that does not answer, at most: past it the oldest are
#: dropped (their leases free their slots).
MAX_PENDING_RELEASES = 10_000
#: Releases sent in one call, at most (the rest go in the next).
RELEASE_BATCH = 500


class Limit(enum.StrEnum):
    """Which limit refused a request (the outcome record's ``limited``, the metric's
    ``limit`` label)."""

    REQUESTS = "requests_per_minute"
    TOKENS = "tokens_per_minute"
    STREAMS = "max_concurrent_streams"  # the key's
    FLEET_STREAMS = "fleet_max_concurrent_streams"  # [limits] fleet_max_concurrent_streams


@attrs.frozen
class KeyRule:
    """The limits of one key (``None``: none of that kind)."""

    label: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_streams: int | None = None

    @classmethod
    def of(cls, entry: KeyLimitsConfig, label: str) -> KeyRule:
        return cls(
            entry.name or label,
            entry.requests_per_minute,
            entry.tokens_per_minute,
            entry.max_concurrent_streams,
        )


def label_of(tenant: str) -> str:
    """A key's name where it has none configured: a prefix of its digest."""
    if tenant == UNAUTHENTICATED_TENANT:
        return tenant
    return HASH_PREFIX + tenant[:LABEL_DIGITS]


class LimitRules:
    """Which limits apply to which key: its own entry, else the ``"*"`` entry's."""

    def __init__(
        self,
        by_tenant: Mapping[str, KeyRule],
        default: KeyLimitsConfig | None,
        fleet_streams: int,
    ) -> None:
        self._by_tenant = dict(by_tenant)
        self._default = default
        self._defaults: dict[str, KeyRule] = {}  # by tenant, made on first use
        self.fleet_streams = fleet_streams

    @classmethod
    def from_config(cls, limits: LimitsConfig, keys: ClientKeys | None) -> LimitRules | None:
        """The rules of ``[limits]`` (``None``: no limit configured); raises ConfigError
        for an entry whose key is not one of ``[auth]``'s."""
        if not limits.enabled:
            return None
        problems = limits_problems(limits, keys)
        if problems:
            raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
        by_tenant: dict[str, KeyRule] = {}
        default = None
        for entry in limits.keys:
            if entry.key == "*":
                default = entry
                continue
            tenant = entry_digest(entry.key).hex()
            by_tenant[tenant] = KeyRule.of(entry, label_of(tenant))
        return cls(by_tenant, default, limits.fleet_max_concurrent_streams)

    def rule_for(self, tenant: str) -> KeyRule | None:
        """The limits of ``tenant`` (``None``: none, and no fleet limit either)."""
        rule = self._by_tenant.get(tenant)
        if rule is not None:
            return rule
        if self._default is not None:
            rule = self._defaults.get(tenant)
            if rule is None:
                # Bounded: a tenant is an accepted key's digest (or the public one).
                rule = self._defaults[tenant] = KeyRule.of(self._default, label_of(tenant))
                if self._default.name:  # one name for many keys: tell them apart
                    rule = self._defaults[tenant] = attrs.evolve(
                        rule, label=f"{self._default.name}:{label_of(tenant)}"
                    )
            return rule
        if self.fleet_streams:
            return KeyRule(label_of(tenant))
        return None


def limits_problems(limits: LimitsConfig, keys: ClientKeys | None) -> list[str]:
    """What is wrong with ``[[limits.keys]]``: a key named twice, a digest that is not
    one, a key ``[auth]`` does not accept (never quoting a key)."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(limits.keys):
        where = f"limits.keys[{i}].key"
        if entry.key == "*":
            identity = "*"
        else:
            try:
                digest = entry_digest(entry.key)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
            identity = digest.hex()
            if keys is None:
                problems.append(f'{where}: names a client key, but [auth] has none; use "*"')
            elif not keys.has_digest(digest):
                problems.append(f"{where}: not a key of [auth] (auth.keys, auth.keys_file)")
        if identity in seen:
            problems.append(f"{where}: the same key as limits.keys[{seen[identity]}]")
        seen.setdefault(identity, i)
    return problems


# -- what a decision answers -----------------------------------------------------------


@attrs.frozen
class WindowView:
    """One per-minute limit as the ``x-ratelimit-*`` headers say it."""

    limit: int
    remaining: int
    #: What the window holds (requests, or tokens: may pass the limit).
    used: int
    #: Seconds until the oldest entry of the window leaves it (the remaining count next
    #: grows); 0 for an empty window.
    reset: float


@attrs.frozen
class Decision:
    """An admission's answer."""

    refused: Limit | None = None
    #: Seconds until a request like this one would pass (0 when admitted).
    retry_after: float = 0.0
    requests: WindowView | None = None
    tokens: WindowView | None = None
    #: The key's slots in use, and the fleet's, after the decision (live view).
    streams: int = 0
    fleet_streams: int = 0

    @property
    def admitted(self) -> bool:
        return self.refused is None


@attrs.frozen
class KeyUse:
    """A key's use now, for the live view."""

    key: str
    requests: int
    requests_per_minute: int | None
    tokens: int
    tokens_per_minute: int | None
    streams: int
    max_concurrent_streams: int | None


def reset_text(seconds: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*`` (Go's format): ``"0s"``,
    ``"12ms"``, ``"1.5s"``, ``"6m0s"``."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    minutes, ms = divmod(ms, 60_000)
    text = f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes}m{text}" if minutes else text


def retry_after_headers(seconds: float) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` in whole seconds (rounded up, at least 1), and ``retry-after-ms``,
    which the openai SDKs read first."""
    ms = max(1, math.ceil(seconds * 1000 - 1e-6))
    return [
        (b"retry-after", str(max(1, math.ceil(ms / 1000))).encode()),
        (b"retry-after-ms", str(ms).encode()),
    ]


def ratelimit_headers(decision: Decision) -> list[tuple[bytes, bytes]]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the limits
    the key has."""
    headers: list[tuple[bytes, bytes]] = []
    for kind, view in (("requests", decision.requests), ("tokens", decision.tokens)):
        if view is not None:
            headers += [
                (f"x-ratelimit-limit-{kind}".encode(), str(view.limit).encode()),
                (f"x-ratelimit-remaining-{kind}".encode(), str(view.remaining).encode()),
                (f"x-ratelimit-reset-{kind}".encode(), reset_text(view.reset).encode()),
            ]
    return headers


# -- tokens ----------------------------------------------------------------------------

#: Bytes of a request body taken for one token when a response reports no usage.
BYTES_PER_TOKEN = 4


def estimated_tokens(request_bytes: int, events: int, response_bytes: int) -> int:
    """The tokens of a response cut before its usage: its request body at
    :data:`BYTES_PER_TOKEN` bytes a token, plus one token per event relayed (a delta
    carries about one), or, for a body that was not a stream, its bytes at the same rate."""
    output = events if events else math.ceil(response_bytes / BYTES_PER_TOKEN)
    return math.ceil(request_bytes / BYTES_PER_TOKEN) + output


# -- the in-process backend ------------------------------------------------------------


@attrs.define
class _KeyState:
    requests: deque[float] = attrs.field(factory=deque)
    charges: deque[tuple[float, int]] = attrs.field(factory=deque)
    charged: int = 0
    #: slot id -> when its lease ends
    slots: dict[str, float] = attrs.field(factory=dict)
    rule: KeyRule | None = None


def _expire_slots(slots: dict[str, float], now: float) -> None:
    for slot, until in list(slots.items()):
        if until <= now:
            del slots[slot]


class LimitsState:
    """The windows and slots of every key in this process (see the module's docstring);
    every call is given the time (seconds, any monotonic clock)."""

    def __init__(self, *, lease: float) -> None:
        self.lease = lease
        self._keys: dict[str, _KeyState] = {}
        self._fleet: dict[str, float] = {}

    def _expire(self, key: _KeyState, now: float) -> None:
        start = now - WINDOW
        while key.requests and key.requests[0] <= start:
            key.requests.popleft()
        while key.charges and key.charges[0][0] <= start:
            key.charged -= key.charges.popleft()[1]
        _expire_slots(key.slots, now)
        _expire_slots(self._fleet, now)

    def admit(self, tenant: str, rule: KeyRule, slot: str, fleet: int, now: float) -> Decision:
        """Admit a request of ``tenant`` (``slot``: its unique id) or say which limit
        refuses it; ``fleet`` is ``[limits] fleet_max_concurrent_streams`` (0: none)."""
        key = self._keys.get(tenant)
        if key is None:
            key = self._keys[tenant] = _KeyState()
        key.rule = rule
        self._expire(key, now)
        rpm, tpm, streams = (
            rule.requests_per_minute,
            rule.tokens_per_minute,
            rule.max_concurrent_streams,
        )
        refused: Limit | None = None
        retry = 0.0
        if rpm is not None and len(key.requests) >= rpm:
            refused, retry = Limit.REQUESTS, key.requests[len(key.requests) - rpm] + WINDOW - now
        elif tpm is not None and key.charged >= tpm:
            refused, retry = Limit.TOKENS, self._tokens_free_at(key, tpm) - now
        elif streams is not None and len(key.slots) >= streams:
            refused, retry = Limit.STREAMS, STREAMS_RETRY
        elif fleet and len(self._fleet) >= fleet:
            refused, retry = Limit.FLEET_STREAMS, STREAMS_RETRY
        if refused is None:
            if rpm is not None:
                key.requests.append(now)
            if streams is not None or fleet:
                key.slots[slot] = now + self.lease
                if fleet:
                    self._fleet[slot] = now + self.lease
        return Decision(
            refused,
            max(retry, 0.0),
            self._requests_view(key, rpm, now),
            self._tokens_view(key, tpm, now),
            len(key.slots),
            len(self._fleet),
        )

    @staticmethod
    def _tokens_free_at(key: _KeyState, tpm: int) -> float:
        """When enough charges have left the window for the tokens to be under ``tpm``."""
        left = key.charged
        for at, tokens in key.charges:
            left -= tokens
            if left < tpm:
                return at + WINDOW
        return key.charges[-1][0] + WINDOW if key.charges else 0.0

    @staticmethod
    def _requests_view(key: _KeyState, rpm: int | None, now: float) -> WindowView | None:
        if rpm is None:
            return None
        reset = key.requests[0] + WINDOW - now if key.requests else 0.0
        return WindowView(rpm, max(0, rpm - len(key.requests)), len(key.requests), reset)

    @staticmethod
    def _tokens_view(key: _KeyState, tpm: int | None, now: float) -> WindowView | None:
        if tpm is None:
            return None
        reset = key.charges[0][0] + WINDOW - now if key.charges else 0.0
        return WindowView(tpm, max(0, tpm - key.charged), key.charged, reset)

    def finish(
        self, tenant: str, rule: KeyRule, slot: str, tokens: int, now: float, age: float = 0.0
    ) -> None:
        """A request ended ``age`` seconds ago: free its slots and charge its tokens
        then (a charge older than the window is not made)."""
        self._fleet.pop(slot, None)
        key = self._keys.get(tenant)
        charge = tokens > 0 and rule.tokens_per_minute is not None and age < WINDOW
        if key is None:
            if not charge:
                return
            key = self._keys[tenant] = _KeyState(rule=rule)
        key.slots.pop(slot, None)
        if charge:
            at = now - max(age, 0.0)
            if key.charges and key.charges[-1][0] > at:  # late: in its place, by time
                key.charges.insert(bisect.bisect(key.charges, (at, tokens)), (at, tokens))
            else:
                key.charges.append((at, tokens))
            key.charged += tokens
        self._expire(key, now)
        if not key.requests and not key.charges and not key.slots:
            del self._keys[tenant]  # nothing to remember: a key's state lives while it is used

    def renew(self, held: Iterable[tuple[str, str]], now: float) -> None:
        """Extend the leases of the slots ``(tenant, slot)`` this process still holds."""
        until = now + self.lease
        for tenant, slot in held:
            key = self._keys.get(tenant)
            if key is not None and slot in key.slots:
                key.slots[slot] = until
            if slot in self._fleet:
                self._fleet[slot] = until

    def use(self, now: float) -> list[KeyUse]:
        """Every key's use now (the live view)."""
        uses = []
        for key in self._keys.values():
            self._expire(key, now)
            rule = key.rule
            assert rule is not None
            uses.append(
                KeyUse(
                    rule.label,
                    len(key.requests),
                    rule.requests_per_minute,
                    key.charged,
                    rule.tokens_per_minute,
                    len(key.slots),
                    rule.max_concurrent_streams,
                )
            )
        return uses

    @property
    def fleet_streams(self) -> int:
        return len(self._fleet)


# -- releases the backend did not take -------------------------------------------------


@attrs.frozen
class Release:
    """A slot to free, and the tokens to charge, as a request's end left them."""

    tenant: str
    rule: KeyRule
    slot: str
    tokens: int = 0
    #: Seconds since the request ended, when sent: a late charge is dated then.
    age: float = 0.0


@attrs.define
class _Pending:
    release: Release
    ended: float
    #: Answered sends still needed before it is dropped.
    rounds: int


class PendingReleases:
    """Releases the backend did not answer, sent again until it does (fed the time).

    Either kind of call cut off by ``[state] timeout`` (or a cancellation) may or may
    not have run, and may still run: Redis runs what a frozen server had queued when
    it wakes. A release that did not run leaves its slot taken; an admission that runs
    late takes a slot for a request that was served without one. No renewal touches
    either, so each kept its slot for a whole lease, and the fleet looked full for
    that long after a blip. Each is kept here and sent again until the backend answers;
    an admission's twice, as its own late script may run after the first release (on
    another connection). Bounded: past :data:`MAX_PENDING_RELEASES` the oldest go.
    """

    def __init__(self, *, limit: int = MAX_PENDING_RELEASES) -> None:
        self._limit = limit
        self._by_slot: dict[str, _Pending] = {}

    def __len__(self) -> int:
        return len(self._by_slot)

    def add(self, release: Release, now: float, *, rounds: int = 1) -> None:
        """``release`` was not answered (``now``: when its request ended)."""
        self._by_slot.pop(release.slot, None)
        self._by_slot[release.slot] = _Pending(release, now, rounds)
        while len(self._by_slot) > self._limit:
            del self._by_slot[next(iter(self._by_slot))]

    def due(self, now: float) -> list[list[Release]]:
        """Every pending release, oldest first, each with its age, in batches of at most
        :data:`RELEASE_BATCH` (one call each); a charge older than the window has
        nothing left to charge."""
        out: list[Release] = []
        for pending in self._by_slot.values():
            age = now - pending.ended
            release = pending.release
            tokens = release.tokens if age < WINDOW else 0
            out.append(attrs.evolve(release, tokens=tokens, age=age))
        return [out[i : i + RELEASE_BATCH] for i in range(0, len(out), RELEASE_BATCH)]

    def answered(self, releases: Iterable[Release]) -> None:
        """The backend took ``releases``: each has one round fewer to go (its tokens
        are charged: the next send charges none)."""
        for release in releases:
            pending = self._by_slot.get(release.slot)
            if pending is None:
                continue
            pending.rounds -= 1
            if pending.rounds <= 0:
                del self._by_slot[release.slot]
            else:
                pending.release = attrs.evolve(pending.release, tokens=0)


# -- what the request path asks of a backend ---------------------------------------------

#: A slot this process holds: (tenant, slot id, the tenant's rule).
Held = tuple[str, str, KeyRule]


class Limiter(Protocol):
    """Admission and release for ``[limits]``, on a ``[state]`` backend. Every async
    method may raise :class:`~proxai.state.store.StateUnavailable` (never after more
    than ``[state] timeout``)."""

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
    """:class:`LimitsState` as a :class:`Limiter` (the memory backend's, per process);
    ``clock`` is monotonic seconds."""

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
