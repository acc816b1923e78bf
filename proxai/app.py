"""The ASGI application: the only code that knows ASGI's message shapes.

It routes, reads and checks the request body, answers what proxai answers
itself (health, errors) and hands every proxied request to a
:class:`~proxai.relay.Relay`. The upstream client lives from lifespan startup
to lifespan shutdown.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import unquote

import attrs
import orjson
import trio

from .anthropic.observer import MessagesObserver
from .anthropic.request import project_messages_request
from .auth import ClientKeys
from .capture import Capture, Captures
from .chat.observer import ChatObserver
from .chat.request import ChatRequestProjection, project_chat_request
from .config import Config, Protocol, TimeoutsConfig
from .errors import ErrorShape, ProxyError
from .json_body import load_json_object
from .live_view import INTERVAL as LIVE_INTERVAL
from .live_view import PAGE, PREFIX, LiveViewAccess, snapshot_body
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .normalize import normalize_body
from .observer import StreamObserver
from .outcome import Outcome, OutcomeKind
from .relay import (
    ASGIReceive,
    ASGISend,
    ObserverFactory,
    ProxiedRequest,
    Relay,
    UpstreamTarget,
    pass_through,
    send_error,
    shutdown_error,
)
from .request_log import RequestLog
from .responses.observer import ResponsesObserver
from .responses.request import RequestProjection, project_request
from .retry import RetryPlan
from .routes import Router
from .upstream import UpstreamClient

__all__ = ["ProxaiApp"]

log = logging.getLogger("proxai")

#: proxai's id of a request: returned to the client, sent upstream, in every record.
REQUEST_ID_HEADER = b"x-proxai-request-id"

# Generation routes: their bodies are checked, projected and may be normalized.
JSON_ROUTES = frozenset({"/v1/responses", "/v1/chat/completions", "/v1/messages"})

OutcomeHook = Callable[[Outcome], None]
#: Builds the client of one upstream: ``factory(upstream, timeouts, name=name)``.
UpstreamFactory = Callable[..., UpstreamClient]


#: After drain_timeout, how long stopped streams get to write their closing events.
STOP_GRACE = 5.0


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
        self._clients: dict[str, UpstreamClient] = {}
        self._upstream_factory = upstream_factory
        self._on_outcome = on_outcome
        #: Proxied requests from arrival to their end (server.max_concurrent_streams).
        self._in_flight = 0
        self._relays: set[Relay] = set()
        self._draining = False
        self._drain_requested = trio.Event()
        self._idle = trio.Event()  # set once draining and nothing is in flight
        self._drain_scope = trio.CancelScope()  # the wait for in-flight requests
        self._request_log = RequestLog(config.logging)
        self._metrics = Metrics() if config.metrics.enabled else None
        self._captures = Captures(config.capture) if config.capture.enabled else None
        self._live_access = LiveViewAccess(config.live_view)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def ready(self) -> bool:
        """Started and not draining: what ``/readyz`` reports."""
        return bool(self._clients) and not self._draining

    async def startup(self) -> None:
        """Open a connection pool per upstream (lifespan startup)."""
        self._clients = {
            name: self._upstream_factory(upstream, self.config.timeouts_for(name), name=name)
            for name, upstream in self.config.all_upstreams()
        }

    async def shutdown(self) -> None:
        """Close the upstream connection pools (lifespan shutdown)."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    def begin_drain(self) -> None:
        """Stop taking requests (``/readyz`` turns 503; new ones get 503); the
        lifespan task then runs :meth:`drain`."""
        self._draining = True
        if not self._in_flight:
            self._idle.set()
        self._drain_requested.set()

    async def drain(self) -> None:
        """Let in-flight requests finish for ``server.drain_timeout``, then end the rest
        with their protocol's error and wait (up to :data:`STOP_GRACE`) until they have."""
        self.begin_drain()
        with self._drain_scope:
            self._drain_scope.deadline = trio.current_time() + self.config.server.drain_timeout
            await self._idle.wait()
        if self._relays:
            log.warning(
                "drain_timeout passed: ending %d open stream(s) with an error", len(self._relays)
            )
        for relay in list(self._relays):
            relay.stop()
        with trio.move_on_after(STOP_GRACE):
            await self._idle.wait()

    def hurry(self) -> None:
        """End the drain now (a second SIGINT/SIGTERM): open streams get their error."""
        self.begin_drain()
        self._drain_scope.cancel()

    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._drain_when_asked)
                await self._lifespan_messages(receive, send)
                nursery.cancel_scope.cancel()
        finally:
            # A server cancelled without a graceful shutdown still closes the pools:
            # their sockets must not wait for the garbage collector.
            with trio.CancelScope(shield=True):
                await self.shutdown()

    async def _drain_when_asked(self) -> None:
        await self._drain_requested.wait()
        await self.drain()

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

    async def _http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        if path in ("/healthz", "/readyz") and method in ("GET", "HEAD"):
            await self._health(path, method, send)
            return
        if self._metrics is not None and path == self.config.metrics.path and method == "GET":
            await _send_plain(send, 200, CONTENT_TYPE_LATEST.encode(), self._metrics.exposition())
            return
        if self.config.live_view.enabled and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self._live_view(scope, receive, send)
            return
        request_id = "req_" + secrets.token_hex(12)
        # The client's own x-proxai-request-id is replaced: ids are proxai's.
        id_header = [(REQUEST_ID_HEADER, request_id.encode())]
        headers: list[tuple[bytes, bytes]] = [
            (n, v) for n, v in scope["headers"] if n != REQUEST_ID_HEADER
        ] + id_header
        raw_path: bytes = scope.get("raw_path") or path.encode()
        # Routes are matched on the path an upstream would see after normalizing it
        # ("/v1//responses/" is /v1/responses), so no spelling skips the observers.
        route_path = "/" + "/".join(part for part in path.split("/") if part)
        protocol = self._protocol_for(route_path, headers)
        shape = (
            ErrorShape.ANTHROPIC if protocol is Protocol.ANTHROPIC_MESSAGES else ErrorShape.OPENAI
        )
        outcome = Outcome(method, path, request_id=request_id)
        admitted = False
        capture: Capture | None = None
        try:
            self._admit(method, path, raw_path, headers, protocol)
            admitted = True
            self._in_flight += 1
            # Refused requests are not captured: a flood of them must not push out the rest.
            capture = self._captures.start() if self._captures is not None else None
            if self._metrics is not None:
                self._metrics.in_flight.inc()
            if capture is not None:
                capture.request_head(method, raw_path, scope.get("query_string", b""), headers)
            await self._proxy(
                scope,
                receive,
                send,
                headers,
                raw_path,
                route_path,
                protocol,
                shape,
                outcome,
                capture,
                id_header,
            )
        except ProxyError as exc:
            body = await send_error(send, exc, shape, id_header)
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
                self._in_flight -= 1
                if self._metrics is not None:
                    self._metrics.in_flight.dec()
                if self._draining and not self._in_flight:
                    self._idle.set()
            # Every request leaves a record, even one a bug or a shutdown cut short.
            self._report(outcome)
            if capture is not None and self._captures is not None:
                with trio.move_on_after(5, shield=True):
                    await self._captures.save(capture, outcome)

    def _admit(
        self,
        method: str,
        path: str,
        raw_path: bytes,
        headers: list[tuple[bytes, bytes]],
        protocol: Protocol,
    ) -> None:
        """Refuse what proxai will not relay, before reading the body or going upstream."""
        self._check_path(method, path, raw_path)
        limit = self.config.server.max_header_bytes
        # Hypercorn bounds a header block only while it is incomplete; this bounds it whole.
        if sum(len(n) + len(v) + 4 for n, v in headers) + len(raw_path) > limit:
            raise ProxyError(
                431,
                f"request headers are larger than the limit of {limit} bytes "
                "(server.max_header_bytes)",
                "invalid_request_error",
                code="request_headers_too_large",
            )
        if self._draining:
            raise shutdown_error()
        if self._keys is not None:
            self._keys.check(headers, protocol)
        streams = self.config.server.max_concurrent_streams
        if streams and self._in_flight >= streams:
            raise _overloaded(streams)
        if not self._clients:
            raise ProxyError(503, "proxai is not started", "server_error")
        if not self._router.has_protocol(protocol):
            self._router.route_for(protocol, None)  # raises the 404 that says what is missing

    async def _proxy(
        self,
        scope: dict[str, Any],
        receive: ASGIReceive,
        send: ASGISend,
        headers: list[tuple[bytes, bytes]],
        raw_path: bytes,
        route_path: str,
        protocol: Protocol,
        shape: ErrorShape,
        outcome: Outcome,
        capture: Capture | None,
        id_header: list[tuple[bytes, bytes]],
    ) -> None:
        """Read and route one admitted request, then relay it; raises ProxyError."""
        method = outcome.method
        body = await self._read_body(scope, receive)
        if capture is not None:
            capture.request.add(body)
        prepared = self._prepare(method, route_path, body, outcome)
        route = self._router.route_for(protocol, prepared.model)
        outcome.route = route.name
        targets = {
            name: UpstreamTarget(
                self._clients[name],
                self._clients[name].timeouts,
                self._body_for(name, body, prepared, route.upstream_model),
            )
            for name in dict.fromkeys(route.upstreams)
        }
        request = ProxiedRequest(
            method,
            outcome.path,
            raw_path,
            scope.get("query_string", b""),
            headers,
            first_byte_applies=prepared.streaming,
        )
        relay = Relay(
            targets,
            RetryPlan(route.upstreams, self.config.retries),
            self.config.timeouts,
            request,
            send,
            receive,
            observer_factory=prepared.observer_factory,
            outcome=outcome,
            error_shape=shape,
            max_event_bytes=self.config.server.max_event_bytes,
            can_abort=scope.get("http_version") != "2",
            response_headers=id_header,
            tap=capture,
            on_attempt=self._metrics.attempt if self._metrics is not None else None,
        )
        self._relays.add(relay)
        try:
            await relay.run()
        finally:
            self._relays.discard(relay)

    async def _health(self, path: str, method: str, send: ASGISend) -> None:
        ok = path == "/healthz" or self.ready
        body = b'{"status":"ok"}' if ok else b'{"status":"draining"}'
        if not self._clients and path == "/readyz":
            body = b'{"status":"starting"}'
        await _send_plain(
            send, 200 if ok else 503, b"application/json", body, with_body=method == "GET"
        )

    def _protocol_for(self, path: str, headers: list[tuple[bytes, bytes]]) -> Protocol:
        """Anthropic for /v1/messages, and for any /v1 request an Anthropic SDK makes
        (it sends ``anthropic-version``) when an Anthropic upstream exists."""
        if path == "/v1/messages" or path.startswith("/v1/messages/"):
            return Protocol.ANTHROPIC_MESSAGES
        anthropic_client = any(name == b"anthropic-version" for name, _ in headers)
        if anthropic_client and self._router.has_protocol(Protocol.ANTHROPIC_MESSAGES):
            return Protocol.ANTHROPIC_MESSAGES
        return Protocol.OPENAI

    @staticmethod
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

    def _prepare(self, method: str, path: str, body: bytes, outcome: Outcome) -> _Prepared:
        """Check and project the body of a generation request; pick its observer.

        Says which model the request is for (routes match it), how to build the
        observer for an event-stream answer, and whether ``first_byte`` applies: to
        requests that ask for a stream or carry no body, not to a generation that
        answers only once it is whole.
        """
        if method == "GET" and path.startswith("/v1/responses/"):
            # GET /v1/responses/{id}?stream=true resumes a background response's stream.
            return _Prepared(None, None, partial(_responses_observer, None), True)
        if method != "POST" or path not in JSON_ROUTES:
            data = _json_object_or_none(body)
            model = data.get("model") if data is not None else None
            streaming = not body or (data is not None and data.get("stream") is True)
            return _Prepared(
                data, model if isinstance(model, str) else None, pass_through, streaming
            )
        data = load_json_object(body)
        factory: ObserverFactory
        if path == "/v1/responses":
            projection = project_request(data)
            outcome.model, outcome.tools = projection.model, projection.tool_names()
            factory = partial(_responses_observer, projection)
            streaming = projection.stream is True
        elif path == "/v1/chat/completions":
            chat = project_chat_request(data)
            outcome.model, outcome.tools = chat.model, chat.tool_names()
            factory = partial(_chat_observer, chat)
            streaming = chat.stream is True
        else:
            messages = project_messages_request(data)
            outcome.model, outcome.tools = messages.model, messages.tool_names()
            factory = MessagesObserver
            streaming = messages.stream is True
        return _Prepared(data, outcome.model, factory, streaming, responses=path == "/v1/responses")

    def _body_for(
        self, name: str, body: bytes, prepared: _Prepared, upstream_model: str | None
    ) -> bytes:
        """The body one upstream gets: the client's bytes unless a rewrite applies."""
        passes = self._clients[name].config.normalize
        if prepared.data is None or (
            upstream_model is None and not (prepared.responses and passes.system_to_instructions)
        ):
            return body
        data = orjson.loads(body)  # a fresh copy: each upstream's rewrites are its own
        return normalize_body(
            body, data, passes, responses=prepared.responses, upstream_model=upstream_model
        )

    def _report(self, outcome: Outcome) -> None:
        self._request_log(outcome)
        if self._metrics is not None:
            self._metrics.observe(outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    # -- the live view -------------------------------------------------------------------

    async def _live_view(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        path = scope["path"]
        refusal = self._live_view_refusal(scope)
        if refusal is not None:
            await send_error(send, refusal)
        elif path in (PREFIX, PREFIX + "/"):
            await _send_plain(send, 200, b"text/html; charset=utf-8", PAGE)
        elif path == PREFIX + "/streams":
            await _send_plain(send, 200, b"application/json", self._streams_body())
        elif path == PREFIX + "/events":
            await self._live_events(receive, send)
        else:
            await send_error(
                send, ProxyError(404, f"no live view page {path}", "invalid_request_error")
            )

    def _live_view_refusal(self, scope: dict[str, Any]) -> ProxyError | None:
        """Why this client may not see the live view, if it may not."""
        client = scope.get("client")
        if not self._live_access.allows(client[0] if client else None):
            return ProxyError(
                403,
                "the live view answers loopback clients and live_view.allow only",
                "invalid_request_error",
                code="forbidden",
            )
        # The page itself holds no data (a browser cannot send a key to load it); what
        # it reads, /streams and /events, is behind the client keys.
        if self._keys is not None and scope["path"] not in (PREFIX, PREFIX + "/"):
            try:
                self._keys.check(scope["headers"], Protocol.OPENAI)
            except ProxyError as exc:
                return exc
        if scope["method"] != "GET":
            return ProxyError(
                405, f"{scope['method']} is not allowed here", "invalid_request_error"
            )
        return None

    def _streams_body(self) -> bytes:
        return snapshot_body([relay.snapshot() for relay in self._relays], time.time())

    async def _live_events(self, receive: ASGIReceive, send: ASGISend) -> None:
        """A snapshot now and every second, until the client leaves or proxai drains."""
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            while not self._draining:
                data = b"data: " + self._streams_body() + b"\n\n"
                await send({"type": "http.response.body", "body": data, "more_body": True})
                await trio.sleep(LIVE_INTERVAL)
            nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _read_body(self, scope: dict[str, Any], receive: ASGIReceive) -> bytes:
        """The whole request body, refused with 413 as soon as it passes the limit."""
        limit = self.config.server.max_request_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise ProxyError.invalid_request("invalid Content-Length header") from None
                if declared > limit:
                    raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        seconds = self.config.timeouts.request_body
        with trio.move_on_after(seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ProxyError(
                        499,
                        "the client went away before its request body was read",
                        "invalid_request_error",
                        kind=OutcomeKind.CLIENT_DISCONNECTED,
                    )
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        raise ProxyError(
            408,
            f"the request body did not arrive within {seconds} s (timeouts.request_body)",
            "invalid_request_error",
            code="request_timeout",
            kind=OutcomeKind.REQUEST_BODY_TIMEOUT,
        )


async def _send_plain(
    send: ASGISend, status: int, content_type: bytes, body: bytes, *, with_body: bool = True
) -> None:
    """A whole response; ``with_body=False`` answers a HEAD (the length, no body)."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body if with_body else b""})


def _json_object_or_none(body: bytes) -> dict[str, Any] | None:
    """A body on another route, parsed if it is a JSON object (for its model and stream)."""
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


@attrs.frozen
class _Prepared:
    """What the body of a request says about how to route and observe it."""

    data: dict[str, Any] | None  # the parsed body, when it is a JSON object
    model: str | None
    observer_factory: ObserverFactory
    streaming: bool  # whether first_byte applies
    responses: bool = False  # a Responses request (normalization has passes for it)


def _responses_observer(
    projection: RequestProjection | None, timeouts: TimeoutsConfig
) -> StreamObserver:
    return ResponsesObserver(timeouts, projection)


def _chat_observer(projection: ChatRequestProjection, timeouts: TimeoutsConfig) -> StreamObserver:
    return ChatObserver(timeouts, projection)


def _overloaded(limit: int) -> ProxyError:
    return ProxyError(
        503,
        f"proxai is at its limit of {limit} concurrent requests "
        "(server.max_concurrent_streams); retry shortly",
        "server_error",
        code="proxy_overloaded",
        headers=((b"retry-after", b"1"),),
        kind=OutcomeKind.OVERLOADED,
    )


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413,
        f"request body is larger than the limit of {limit} bytes (server.max_request_body_bytes)",
        "invalid_request_error",
        code="request_too_large",
    )
