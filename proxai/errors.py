"""Errors proxai answers itself, in the error format of the route's API.

Every response proxai makes on its own (bad request, upstream unreachable,
upstream too slow to answer) has the body the client's SDK maps to its
exception classes, so a client sees a proxai failure the way it would see the
same failure from the API itself: OpenAI's
``{"error": {"message", "type", "param", "code"}}``, or on Anthropic's routes
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import attrs
import orjson

from .outcome import TRY_AGAIN, OutcomeKind

__all__ = [
    "SHUTDOWN_MESSAGE",
    "ErrorShape",
    "ErrorWriter",
    "ProxyError",
    "anthropic_error_type",
    "ending_code",
    "error_body",
    "request_too_large",
    "shutdown_error",
]


#: Anthropic's error type for each status (its errors documentation).
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",  # proxai over its limit or shutting down: retry elsewhere
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    """The Anthropic error ``type`` for an HTTP status proxai answers with."""
    if status in _ANTHROPIC_TYPES:
        return _ANTHROPIC_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(
    message: str, type: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """Encode OpenAI's error JSON."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


#: Writes an error's JSON from its status, message, type, param and code.
ErrorWriter = Callable[[int, str, str, str | None, str | None], bytes]


@attrs.frozen
class ErrorShape:
    """An API's error JSON, as its clients' SDKs parse it: a row of the protocol table
    names its API's (:attr:`proxai.protocols.table.ClientSdk.error_shape`)."""

    name: str
    write: ErrorWriter = attrs.field(repr=False)

    #: OpenAI's ``{"error": {...}}``: also proxai's answer where no API applies.
    OPENAI: ClassVar[ErrorShape]
    #: Anthropic's ``{"type": "error", "error": {"type", "message"}}``.
    ANTHROPIC: ClassVar[ErrorShape]


def _openai_error(
    status: int, message: str, type: str, param: str | None, code: str | None
) -> bytes:
    return error_body(message, type, param=param, code=code)


def _anthropic_error(
    status: int, message: str, type: str, param: str | None, code: str | None
) -> bytes:
    """Anthropic's error has a type (by status) and a message only."""
    error = {"type": anthropic_error_type(status), "message": message}
    return orjson.dumps({"type": "error", "error": error})


ErrorShape.OPENAI = ErrorShape("openai", _openai_error)
ErrorShape.ANTHROPIC = ErrorShape("anthropic", _anthropic_error)


@attrs.define(eq=False)
class ProxyError(Exception):
    """A failure proxai reports to the client as an HTTP error response."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    #: How the request's outcome record names this failure (``proxy_error`` if unset).
    kind: OutcomeKind | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def body(self, shape: ErrorShape | None = None) -> bytes:
        """This error in ``shape``'s JSON (OpenAI's by default)."""
        shape = shape or ErrorShape.OPENAI
        return shape.write(self.status, self.message, self.type, self.param, self.code)

    @classmethod
    def invalid_request(
        cls, message: str, *, param: str | None = None, code: str | None = None
    ) -> ProxyError:
        return cls(400, message, "invalid_request_error", param, code)


def request_too_large(limit: int, *, decoded: bool = False) -> ProxyError:
    """413 for a request body over ``server.max_request_body_bytes``, as it arrived or
    (``decoded``) once its content codings are undone."""
    once = " once decoded" if decoded else ""
    return ProxyError(
        413,
        f"request body is larger than the limit of {limit} bytes{once} "
        "(server.max_request_body_bytes)",
        "invalid_request_error",
        code="request_too_large",
    )


SHUTDOWN_MESSAGE = "proxai is shutting down; retry the request"


def shutdown_error(message: str = SHUTDOWN_MESSAGE) -> ProxyError:
    """503 with ``Retry-After``: another proxai instance can take the request."""
    return ProxyError(
        503,
        message,
        "server_error",
        code="proxy_shutting_down",
        headers=((b"retry-after", b"1"),),
        kind=OutcomeKind.SHUTDOWN,
    )


#: The codes of a body proxai could not relay whole, by what ended it.
_UPSTREAM_END_CODES = {
    OutcomeKind.UPSTREAM_EOF: "upstream_closed",
    OutcomeKind.UPSTREAM_RESET: "upstream_reset",
    OutcomeKind.UPSTREAM_EVENT_TOO_LARGE: "upstream_event_too_large",
    OutcomeKind.TRANSLATION_FAILED: "translation_failed",
    OutcomeKind.UPSTREAM_OVER_LIMIT: "upstream_over_limit",
}


def ending_code(kind: OutcomeKind) -> str:
    """The error ``code`` proxai gives a stream it ends as ``kind``: the same whether it
    says so as an HTTP error before the first byte or in the client's stream after it,
    passed through or translated (OpenAI's APIs; Anthropic's errors have a type only)."""
    if kind is OutcomeKind.SHUTDOWN:
        return "proxy_shutting_down"
    code = _UPSTREAM_END_CODES.get(kind)
    if code is not None:
        return code
    if kind in TRY_AGAIN or kind is OutcomeKind.STALLED_FIRST_BYTE:
        return "upstream_timeout"
    return "server_error"
