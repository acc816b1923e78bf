"""An upstream's HTTP error body, in the client API's error shape.

When an upstream of another API answers 4xx/5xx, the client must get the error
its own SDK parses (OpenAI's ``{"error": {message, type, param, code}}`` or
Anthropic's ``{"type": "error", "error": {type, message}}``), with the
upstream's words kept. The status and ``Retry-After`` are the caller's to keep.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import ProxyError
from ...protocols.names import WireApi
from ...protocols.table import API_BY_WIRE
from ...wire.json_values import json_object_or_none, str_or_none

__all__ = ["UpstreamError", "read_error", "translate_error_body"]

#: At most this much of a non-JSON error body becomes the message.
MAX_MESSAGE = 2000

UpstreamError = tuple[str, str | None, str | None, str | None]  # message, type, param, code


def _text(value: Any) -> str | None:
    """A string the error has, if it is one (an empty one says nothing)."""
    return str_or_none(value) or None


def _code(value: Any, status: int) -> str | None:
    """OpenAI's ``code`` is a string; some servers put the HTTP status there, which says nothing."""
    if isinstance(value, int) and not isinstance(value, bool) and value != status:
        return str(value)
    return _text(value)


def read_error(status: int, body: bytes) -> UpstreamError:
    """``(message, type, param, code)`` of any error body: OpenAI's or Anthropic's shape,
    vLLM's flat ``{"object": "error", "message"}``, Ollama's ``{"error": "..."}``,
    FastAPI's ``{"detail"}``, or plain text."""
    data = json_object_or_none(body)
    if data is not None:
        error = data.get("error")
        if isinstance(error, str) and error:
            return error, None, None, None
        source = error if isinstance(error, dict) else data
        message = _text(source.get("message"))
        detail = source.get("detail")
        if message is None and detail is not None:
            message = detail if isinstance(detail, str) else orjson.dumps(detail).decode()
        if message is not None:
            return (
                message,
                _text(source.get("type")),
                _text(source.get("param")),
                _code(source.get("code"), status),
            )
    text = body.decode("utf-8", "replace").strip()[:MAX_MESSAGE]
    return text or f"the upstream answered HTTP {status} with no details", None, None, None


def translate_error_body(status: int, body: bytes, upstream: WireApi, client: WireApi) -> bytes:
    """``body``, an upstream's error answer with HTTP ``status``, in ``client``'s error JSON.

    Written as proxai's own errors are, in the error shape of the client API's SDKs:
    Anthropic's error ``type`` follows the status; OpenAI's keeps the upstream's type, or
    ``server_error`` / ``invalid_request_error`` by status when it gave none.
    """
    if upstream is client:
        return body
    message, kind, param, code = read_error(status, body)
    kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
    error = ProxyError(status, message, kind, param, code)
    return error.body(API_BY_WIRE[client].sdk.error_shape)
