"""The ASGI application: lifespan, what proxai answers itself, and each proxied request.

It first checks the method, ``Host`` and ``Origin`` (:mod:`proxai.policy.browser`:
web pages stay out unless allowed, ``OPTIONS`` is answered here); it answers
health, metrics and the live view itself; admits each other request
(:mod:`proxai.service.gate` and the checks below: nothing is read or sent
upstream for a refused one), reads and checks its body against its API's
projection (:mod:`proxai.protocols.table`), routes it, and hands an
:class:`~proxai.relay.exchange.Exchange` to a :class:`~proxai.relay.relay.Relay`.
The upstream clients live from lifespan startup to lifespan shutdown. ASGI's
message shapes are known here and in :mod:`proxai.service.asgi_io` only.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import attrs
import orjson
import trio

from ..config import Config, UpstreamKind
from ..errors import ProxyError
from ..ops.capture import Capture, Captures
from ..ops.masking import SecretMask
from ..ops.metrics import CONTENT_TYPE_LATEST, Metrics
from ..ops.request_log import RequestLog
from ..outcome import Outcome, OutcomeKind
from ..policy.auth import ClientKeys
from ..policy.browser import BrowserPolicy, BrowserRequest, Verdict, is_loopback
from ..policy.normalize import normalize_body
from ..policy.retry import RetryBudget, RetryPlan
from ..policy.routes import Route, Router
from ..protocols.names import WireApi
from ..protocols.table import (
    API_BY_WIRE,
    UPSTREAM_PROTOCOLS,
    Api,
    ClientSdk,
    api_for,
    upstream_kind_for,
)
from ..protocols.tracking import StreamLimits
from ..relay.exchange import Exchange, ObserverFactory, ProxiedRequest, UpstreamTarget, pass_through
from ..relay.relay import Relay
from ..relay.writer import send_error
from ..translate.carriers import carries_proxai_reasoning, strip_proxai_reasoning
from ..translate.pairs import translate, upstream_api
from ..translate.requests import estimate_input_tokens
from ..upstream.client import UpstreamClient
from ..wire.headers import Headers
from ..wire.json_body import dumps_kept, load_json_object
from ..wire.query import query_for_upstream
from .asgi_io import AsgiDownstream, ASGIReceive, ASGISend, read_body, send_plain
from .background import Failures
from .gate import Gate
from .live_view import PREFIX, LiveView

__all__ = ["REQUEST_ID_HEADER", "OutcomeHook", "ProxaiApp", "UpstreamFactory"]

#: Anthropic's token counting endpoint: answered by proxai when no Anthropic upstream serves.
COUNT_TOKENS = "/v1/messages/count_tokens"
#: proxai's id of a request: returned to the client, sent upstream, in every record.
REQUEST_ID_HEADER = b"x-proxai-request-id"

#: What proxai answers whatever the Host or Origin: they hold nothing and spend nothing,
#: and a probe must not fail for a header.
HEALTH_PATHS = ("/healthz", "/readyz")

OutcomeHook = Callable[[Outcome], None]
#: Builds the client of one upstream: ``factory(upstream, timeouts, name=name)``.
UpstreamFactory = Callable[..., UpstreamClient]


@attrs.frozen
class Incoming:
    """A client's request as proxai first sees it, before its body."""

    method: str
    path: str  # decoded
    raw_path: bytes  # as the client encoded it
    #: The path an upstream would see after normalizing it ("/v1//responses/" is
    #: /v1/responses): routes match it, so no spelling skips the observers.
    route_path: str
    query: bytes
    #: The client's headers minus its own x-proxai-request-id, plus proxai's.
    headers: Headers
    request_id: str
    #: The kind of upstream it goes to.
    kind: UpstreamKind
    #: The API whose stream or body it gets (``None``: relayed without an observer).
    api: Api | None
    #: The SDKs of its client: the error shape proxai answers in, where keys come.
    sdk: ClientSdk
    http2: bool

    def native(self, kind: UpstreamKind) -> bool:
        """An upstream of ``kind`` takes this request as it is."""
        if self.api is None:
            return UPSTREAM_PROTOCOLS[kind].sdk is self.sdk
        return self.api.wire in UPSTREAM_PROTOCOLS[kind].apis

    def serves(self, kind: UpstreamKind) -> bool:
        """An upstream of ``kind`` can take this request, translated if need be (only a
        generation ``POST`` is; a resumed stream or another path is not)."""
        if self.method == "POST" and self.route_path == COUNT_TOKENS:
            # Answered by proxai for an upstream that has no such endpoint.
            return upstream_api(kind, WireApi.MESSAGES) is not None
        if self.api is None or self.method != "POST":
            return self.native(kind)
        return upstream_api(kind, self.api.wire) is not None

    @property
    def missing(self) -> str:
        """The 404's message when no upstream can take it."""
        return UPSTREAM_PROTOCOLS[self.kind].missing

    @property
    def id_header(self) -> list[tuple[bytes, bytes]]:
        return [(REQUEST_ID_HEADER, self.request_id.encode())]


@attrs.frozen
class _Prepared:
    """What the body of a request says about how to route and observe it."""

    data: dict[str, Any] | None  # the parsed body, when it is a JSON object
    model: str | None
    observer_factory: ObserverFactory
    streaming: bool  # whether first_byte applies


class ProxaiApp:
    """ASGI 3 application; ``on_outcome`` is called with every request's outcome."""

    def __init__(
        self,
        config: Config,
        *,
        on_outcome: OutcomeHook | None = None,
        upstream_factory: UpstreamFactory = UpstreamClient,
    ) -> None:
        self.config = config
        self._router = Router(config)
        self._keys = ClientKeys.from_config(config.auth)
        self._browser = BrowserPolicy(
            allowed_origins=config.server.allowed_origins,
            allowed_hosts=config.server.allowed_hosts,
            bound_to_loopback=is_loopback(config.server.host),
        )
        self._clients: dict[str, UpstreamClient] = {}
        #: Started once and shut down since: /healthz says "stopped", not "starting".
        self._stopped = False
        self._upstream_factory = upstream_factory
        self._on_outcome = on_outcome
        self._relays: set[Relay] = set()
        #: The idle-connection sweep's scope: it ends before the pools close.
        self._sweeping = trio.CancelScope()
        self._gate = Gate(
            config.server, lambda: self._relays, RetryBudget.from_config(config.retries)
        )
        #: What one stream may hold (a translated one ends past max_event_bytes held).
        self._limits = StreamLimits(
            max_open_items=config.server.max_open_items, max_kept=config.server.max_event_bytes
        )
        mask = SecretMask.from_config(config)
        self._request_log = RequestLog(config.logging, mask)
        metrics = config.metrics
        self._metrics = (
            Metrics.from_config(metrics, self._router.exact_models) if metrics.enabled else None
        )
        self._captures = Captures(config.capture, mask) if config.capture.enabled else None
        self._live_view = LiveView(
            config.live_view,
            self._keys,
            streams=lambda: [relay.snapshot() for relay in self._relays],
            draining=lambda: self._gate.draining,
        )

    @property
    def in_flight(self) -> int:
        return self._gate.in_flight

    @property
    def serving(self) -> bool:
        """Started, and its upstream clients open (until the lifespan ends, however it
        ends): what ``/healthz`` reports. Draining still serves."""
        return bool(self._clients)

    @property
    def ready(self) -> bool:
        """Serving and not draining: what ``/readyz`` reports."""
        return self.serving and not self._gate.draining

    async def startup(self) -> None:
        """Open a connection pool per upstream (lifespan startup)."""
        self._clients = {
            name: self._upstream_factory(upstream, self.config.timeouts_for(name), name=name)
            for name, upstream in self.config.all_upstreams()
        }

    async def shutdown(self) -> None:
        """Close the upstream connection pools (lifespan shutdown)."""
        self._sweeping.cancel()
        if self._clients:
            self._stopped = True
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    def begin_drain(self) -> None:
        """Stop taking requests (``/readyz`` turns 503; new ones get 503); the
        lifespan task then runs :meth:`drain`."""
        self._gate.begin_drain()

    async def drain(self) -> None:
        """See :meth:`proxai.service.gate.Gate.drain`."""
        await self._gate.drain()

    def hurry(self) -> None:
        """End the drain now (a second SIGINT/SIGTERM): open streams get their error."""
        self._gate.hurry()

    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan ------------------------------------------------------------------------

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._drain_when_asked)
                nursery.start_soon(self._close_idle_connections)
                await self._lifespan_messages(receive, send)
                nursery.cancel_scope.cancel()
        finally:
            # A server cancelled without a graceful shutdown still closes the pools:
            # their sockets must not wait for the garbage collector.
            with trio.CancelScope(shield=True):
                await self.shutdown()

    async def _close_idle_connections(self) -> None:
        """Close idle upstream connections once they expire, with or without traffic,
        as nginx's ``keepalive_timeout`` does: httpcore only looks at a pool's idle
        connections when a request comes to it, so a burst would otherwise leave its
        connections open for good. A failed sweep is reported and the next one runs
        (:mod:`proxai.service.background`): it must never end the lifespan."""
        upstreams = self.config.all_upstreams()
        interval = min((u.keepalive_expiry for _, u in upstreams), default=math.inf) / 2
        failures = Failures("idle_sweep", self._count_failure)
        with self._sweeping:
            while True:
                await trio.sleep(interval)
                for client in list(self._clients.values()):
                    with failures.contain():
                        await client.close_idle()
                with failures.contain():
                    self._count_pools()

    async def _drain_when_asked(self) -> None:
        """Drain once asked to. Should the drain fail, the streams still open are left to
        hypercorn's graceful timeout; the lifespan, and with it the pools, goes on."""
        await self._gate.wait_for_drain_request()
        with Failures("drain", self._count_failure).contain():
            await self._gate.drain()

    def _count_pools(self) -> None:
        if self._metrics is not None:
            for name, client in self._clients.items():
                stats = client.pool_statistics()
                self._metrics.pools(name, stats.open, stats.idle, stats.listed)

    def _count_failure(self, task: str) -> None:
        if self._metrics is not None:
            self._metrics.background_failures.labels(task).inc()

    async def _lifespan_messages(self, receive: ASGIReceive, send: ASGISend) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # reported to the server, which stops
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- requests ------------------------------------------------------------------------

    async def _http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        verdict = self._verdict(scope)
        downstream = AsgiDownstream(send, receive, verdict.response_headers)
        if verdict.refusal is None and await self._answer_locally(scope, verdict, downstream):
            return
        incoming = self._incoming(scope)
        outcome = Outcome(method, path, request_id=incoming.request_id)
        admitted = False
        capture: Capture | None = None
        try:
            self._admit(incoming, verdict)
            self._gate.enter()
            admitted = True
            # Refused requests are not captured: a flood of them must not push out the rest.
            capture = self._captures.start() if self._captures is not None else None
            if self._metrics is not None:
                self._metrics.in_flight.inc()
            if capture is not None:
                capture.request_head(method, incoming.raw_path, incoming.query, incoming.headers)
            await self._proxy(incoming, downstream, receive, outcome, capture)
        except ProxyError as exc:
            body = await send_error(downstream, exc, incoming.sdk.error_shape, incoming.id_header)
            if capture is not None:
                capture.client.add(body)
            outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
            outcome.status = exc.status
            outcome.detail = exc.message
        except Exception as exc:
            outcome.kind = outcome.kind or OutcomeKind.PROXY_ERROR
            outcome.detail = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            if admitted:
                self._gate.leave()
                if self._metrics is not None:
                    self._metrics.in_flight.dec()
            # Every request leaves a record, even one a bug or a shutdown cut short.
            self._report(outcome)
            if capture is not None and self._captures is not None:
                with trio.move_on_after(5, shield=True):
                    await self._captures.save(capture, outcome)

    def _verdict(self, scope: dict[str, Any]) -> Verdict:
        """The method, Host and Origin checks (:mod:`proxai.policy.browser`)."""
        server = scope.get("server")
        request = BrowserRequest(
            scope["method"], scope["headers"], str(server[0]) if server else None
        )
        return self._browser.check(request, exempt=scope["path"] in HEALTH_PATHS)

    async def _answer_locally(
        self, scope: dict[str, Any], verdict: Verdict, downstream: AsgiDownstream
    ) -> bool:
        """Answer what proxai serves itself (OPTIONS, health, ``/``, metrics, the live view);
        whether it did. Refusals, like proxied requests, leave a record: not these."""
        method: str = scope["method"]
        path: str = scope["path"]
        if verdict.options_answer is not None:
            await downstream.send_head(204, list(verdict.options_answer))
            await downstream.send_body(b"", more=False)
        elif path in HEALTH_PATHS and method in ("GET", "HEAD"):
            await self._health(path, method, downstream)
        elif path == "/" and method in ("GET", "HEAD"):
            # Clients probe the base URL before they start (Claude Code sends HEAD /).
            body = b'{"service":"proxai","api":"/v1"}'
            await send_plain(downstream, 200, b"application/json", body, with_body=method == "GET")
        elif self._metrics is not None and path == self.config.metrics.path and method == "GET":
            self._count_pools()
            body = self._metrics.exposition()
            await send_plain(downstream, 200, CONTENT_TYPE_LATEST.encode(), body)
        elif self.config.live_view.enabled and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self._live_view.handle(scope, downstream)
        else:
            return False
        return True

    def _incoming(self, scope: dict[str, Any]) -> Incoming:
        method: str = scope["method"]
        path: str = scope["path"]
        request_id = "req_" + secrets.token_hex(12)
        # The client's own x-proxai-request-id is replaced: ids are proxai's.
        headers: Headers = [(n, v) for n, v in scope["headers"] if n != REQUEST_ID_HEADER]
        headers.append((REQUEST_ID_HEADER, request_id.encode()))
        # Before any "#", so that a target _check_target refuses is refused in its API's shape.
        route_path = "/" + "/".join(part for part in path.partition("#")[0].split("/") if part)
        kind = upstream_kind_for(route_path, headers, self._router.has_protocol)
        api = api_for(method, route_path)
        return Incoming(
            method=method,
            path=path,
            raw_path=scope.get("raw_path") or path.encode(),
            route_path=route_path,
            query=scope.get("query_string", b""),
            headers=headers,
            request_id=request_id,
            kind=kind,
            api=api,
            sdk=api.sdk if api is not None else UPSTREAM_PROTOCOLS[kind].sdk,
            http2=scope.get("http_version") == "2",
        )

    def _admit(self, incoming: Incoming, verdict: Verdict) -> None:
        """Refuse what proxai will not relay, before reading the body or going upstream."""
        if verdict.refusal is not None:
            raise verdict.refusal
        _check_target(incoming.raw_path, incoming.query)
        _check_path(incoming.method, incoming.path, incoming.raw_path)
        limit = self.config.server.max_header_bytes
        # Hypercorn bounds a header block only while it is incomplete; this bounds it whole.
        size = sum(len(n) + len(v) + 4 for n, v in incoming.headers) + len(incoming.raw_path)
        if size > limit:
            raise ProxyError(
                431,
                f"request headers are larger than the limit of {limit} bytes "
                "(server.max_header_bytes)",
                "invalid_request_error",
                code="request_headers_too_large",
            )
        self._gate.check_open()
        if self._keys is not None:
            self._keys.check(incoming.headers, incoming.sdk)
        self._gate.check_room()
        if not self._clients:
            raise ProxyError(503, "proxai is not started", "server_error")
        # Raises the 404 that says what is missing when no upstream can take it.
        self._route(incoming, None)

    async def _proxy(
        self,
        incoming: Incoming,
        downstream: AsgiDownstream,
        receive: ASGIReceive,
        outcome: Outcome,
        capture: Capture | None,
    ) -> None:
        """Read and route one admitted request, then relay it; raises ProxyError."""
        server = self.config.server
        body = await read_body(
            incoming.headers,
            receive,
            limit=server.max_request_body_bytes,
            seconds=self.config.timeouts.request_body,
        )
        if capture is not None:
            capture.request.add(body)
        exchange = await self._exchange(incoming, body, downstream, outcome)
        if exchange is None:
            return
        on_attempt = self._metrics.attempt if self._metrics is not None else None
        relay = Relay(exchange, downstream, outcome, tap=capture, on_attempt=on_attempt)
        self._relays.add(relay)
        try:
            await relay.run()
        finally:
            self._relays.discard(relay)

    async def _exchange(
        self, incoming: Incoming, body: bytes, downstream: AsgiDownstream, outcome: Outcome
    ) -> Exchange | None:
        """Everything decided about a request before the relay (``None``: proxai answered
        it itself). The parsed body dies here: a long stream keeps only the bytes each
        upstream is sent, not the client's request as Python objects."""
        server = self.config.server
        prepared = self._prepare(incoming, body, outcome)
        route = self._route(incoming, prepared.model)
        outcome.route = route.name
        if incoming.route_path == COUNT_TOKENS and incoming.method == "POST":
            upstream = self._clients[route.upstreams[0]].config
            if upstream.protocol is not UpstreamKind.ANTHROPIC_MESSAGES:
                await self._count_tokens_locally(incoming, downstream, prepared, outcome)
                return None
        targets = {
            name: self._target(name, body, incoming, prepared, route.upstream_model)
            for name in dict.fromkeys(route.upstreams)
        }
        request = ProxiedRequest(
            incoming.method,
            incoming.path,
            incoming.raw_path,
            query_for_upstream(incoming.query),
            incoming.headers,
            first_byte_applies=prepared.streaming,
        )
        return Exchange(
            request,
            targets,
            RetryPlan(route.upstreams, self.config.retries),
            self.config.timeouts,
            retry_admission=self._gate,
            error_shape=incoming.sdk.error_shape,
            max_event_bytes=server.max_event_bytes,
            max_translated_body_bytes=server.max_translated_body_bytes,
            can_abort=not incoming.http2,
            response_headers=incoming.id_header,
        )

    def _prepare(self, incoming: Incoming, body: bytes, outcome: Outcome) -> _Prepared:
        """Check and project the body of a generation request; pick its observer.

        Says which model the request is for (routes match it), how to build the
        observer for an event-stream answer, and whether ``first_byte`` applies: to
        requests that ask for a stream or carry no body, not to a generation that
        answers only once it is whole.
        """
        api = incoming.api
        if api is not None and incoming.method == "GET":
            # A resumed stream (GET /v1/responses/{id}?stream=true): no request to project.
            limits = self._limits
            return _Prepared(
                None, None, lambda timeouts: api.observer(timeouts, None, limits), True
            )
        if api is None:
            data = _json_object_or_none(body)
            model = data.get("model") if data is not None else None
            streaming = not body or (data is not None and data.get("stream") is True)
            return _Prepared(
                data, model if isinstance(model, str) else None, pass_through, streaming
            )
        data = load_json_object(body)
        projection = api.project(data)
        outcome.model, outcome.tools = projection.model, projection.tool_names()
        return _Prepared(
            data,
            projection.model,
            lambda timeouts: api.observer(timeouts, projection, self._limits),
            projection.stream is True,
        )

    def _route(self, incoming: Incoming, model: str | None) -> Route:
        return self._router.route_for(
            model, native=incoming.native, serves=incoming.serves, missing=incoming.missing
        )

    def _target(
        self,
        name: str,
        body: bytes,
        incoming: Incoming,
        prepared: _Prepared,
        upstream_model: str | None,
    ) -> UpstreamTarget:
        """What one upstream of the route gets: the client's request, rewritten where a
        normalize pass or a model rewrite applies, or translated into its API."""
        client = self._clients[name]
        api = incoming.api
        wire = upstream_api(client.config.protocol, api.wire) if api is not None else None
        if api is None or wire is None or wire is api.wire or prepared.data is None:
            sent, dropped = self._body_for(name, body, api, prepared, upstream_model)
            return UpstreamTarget(
                client,
                client.timeouts,
                sent,
                observer_factory=prepared.observer_factory,
                dropped=dropped,
            )
        data = orjson.loads(body)  # a fresh copy: the translator may take parts of it
        if upstream_model is not None:
            data["model"] = upstream_model
        translated = translate(api.wire, wire, data, client.config.translation)
        upstream = API_BY_WIRE[wire]
        limits = attrs.evolve(self._limits, end_past_kept=True)
        return UpstreamTarget(
            client,
            client.timeouts,
            dumps_kept(translated.body, client_body=lambda: data),
            observer_factory=lambda timeouts: upstream.observer(timeouts, None, limits),
            raw_path=upstream.path.encode(),
            query=b"",
            translator=translated.translator(),
        )

    async def _count_tokens_locally(
        self,
        incoming: Incoming,
        downstream: AsgiDownstream,
        prepared: _Prepared,
        outcome: Outcome,
    ) -> None:
        """``/v1/messages/count_tokens`` for a model no Anthropic upstream serves: an
        estimate (see docs/translation.md), since the upstream has no such endpoint."""
        data = prepared.data if prepared.data is not None else {}
        body = orjson.dumps({"input_tokens": estimate_input_tokens(data)})
        headers = [(b"content-type", b"application/json"), *incoming.id_header]
        await downstream.send_head(200, headers)
        await downstream.send_body(body, more=False)
        outcome.kind, outcome.status = OutcomeKind.COMPLETED, 200
        outcome.detail = "count_tokens estimated by proxai"

    def _body_for(
        self,
        name: str,
        body: bytes,
        api: Api | None,
        prepared: _Prepared,
        upstream_model: str | None,
    ) -> tuple[bytes, list[str]]:
        """The body one upstream gets: the client's bytes unless a rewrite applies; and the
        request fields dropped on the way (proxai's own reasoning carriers)."""
        passes = self._clients[name].config.normalize
        instructions = api is not None and api.has_instructions
        wire = api.wire if api is not None else None
        carriers = carries_proxai_reasoning(body, wire)
        if prepared.data is None or (
            upstream_model is None
            and not carriers
            and not (instructions and passes.system_to_instructions)
        ):
            return body, []
        data = orjson.loads(body)  # a fresh copy: each upstream's rewrites are its own
        dropped = strip_proxai_reasoning(data, wire) if carriers else []
        sent = normalize_body(
            body,
            data,
            passes,
            responses=instructions,
            upstream_model=upstream_model,
            edited=bool(dropped),
        )
        return sent, dropped

    def _report(self, outcome: Outcome) -> None:
        self._request_log(outcome)
        if self._metrics is not None:
            self._metrics.observe(outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    async def _health(self, path: str, method: str, downstream: AsgiDownstream) -> None:
        """``/healthz``: 200 while proxai can serve (draining included), else 503;
        ``/readyz``: 200 while it takes new requests."""
        if not self.serving:
            status = "stopped" if self._stopped else "starting"
        elif path == "/readyz" and not self.ready:
            status = "draining"
        else:
            status = "ok"
        body = b'{"status":"%s"}' % status.encode()
        await send_plain(
            downstream,
            200 if status == "ok" else 503,
            b"application/json",
            body,
            with_body=method == "GET",
        )


#: The bytes a request target may hold as proxai forwards it (RFC 3986's characters,
#: percent-escapes included): visible ASCII.
_TARGET_BYTES = frozenset(range(0x21, 0x7F))


def _check_target(raw_path: bytes, query: bytes) -> None:
    """Refuse a target no URL can carry upstream: a fragment (``#`` is never sent in a
    request, RFC 9112 section 3.2) or bytes outside visible ASCII (HTTP/2 lets them through)."""
    if b"#" in raw_path or b"#" in query:
        raise ProxyError.invalid_request(
            "invalid request target: '#' (a fragment) is not allowed in a request; "
            "percent-encode it as %23 if it is data",
            code="invalid_request_target",
        )
    if not _TARGET_BYTES.issuperset(raw_path) or not _TARGET_BYTES.issuperset(query):
        raise ProxyError.invalid_request(
            "invalid request target: only visible ASCII is allowed (percent-encode the rest)",
            code="invalid_request_target",
        )


def _check_path(method: str, path: str, raw_path: bytes) -> None:
    decoded = unquote(raw_path.decode("latin-1"))
    if any(segment in (".", "..") for segment in decoded.split("/")):
        # Forwarded as sent, a dot segment could reach outside the upstream's /v1.
        raise ProxyError.invalid_request(
            f"invalid path {decoded!r}: '.' and '..' segments are not allowed",
            code="invalid_path",
        )
    if not (path == "/v1" or path.startswith("/v1/")) or not raw_path.startswith(b"/v1"):
        raise ProxyError(
            404,
            f"no route for {method} {path}: proxai serves /v1/..., /healthz and /readyz",
            "invalid_request_error",
            code="not_found",
        )


def _json_object_or_none(body: bytes) -> dict[str, Any] | None:
    """A body on another route, parsed if it is a JSON object (for its model and stream)."""
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
