"""The upstream client: httpx as proxai uses it (with this package's two transports).

httpx runs natively on trio, so cancelling the task that reads a response
closes that response's connection (an unfinished HTTP/1.1 response can never go
back to the pool). Deadlines other than ``connect`` are not httpx timeouts:
the relay enforces them with trio cancel scopes, so they measure what proxai
means (silence of the upstream), not the gap between two socket reads.
"""

from __future__ import annotations

import math
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs
import httpx

from ..config import TimeoutsConfig, UpstreamConfig
from ..errors import ProxyError
from ..outcome import OutcomeKind
from ..protocols.table import CLIENT_KEY_HEADERS, UPSTREAM_PROTOCOLS
from ..wire.headers import Headers, request_headers_for_upstream
from ..wire.sse import SSEFrame
from .framing import ReceivingBody, UpstreamBody, conflicting_framing, surplus_anomaly
from .h11_transport import H11Pool, H11Transport
from .transport import PoolTransport, SweptPool

__all__ = [
    "ConnectionState",
    "PoolStatistics",
    "Upstream",
    "UpstreamBroken",
    "UpstreamClient",
    "UpstreamReply",
    "UpstreamResponse",
    "UrlCache",
    "closed_before_answer",
    "connect_timeout",
    "connections_to_close",
    "request_invalid",
    "unreachable",
    "upstream_url",
]


#: Connection pools per upstream, and requests in flight each takes before the next
#: one is used (see UpstreamClient.__init__).
POOL_SHARDS = 8
SHARD_REQUESTS = 4

#: Upstream URLs kept ready (see UpstreamClient.url_for), and the longest path and
#: query kept: a longer one (a long query string) is built each time, so the cache
#: holds at most URL_CACHE_ENTRIES * URL_CACHE_TARGET_BYTES bytes of targets.
URL_CACHE_ENTRIES = 1024
URL_CACHE_TARGET_BYTES = 1024


class UpstreamBroken(Exception):
    """The upstream connection failed after the response started (reset, bad framing)."""


class EventTooLarge(Exception):
    """An upstream that sends whole events sent one over ``max_event_bytes``."""


class UpstreamReply(Protocol):
    """What the relay reads of an upstream's answer: an HTTP response
    (:class:`UpstreamResponse`) or one response over an upstream WebSocket
    (:mod:`proxai.upstream.websocket`)."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def method(self) -> str: ...
    @property
    def anomaly(self) -> str | None: ...
    def iter_body(self) -> AsyncIterator[bytes]: ...
    def iter_events(self) -> AsyncIterator[SSEFrame] | None:
        """Its events, each whole as the upstream sent it, when the upstream's messages
        are events (a WebSocket): the relay then frames nothing. ``None``: read
        :meth:`iter_body`, and frame it if it is an event stream."""
        ...


class Upstream(Protocol):
    """What the relay asks of an upstream: its settings, and a request opened on it
    (:class:`UpstreamClient` over HTTP, :class:`~proxai.upstream.websocket.UpstreamSocket`
    over one client socket's upstream WebSocket)."""

    @property
    def config(self) -> UpstreamConfig: ...
    @property
    def name(self) -> str: ...
    @property
    def timeouts(self) -> TimeoutsConfig: ...

    def open(
        self,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> AbstractAsyncContextManager[UpstreamReply]: ...


@attrs.define
class UpstreamResponse:
    """Status and headers of an upstream response, and a way to read its body.

    It holds the transport's body stream, not httpx's ``Response``: a held stream keeps
    this for its life, and the ``Response`` kept a second copy of the headers (httpx's,
    three fields a header) and its own records."""

    status: int
    headers: Headers
    _stream: httpx.AsyncByteStream | httpx.SyncByteStream
    method: str = "POST"  # the request's
    _consumed: bool = False
    _closed: bool = False

    def iter_events(self) -> None:
        """An HTTP body is bytes: the relay frames an event stream."""
        return None

    def iter_body(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive, undecoded; raises :class:`UpstreamBroken`.

        The transport's stream read directly, not through ``Response.aiter_raw`` (a
        generator, a chunker and a byte count per read, once per event): what that
        does and proxai needs, it does here, marking the body read and closing the
        stream at its end, which gives the connection back to the pool."""
        stream = self._stream
        if self._consumed:
            raise httpx.StreamConsumed()
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("an upstream response with a sync stream")
        self._consumed = True
        return _BodyReads(self, stream)

    async def aclose(self) -> None:
        """Close the body stream (once): its connection goes back to the pool when the
        body was read to its end, and is closed otherwise."""
        if not self._closed:
            self._closed = True
            stream = self._stream
            if not isinstance(stream, httpx.AsyncByteStream):
                raise RuntimeError("an upstream response with a sync stream")
            await stream.aclose()

    @property
    def anomaly(self) -> str | None:
        """Once the body is read: what was wrong with its framing, if anything (the
        connection was then closed; see :mod:`proxai.upstream.framing`)."""
        stream = self._stream
        if isinstance(stream, UpstreamBody) and stream.surplus:
            return surplus_anomaly(self.method, self.status, self.headers, stream.surplus)
        return None


class _BodyReads:
    """:meth:`UpstreamResponse.iter_body`'s iterator: an object, not an async generator,
    so that a held stream's read waits one coroutine deep over the lean transport's
    body (:class:`~proxai.upstream.framing.ReceivingBody`), with no generator frames
    (nor trio's registration of each) between the relay and the socket."""

    __slots__ = ("_parts", "_receive", "_response")

    def __init__(self, response: UpstreamResponse, stream: httpx.AsyncByteStream) -> None:
        self._response = response
        self._receive = stream.receive if isinstance(stream, ReceivingBody) else None
        self._parts = None if self._receive is not None else stream.__aiter__()

    def __aiter__(self) -> _BodyReads:
        return self

    async def __anext__(self) -> bytes:
        try:
            if self._receive is not None:
                chunk = await self._receive()
            else:
                assert self._parts is not None
                chunk = b""
                async for chunk in self._parts:
                    if chunk:
                        break
        except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
            raise UpstreamBroken(str(exc) or type(exc).__name__) from exc
        if chunk:
            return chunk
        await self._response.aclose()
        raise StopAsyncIteration


class UrlCache:
    """Upstream URLs by path and query, least recently used first out; only short
    targets are kept, so its size is bounded in entries and in bytes."""

    def __init__(self, build: Callable[[bytes, bytes], httpx.URL]) -> None:
        self._build = build
        self._urls: OrderedDict[tuple[bytes, bytes], httpx.URL] = OrderedDict()
        self.target_bytes = 0  # the paths and queries held

    def __len__(self) -> int:
        return len(self._urls)

    def get(self, raw_path: bytes, query: bytes) -> httpx.URL:
        if len(raw_path) + len(query) > URL_CACHE_TARGET_BYTES:
            return self._build(raw_path, query)
        key = (raw_path, query)
        url = self._urls.get(key)
        if url is not None:
            self._urls.move_to_end(key)
            return url
        url = self._urls[key] = self._build(raw_path, query)
        self.target_bytes += len(raw_path) + len(query)
        if len(self._urls) > URL_CACHE_ENTRIES:
            (old_path, old_query), _ = self._urls.popitem(last=False)
            self.target_bytes -= len(old_path) + len(old_query)
        return url


class PooledConnection(Protocol):
    """What the sweep asks of a connection, in either pool."""

    def is_idle(self) -> bool: ...
    def is_closed(self) -> bool: ...
    def has_expired(self) -> bool: ...


@attrs.frozen
class ConnectionState:
    """What the idle-connection sweep needs to know of one pooled connection."""

    idle: bool  # open, and serving no request
    expired: bool  # idle past its keep-alive expiry, or closed by the upstream


def connections_to_close(
    pools: Sequence[Sequence[ConnectionState]], max_idle: int
) -> list[tuple[int, int]]:
    """The (pool, index) of every idle connection to close now: the expired ones, and
    those past the first ``max_idle`` idle ones, counted in pool order (the light load
    goes to the first pool, and each pool lists its idle connections in the order it
    reuses them: httpcore the first one first, the h11 pool the last released)."""
    closing: list[tuple[int, int]] = []
    kept = 0
    for p, pool in enumerate(pools):
        for i, state in enumerate(pool):
            if not state.idle:
                continue
            if state.expired or kept >= max_idle:
                closing.append((p, i))
            else:
                kept += 1
    return closing


@attrs.frozen
class PoolStatistics:
    """The connections of one upstream's pools: open, idle, and listed (every connection
    object the pools hold, closed or not: a closed one still listed is a leak)."""

    open: int
    idle: int
    listed: int


def _own_headers(upstream: UpstreamConfig) -> list[tuple[bytes, bytes]]:
    """The configured headers, then proxai's key the way this upstream wants it: a
    bearer token, or Anthropic's ``x-api-key``."""
    own = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in upstream.headers.items()]
    key = upstream.resolved_api_key()
    if key:
        own.append(UPSTREAM_PROTOCOLS[upstream.protocol].credential(key))
    return own


def _verify(upstream: UpstreamConfig) -> ssl.SSLContext | bool:
    """TLS verification: on by default, against ``ca_bundle`` when one is set."""
    if not upstream.verify:
        return False
    if upstream.ca_bundle is None:
        return True  # httpx's default: certifi's CA bundle
    return ssl.create_default_context(cafile=upstream.ca_bundle)


def _reason(exc: BaseException) -> str:
    """The first non-empty message down the exception chain (httpx's ConnectError
    for a TLS failure says nothing; the ssl error it wraps says what went wrong)."""
    seen: BaseException | None = exc
    while seen is not None:
        if str(seen):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return ""


def upstream_url(base: httpx.URL, base_path: bytes, raw_path: bytes, query: bytes) -> httpx.URL:
    """The upstream URL of a path and query on proxai: ``/v1/responses`` on proxai maps to
    ``{base_url}/responses`` upstream (the prefix ``base``'s path holds is its protocol's
    ``base_path``).

    The path goes out as the client encoded it (``%2F`` stays ``%2F``): decoding
    and re-encoding could turn an escaped ``?`` or ``/`` into a real one.
    """
    suffix = raw_path[len(base_path) :] if raw_path.startswith(base_path) else raw_path
    target = base.raw_path.rstrip(b"/") + suffix
    if query:
        target += b"?" + query
    return base.copy_with(raw_path=target)


def connect_timeout(seconds: float) -> ProxyError:
    """No connection within ``timeouts.connect``."""
    return ProxyError(
        502,
        f"could not connect to the upstream within {seconds} s",
        "server_error",
        code="upstream_connect_timeout",
        kind=OutcomeKind.UPSTREAM_UNREACHABLE,
    )


def unreachable(exc: BaseException) -> ProxyError:
    """No connection could be made (refused, no such host, TLS failed): ``exc`` says why."""
    return ProxyError(
        502,
        f"could not reach the upstream: {type(exc).__name__}: {_reason(exc)}".rstrip(": "),
        "server_error",
        code="upstream_unreachable",
        kind=OutcomeKind.UPSTREAM_UNREACHABLE,
    )


def request_invalid() -> ProxyError:
    """The request could not be written (h11 refuses a header value, say). The library's
    message quotes the value, which may be a key: say nothing of it."""
    return ProxyError(
        502,
        "proxai could not send the request upstream: a header proxai adds is not "
        "valid HTTP (check this upstream's api_key and headers)",
        "server_error",
        code="upstream_request_invalid",
    )


def closed_before_answer(detail: str, *, reset: bool) -> ProxyError:
    """Connected, then the upstream closed (``reset``: or reset) before it answered."""
    return ProxyError(
        502,
        f"the upstream closed the connection before answering: {detail}".rstrip(": "),
        "server_error",
        code="upstream_reset" if reset else "upstream_closed",
        kind=OutcomeKind.UPSTREAM_RESET if reset else OutcomeKind.UPSTREAM_EOF,
    )


class UpstreamClient:
    """A pooled HTTP client for one upstream base URL, with proxai's credentials."""

    def __init__(
        self,
        upstream: UpstreamConfig,
        timeouts: TimeoutsConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        name: str = "default",
    ) -> None:
        self.config = upstream
        self.name = name
        self.timeouts = timeouts  # [timeouts] with this upstream's overrides
        self._base = httpx.URL(upstream.url)
        #: What proxai's paths start with that the base URL already ends in.
        self._base_path = UPSTREAM_PROTOCOLS[upstream.protocol].base_path
        self._own_headers = _own_headers(upstream)
        self._urls = UrlCache(self._build_url)
        # Requests go straight to httpx's transport (its public low-level API): the
        # client layer's per-request work (redirects, auth, cookies, event hooks,
        # timeout merging) is work a proxy does not want, and about half of the
        # client's CPU per request.
        #
        # httpcore's pool checks every pooled connection (a poll() each) on every
        # request and every close, so its cost grows with the number of connections.
        # Requests go to the first of POOL_SHARDS pools with fewer than SHARD_REQUESTS
        # in flight (the least busy when all are full): a light load keeps reusing the
        # first pool's warm connections, a heavy one spreads so that each request
        # scans only its own pool's few.
        #
        # httpcore closes an expired or surplus idle connection only when a request
        # comes to its pool: close_idle(), which the app runs every half keepalive_expiry
        # (an idle connection closes 1 to 1.5 times keepalive_expiry after its last
        # response), closes them without one, and bounds the idle ones across the pools.
        verify = _verify(upstream)
        self._transports: list[httpx.AsyncBaseTransport] = (
            [transport]
            if transport is not None
            else [self._new_transport(upstream, verify) for _ in range(POOL_SHARDS)]
        )
        self._busy = [0] * len(self._transports)  # requests in flight per pool
        self._timeouts = {"connect": timeouts.connect, "read": None, "write": None, "pool": None}

    async def aclose(self) -> None:
        for transport in self._transports:
            await transport.aclose()

    def _new_transport(
        self, upstream: UpstreamConfig, verify: ssl.SSLContext | bool
    ) -> httpx.AsyncBaseTransport:
        """A plain-http upstream (a local vLLM, llama.cpp) gets the lean h11 transport;
        https keeps httpcore's pool (TLS and its verification)."""
        idle = math.ceil(upstream.max_idle_connections / POOL_SHARDS)
        if self._base.scheme == "http":
            return H11Transport(
                max_keepalive_connections=idle, keepalive_expiry=upstream.keepalive_expiry
            )
        return PoolTransport(
            verify=verify,
            max_keepalive_connections=idle,
            keepalive_expiry=upstream.keepalive_expiry,
        )

    def _pools(self) -> list[SweptPool | H11Pool]:
        # A transport without a pool (a test's in-memory transport) has no connections
        # to sweep.
        return [t.pool for t in self._transports if isinstance(t, PoolTransport | H11Transport)]

    def pool_statistics(self) -> PoolStatistics:
        listed = [c for p in self._pools() for c in p.connections]
        connections = [c for c in listed if not c.is_closed()]
        return PoolStatistics(
            len(connections), sum(1 for c in connections if c.is_idle()), len(listed)
        )

    async def close_idle(self) -> int:
        """Close the expired idle connections and those over ``max_idle_connections``;
        how many were closed.

        Decided at once on a snapshot of every pool, then done pool by pool on the
        connections themselves (not on positions in lists that requests change while
        a close awaits): each pool takes the chosen ones out of its list and closes those
        still idle, since a request may have taken one meanwhile.
        """
        pools = self._pools()
        snapshots: list[Sequence[PooledConnection]] = [p.connections for p in pools]
        states = [[ConnectionState(c.is_idle(), c.has_expired()) for c in s] for s in snapshots]
        chosen: list[list[Any]] = [[] for _ in pools]
        for p, i in connections_to_close(states, self.config.max_idle_connections):
            chosen[p].append(snapshots[p][i])
        closed = 0
        for pool, connections in zip(pools, chosen, strict=True):
            if connections:
                closed += await pool.close_idle(connections)
        return closed

    def url_for(self, raw_path: bytes, query: bytes) -> httpx.URL:
        """The upstream URL of a path and query (see :meth:`_build_url`), cached: a
        proxy sees the same few paths again and again, and httpx's URL parsing is a
        noticeable part of a request's CPU."""
        return self._urls.get(raw_path, query)

    @property
    def url_cache(self) -> UrlCache:
        return self._urls

    def _build_url(self, raw_path: bytes, query: bytes) -> httpx.URL:
        return upstream_url(self._base, self._base_path, raw_path, query)

    def open(
        self,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> AbstractAsyncContextManager[UpstreamResponse]:
        """Send the request on entry; the response once its headers are in; close it on
        exit.

        Raises :class:`ProxyError` (502) when no connection can be made, or when the
        response's framing is contradictory (:mod:`proxai.upstream.framing`).
        """
        return _Opening(self, method, raw_path, query, client_headers, body)

    def _take_shard(self) -> int:
        """The pool a request goes to (see :meth:`__init__`), counted busy until
        :meth:`_free_shard`."""
        busy = self._busy
        shard = next((i for i, n in enumerate(busy) if n < SHARD_REQUESTS), None)
        if shard is None:
            shard = busy.index(min(busy))
        busy[shard] += 1
        return shard

    def _free_shard(self, shard: int) -> None:
        self._busy[shard] -= 1

    async def _open(
        self,
        shard: int,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> httpx.Response:
        """The response of a request sent through pool ``shard``, its framing checked."""
        response = await self._send(shard, method, raw_path, query, client_headers, body)
        if conflicting_framing(response.headers.raw):
            # Closed unread: its connection goes too.
            await response.aclose()
            raise ProxyError(
                502,
                "the upstream sent both Content-Length and Transfer-Encoding, which "
                "HTTP forbids (RFC 9112, section 6.3): its body cannot be relayed",
                "server_error",
                code="upstream_invalid_response",
                kind=OutcomeKind.PROXY_ERROR,
            )
        return response

    async def _send(
        self,
        shard: int,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> httpx.Response:
        """Send the request through pool ``shard``; the response once its headers are in."""
        headers = request_headers_for_upstream(
            client_headers, self._own_headers, credentials=CLIENT_KEY_HEADERS
        )
        request = httpx.Request(
            method,
            self.url_for(raw_path, query),
            headers=headers,
            content=body,
            extensions={"timeout": self._timeouts},
        )
        try:
            response = await self._transports[shard].handle_async_request(request)
        except httpx.ConnectTimeout:
            raise connect_timeout(self.timeouts.connect) from None
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
            raise unreachable(exc) from None
        except httpx.LocalProtocolError:
            raise request_invalid() from None
        except httpx.TransportError as exc:
            # Connected, then the upstream closed or reset before its response headers.
            reset = isinstance(exc, httpx.ReadError | httpx.WriteError)
            raise closed_before_answer(str(exc), reset=reset) from None
        return response


class _Opening:
    """:meth:`UpstreamClient.open`'s context: an object with slots, not a generator's (a
    held stream keeps it as long as its response), that lets go of the request's
    arguments (its body) once they are sent."""

    __slots__ = ("_args", "_client", "_response", "_shard")

    def __init__(
        self,
        client: UpstreamClient,
        method: str,
        raw_path: bytes,
        query: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        self._client = client
        self._args: tuple[str, bytes, bytes, Iterable[tuple[bytes, bytes]], bytes] | None = (
            method,
            raw_path,
            query,
            client_headers,
            body,
        )
        self._shard: int | None = None
        self._response: UpstreamResponse | None = None

    async def __aenter__(self) -> UpstreamResponse:
        args, self._args = self._args, None
        assert args is not None, "an upstream request is opened once"
        self._shard = self._client._take_shard()
        try:
            response = await self._client._open(self._shard, *args)
        except BaseException:
            self._free()
            raise
        self._response = UpstreamResponse(
            response.status_code, list(response.headers.raw), response.stream, args[0]
        )
        return self._response

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            if self._response is not None:
                await self._response.aclose()
        finally:
            self._free()

    def _free(self) -> None:
        if self._shard is not None:
            self._client._free_shard(self._shard)
            self._shard = None
