"""The ASGI application: the only code that knows ASGI's message shapes.

It routes, reads and checks the request body, answers what proxai answers
itself (health, errors) and hands every proxied request to a
:class:`~proxai.relay.Relay`. The upstream client lives from lifespan startup
to lifespan shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import unquote

import orjson
import trio

from .anthropic.observer import MessagesObserver
from .anthropic.request import project_messages_request
from .chat.observer import ChatObserver
from .chat.request import project_chat_request
from .config import Config, Protocol
from .errors import ErrorShape, ProxyError
from .json_body import load_json_object
from .normalize import normalize_body
from .observer import PassThroughObserver, StreamObserver
from .outcome import Outcome, OutcomeKind
from .relay import ASGIReceive, ASGISend, ProxiedRequest, Relay, send_error
from .responses.observer import ResponsesObserver
from .responses.request import project_request
from .upstream import UpstreamClient

__all__ = ["ProxaiApp"]

log = logging.getLogger("proxai")

# Generation routes: their bodies are checked, projected and may be normalized.
JSON_ROUTES = frozenset({"/v1/responses", "/v1/chat/completions", "/v1/messages"})

OutcomeHook = Callable[[Outcome], None]
#: Builds the client of one upstream: ``factory(upstream, timeouts, name=name)``.
UpstreamFactory = Callable[..., UpstreamClient]


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
        self._clients: dict[str, UpstreamClient] = {}
        self._upstream_factory = upstream_factory
        self._on_outcome = on_outcome

    async def startup(self) -> None:
        """Open a connection pool per upstream (lifespan startup)."""
        self._clients = {
            name: self._upstream_factory(upstream, self.config.timeouts, name=name)
            for name, upstream in self.config.all_upstreams()
        }

    async def shutdown(self) -> None:
        """Close the upstream connection pools (lifespan shutdown)."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        try:
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
        finally:
            # A server cancelled without a graceful shutdown still closes the pools:
            # their sockets must not wait for the garbage collector.
            with trio.CancelScope(shield=True):
                await self.shutdown()

    async def _http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        if path == "/healthz" and method in ("GET", "HEAD"):
            body = b'{"status":"ok"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"15")],
                }
            )
            await send({"type": "http.response.body", "body": body if method == "GET" else b""})
            return
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        raw_path: bytes = scope.get("raw_path") or path.encode()
        # Routes are matched on the path an upstream would see after normalizing it
        # ("/v1//responses/" is /v1/responses), so no spelling skips the observers.
        route = "/" + "/".join(part for part in path.split("/") if part)
        protocol = self._protocol_for(route, headers)
        shape = (
            ErrorShape.ANTHROPIC if protocol is Protocol.ANTHROPIC_MESSAGES else ErrorShape.OPENAI
        )
        outcome = Outcome(method, path)
        try:
            client = self._client_for(
                method, path, scope.get("raw_path") or path.encode(), protocol
            )
            outcome.upstream = client.name
            body = await self._read_body(scope, receive)
            body, observer_factory, streaming = self._prepare(method, route, body, client, outcome)
        except ProxyError as exc:
            await send_error(send, exc, shape)
            outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
            outcome.status = exc.status
            outcome.detail = exc.message
            self._report(outcome)
            return
        request = ProxiedRequest(
            method,
            path,
            raw_path,
            scope.get("query_string", b""),
            headers,
            body,
            first_byte_applies=streaming,
        )
        relay = Relay(
            client,
            self.config.timeouts,
            request,
            send,
            receive,
            observer_factory=observer_factory,
            outcome=outcome,
            error_shape=shape,
            max_event_bytes=self.config.server.max_event_bytes,
            can_abort=scope.get("http_version") != "2",
        )
        try:
            await relay.run()
        except Exception as exc:
            outcome.kind = outcome.kind or OutcomeKind.PROXY_ERROR
            outcome.detail = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            # Every request leaves a record, even one a bug or a shutdown cut short.
            self._report(outcome)

    def _protocol_for(self, path: str, headers: list[tuple[bytes, bytes]]) -> Protocol:
        """Anthropic for /v1/messages, and for any /v1 request an Anthropic SDK makes
        (it sends ``anthropic-version``) when an Anthropic upstream exists."""
        if path == "/v1/messages" or path.startswith("/v1/messages/"):
            return Protocol.ANTHROPIC_MESSAGES
        anthropic_client = any(name == b"anthropic-version" for name, _ in headers)
        if anthropic_client and self.config.upstream_for(Protocol.ANTHROPIC_MESSAGES):
            return Protocol.ANTHROPIC_MESSAGES
        return Protocol.OPENAI

    def _client_for(
        self, method: str, path: str, raw_path: bytes, protocol: Protocol
    ) -> UpstreamClient:
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
                f"no route for {method} {path}: proxai serves /v1/... and /healthz",
                "invalid_request_error",
                code="not_found",
            )
        if not self._clients:
            raise ProxyError(503, "proxai is not started", "server_error")
        found = self.config.upstream_for(protocol)
        if found is None:
            if protocol is Protocol.ANTHROPIC_MESSAGES:
                message = (
                    f"no Anthropic upstream is configured for {path}: add an [upstreams.NAME] "
                    'table with protocol = "anthropic_messages"'
                )
            else:
                message = f"no OpenAI-compatible upstream is configured for {path}"
            raise ProxyError(404, message, "invalid_request_error", code="no_upstream")
        return self._clients[found[0]]

    def _prepare(
        self, method: str, path: str, body: bytes, client: UpstreamClient, outcome: Outcome
    ) -> tuple[bytes, Callable[[], StreamObserver], bool]:
        """Check and project the body of a generation request; pick its observer.

        Returns the body to send (normalized, or the original bytes), the observer
        factory for an event-stream answer, and whether ``first_byte`` applies: to
        requests that ask for a stream or carry no body, not to a generation that
        answers only once it is whole.
        """
        timeouts = self.config.timeouts
        if method == "GET" and path.startswith("/v1/responses/"):
            # GET /v1/responses/{id}?stream=true resumes a background response's stream.
            return body, partial(ResponsesObserver, timeouts, None), True
        if method != "POST" or path not in JSON_ROUTES:
            return body, PassThroughObserver, not body or _asks_for_a_stream(body)
        data = load_json_object(body)
        factory: Callable[[], StreamObserver]
        if path == "/v1/responses":
            projection = project_request(data)
            outcome.model, outcome.tools = projection.model, projection.tool_names()
            factory = partial(ResponsesObserver, timeouts, projection)
            streaming = projection.stream is True
        elif path == "/v1/chat/completions":
            chat = project_chat_request(data)
            outcome.model, outcome.tools = chat.model, chat.tool_names()
            factory = partial(ChatObserver, timeouts, chat)
            streaming = chat.stream is True
        else:
            messages = project_messages_request(data)
            outcome.model, outcome.tools = messages.model, messages.tool_names()
            factory = partial(MessagesObserver, timeouts)
            streaming = messages.stream is True
        body = normalize_body(
            body, data, client.config.normalize, responses=path == "/v1/responses"
        )
        return body, factory, streaming

    def _report(self, outcome: Outcome) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)

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


def _asks_for_a_stream(body: bytes) -> bool:
    """Whether a body on another route is a JSON object with ``"stream": true``."""
    if not body.lstrip().startswith(b"{"):
        return False
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("stream") is True


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413,
        f"request body is larger than the limit of {limit} bytes (server.max_request_body_bytes)",
        "invalid_request_error",
        code="request_too_large",
    )
