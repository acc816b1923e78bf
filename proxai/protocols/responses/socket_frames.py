"""The Responses WebSocket's text frames, as proxai relays them to and from an upstream.

Over a socket a request is one ``{"type": "response.create", ...body...}`` frame and
each stream event is one frame holding what SSE would carry as that event's ``data``.
An upstream socket's frames become SSE events here (``event: <type>`` and the frame as
its ``data``), so that the reader and the Responses observer that watch HTTP streams
watch socket streams unchanged. A request-level failure (``{"type": "error", "status":
N, ...}`` before any event) becomes what the HTTP API would have answered: a status,
headers and an ``{"error": ...}`` body.
"""

from __future__ import annotations

import re

import attrs
import orjson

from ...wire.headers import HOP_BY_HOP, Headers, is_token, value_problem
from ...wire.sse import SSEFrame
from .events import TERMINAL_TYPES

__all__ = [
    "SOCKET_TERMINAL_TYPES",
    "RequestError",
    "as_sse",
    "create_frame",
    "event_type",
    "request_error",
]

#: The events after which a response's socket carries nothing more of it (``error``
#: is not one: the API follows a stream's ``error`` with ``response.failed``).
SOCKET_TERMINAL_TYPES = frozenset(t.encode() for t in TERMINAL_TYPES)

_CREATE_HEAD = b'{"type":"response.create"'
_TYPE_HEAD = b'{"type":"'
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
#: Headers of an error frame that describe a body proxai writes itself.
_NOT_FROM_FRAME = HOP_BY_HOP | {
    b"content-type",
    b"content-length",
    b"content-encoding",
}
_JSON = (b"content-type", b"application/json")


def create_frame(body: bytes) -> str:
    """The ``response.create`` frame of a Responses request body (a JSON object): its
    fields unchanged and in order, after ``"type"``. The body's bytes are kept as they
    are unless it holds a ``type`` of its own, which the frame's replaces."""
    fields = orjson.loads(body)
    if not isinstance(fields, dict):
        raise TypeError("a Responses request body is a JSON object")
    if "type" in fields:
        rest = {k: v for k, v in fields.items() if k != "type"}
        return orjson.dumps({"type": "response.create", **rest}).decode()
    if not fields:
        return (_CREATE_HEAD + b"}").decode()
    # orjson parsed it, so past its leading whitespace it opens with "{".
    inner = body.lstrip(b" \t\r\n")[1:]
    return (_CREATE_HEAD + b"," + inner).decode()


def event_type(text: bytes) -> bytes | None:
    """The ``type`` of an event frame, if it has a usable one (a name fit for an SSE
    ``event:`` line). The frames of real servers open with it, so it is read off the
    front without parsing the frame; any other frame is parsed."""
    if text.startswith(_TYPE_HEAD):
        end = text.find(b'"', len(_TYPE_HEAD))
        if end > 0:
            kind = text[len(_TYPE_HEAD) : end]
            if not any(c in kind for c in (b"\\", b"\n", b"\r")):
                return kind
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    name = data.get("type") if isinstance(data, dict) else None
    if not isinstance(name, str) or "\n" in name or "\r" in name:
        return None
    return name.encode()


def as_sse(text: bytes, kind: bytes | None) -> SSEFrame:
    """One socket frame as the SSE event an HTTP client gets for it, made as a frame
    (nothing parses it again): its text, byte for byte, as the ``data`` (a frame with
    line breaks in it takes one ``data:`` line per line; its data then has LF for each,
    as an SSE parser reads it)."""
    data = text
    if b"\n" in text or b"\r" in text:
        data = _LINE_BREAK.sub(b"\n", text)
        text = _LINE_BREAK.sub(b"\ndata: ", text)
    head = b"data: " if kind is None else b"event: " + kind + b"\ndata: "
    return SSEFrame(head + text + b"\n\n", None if kind is None else kind.decode(), data)


@attrs.frozen
class RequestError:
    """A request-level error frame as the HTTP API would have answered it."""

    status: int
    headers: Headers
    body: bytes


def request_error(text: bytes) -> RequestError | None:
    """A frame ``{"type": "error", "status": N, "error": {...}, "headers": {...}}`` as a
    response: status ``N`` (an HTTP error status), the frame's ``headers`` (``retry-after``
    of a 429, say: those that can be HTTP headers) and the body ``{"error": ...}``;
    ``None`` for any other frame."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("type") != "error":
        return None
    status = data.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        return None
    headers: Headers = []
    given = data.get("headers")
    if isinstance(given, dict):
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                continue
            value = str(value)
            if not is_token(name) or value_problem(value) is not None:
                continue
            key = name.lower().encode("latin-1")
            if key not in _NOT_FROM_FRAME:
                headers.append((key, value.encode("latin-1")))
    headers.append(_JSON)
    return RequestError(status, headers, orjson.dumps({"error": data.get("error")}))
