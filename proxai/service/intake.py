"""Intake: what a request is, from its ASGI scope, and the checks of its head alone.

The first step of both carriers: the browser policy's verdict on the method, ``Host``
and ``Origin`` (:mod:`proxai.policy.browser`: web pages stay out unless allowed),
the :class:`~proxai.service.plan.Incoming` the rest of the pipeline reads (its API,
its stored-response path, matched once), and the target checks
(:mod:`proxai.policy.target`) that refuse a request before anything else is spent
on it. A socket's turn is read here too, as the ``POST /v1/responses`` it is carried
as.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from ..config import Config, UpstreamKind
from ..policy.browser import BrowserPolicy, BrowserRequest, Verdict, is_loopback
from ..policy.target import check_head_size, check_path, check_target
from ..protocols.table import SOCKET_API
from ..wire.headers import Headers
from .local import HEALTH_PATHS
from .plan import Incoming, read_head

__all__ = ["Intake"]


class Intake:
    """Reads request heads for one proxai (``configured``: whether an upstream of a
    kind is)."""

    def __init__(self, config: Config, configured: Callable[[UpstreamKind], bool]) -> None:
        self._max_header_bytes = config.server.max_header_bytes
        self._configured = configured
        self._browser = BrowserPolicy(
            allowed_origins=config.server.allowed_origins,
            allowed_hosts=config.server.allowed_hosts,
            bound_to_loopback=is_loopback(config.server.host),
        )

    def verdict(self, scope: dict[str, Any]) -> Verdict:
        """The method, Host and Origin checks (:mod:`proxai.policy.browser`)."""
        server = scope.get("server")
        request = BrowserRequest(
            scope["method"], scope["headers"], str(server[0]) if server else None
        )
        return self._browser.check(request, exempt=scope["path"] in HEALTH_PATHS)

    def incoming(self, scope: dict[str, Any]) -> Incoming:
        """The request a scope holds, with a new request id."""
        path: str = scope["path"]
        return read_head(
            scope["method"],
            path,
            scope.get("raw_path") or path.encode(),
            scope.get("query_string", b""),
            scope["headers"],
            request_id="req_" + secrets.token_hex(12),
            http2=scope.get("http_version") == "2",
            configured=self._configured,
        )

    def turn(self, headers: Headers) -> Incoming:
        """A socket's turn as the ``POST /v1/responses`` it is carried as."""
        path = SOCKET_API.path.template
        return self.incoming(
            {"method": "POST", "path": path, "query_string": b"", "headers": headers}
        )

    def check(self, incoming: Incoming, verdict: Verdict) -> None:
        """Refuse what proxai will not relay by its head alone (the browser policy's
        refusal, the target, the path, the head's size)."""
        if verdict.refusal is not None:
            raise verdict.refusal
        check_target(incoming.raw_path, incoming.query)
        check_path(incoming.method, incoming.path, incoming.raw_path)
        check_head_size(incoming.headers, incoming.raw_path, self._max_header_bytes)
