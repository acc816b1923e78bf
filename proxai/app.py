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

from .config import Config
from .errors import ProxyError
from .json_body import load_json_object
from .observer import PassThroughObserver, StreamObserver
from .outcome import Outcome, OutcomeKind
from .relay import ASGIReceive, ASGISend, ProxiedRequest, Relay, send_error
from .responses.observer import ResponsesObserver
from .responses.request import project_request
from .upstream import UpstreamClient

__all__ = ["ProxaiApp"]

log = logging.getLogger("proxai")

# Routes whose body must be a JSON object before it is forwarded.
JSON_ROUTES = frozenset({"/v1/responses", "/v1/chat/completions"})

OutcomeHook = Callable[[Outcome], None]


class ProxaiApp:
    """ASGI 3 application; ``on_outcome`` is called with every request's outcome."""

    def __init__(
        self,
        config: Config,
        *,
        on_outcome: OutcomeHook | None = None,
        upstream_factory: Callable[[Config], UpstreamClient] = UpstreamClient,
    ) -> None:
        self.config = config
        self._upstream: UpstreamClient | None = None
        self._upstream_factory = upstream_factory
        self._on_outcome = on_outcome

    async def startup(self) -> None:
        """Open the upstream connection pool (lifespan startup)."""
        self._upstream = self._upstream_factory(self.config)

    async def shutdown(self) -> None:
        """Close the upstream connection pool (lifespan shutdown)."""
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None

    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
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
        if not (path == "/v1" or path.startswith("/v1/")):
            await send_error(
                send,
                ProxyError(
                    404,
                    f"no route for {method} {path}: proxai serves /v1/... and /healthz",
                    "invalid_request_error",
                    code="not_found",
                ),
            )
            return
        if self._upstream is None:
            await send_error(send, ProxyError(503, "proxai is not started", "server_error"))
            return
        outcome = Outcome(method, path)
        observer_factory: Callable[[], StreamObserver] = PassThroughObserver
        streaming = True
        try:
            body = await self._read_body(scope, receive)
            if method == "POST" and path == "/v1/responses":
                projection = project_request(body)
                outcome.model = projection.model
                outcome.tools = projection.tool_names()
                observer_factory = partial(ResponsesObserver, self.config.timeouts, projection)
                streaming = projection.stream is True
            elif method == "POST" and path in JSON_ROUTES:
                streaming = load_json_object(body).get("stream") is True
        except ProxyError as exc:
            await send_error(send, exc)
            outcome.kind = OutcomeKind.PROXY_ERROR
            outcome.status = exc.status
            outcome.detail = exc.message
            self._report(outcome)
            return
        request = ProxiedRequest(
            method,
            path,
            scope.get("query_string", b""),
            list(scope["headers"]),
            body,
            first_byte_applies=streaming,
        )
        relay = Relay(
            self._upstream,
            self.config.timeouts,
            request,
            send,
            receive,
            observer_factory=observer_factory,
            outcome=outcome,
        )
        self._report(await relay.run())

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
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ProxyError(
                    499,
                    "the client went away before its request body was read",
                    "invalid_request_error",
                )
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413,
        f"request body is larger than the limit of {limit} bytes (server.max_request_body_bytes)",
        "invalid_request_error",
        code="request_too_large",
    )
