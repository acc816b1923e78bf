"""The Responses API's WebSocket mode, sans-io: what a client frame asks for, the
socket's conversation, and the frames proxai answers with.

A client socket (``GET /v1/responses`` upgraded) sends ``response.create`` frames,
each the fields of a ``POST /v1/responses`` body; proxai answers each with the
response's stream events, one per text frame, the SSE ``data`` of the event. Over
an upstream that takes each turn as an HTTP request, proxai keeps what the upstream
would have kept for the socket: the last response's whole input and output, so a
turn that names it in ``previous_response_id`` and sends only the new items is
sent upstream self-contained (:meth:`Conversation.turn`). The state is built from
the stream's ``response.output_item.done`` events (:class:`ResponseRecord`), not from
the terminal's ``output``, which may be empty (the seed's is).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import orjson

from ...errors import ProxyError
from .history import expand, needs, previous_not_found
from .record import ResponseRecord

__all__ = [
    "RESPONSE_CREATE",
    "Conversation",
    "Turn",
    "error_frame",
    "limit_reached_error",
    "new_response_id",
    "read_frame",
    "warm_up_events",
]

RESPONSE_CREATE = "response.create"
#: Client frames that get no answer: Codex acknowledges each response it has read.
SILENT_TYPES = frozenset({"response.processed"})
#: Fields of a ``response.create`` that belong to the socket, not to a request body.
_SOCKET_FIELDS = frozenset({"type", "generate", "client_metadata"})
#: The terminal events after which a response's items become the socket's state.
_KEPT_ENDINGS = frozenset({"response.completed", "response.incomplete"})
#: Response headers an error frame repeats (what SDKs and agents pace themselves by).
_FRAME_HEADERS = ("retry-after", "retry-after-ms", "x-request-id", "x-proxai-request-id")
_FRAME_HEADER_PREFIXES = ("x-ratelimit-",)


def new_response_id() -> str:
    """An id proxai gives a response it answers itself (192 random bits)."""
    return "resp_" + secrets.token_hex(24)


def read_frame(text: str | bytes) -> dict[str, Any] | None:
    """A client frame as the fields of its ``response.create``; ``None`` for a frame
    that gets no answer. Raises :class:`ProxyError` (400) for anything else."""
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ProxyError.invalid_request(f"the frame is not valid JSON: {exc}") from None
    if not isinstance(frame, dict):
        raise ProxyError.invalid_request("a frame must be a JSON object with a 'type'")
    kind = frame.get("type")
    if kind in SILENT_TYPES:
        return None
    if kind != RESPONSE_CREATE:
        shown = kind if isinstance(kind, str) else orjson.dumps(kind).decode()
        raise ProxyError.invalid_request(
            f"unknown frame type {shown[:100]!r}: this socket takes '{RESPONSE_CREATE}'",
            param="type",
        )
    if frame.get("background") is True:
        raise ProxyError.invalid_request(
            "background responses are not supported over a WebSocket: "
            "use POST /v1/responses with background: true",
            param="background",
        )
    return frame


def _is_warm_up(frame: Mapping[str, Any]) -> bool:
    return frame.get("generate") is False


@attrs.frozen
class Turn:
    """One ``response.create``, decided before any I/O."""

    #: The ``POST /v1/responses`` body it is sent upstream as (``stream`` true).
    body: bytes
    #: Answered by proxai itself with an empty response (``generate: false``).
    warm_up: bool
    #: Its whole input as JSON items, and the upstream response it follows (when the
    #: upstream holds the start of the conversation): the socket's state after it.
    input_items: tuple[bytes, ...]
    anchor: str | None
    input_bytes: int
    #: Sent to an upstream that keeps state with ``store`` true: it stores the response.
    stored: bool = False


@attrs.define
class Conversation:
    """What one socket keeps: the last response's input and output items.

    Bounded by ``max_bytes`` of item JSON: a response past it is forgotten, and a
    turn that names it gets a 400 saying so (the client sends the whole context).
    """

    max_bytes: int
    last_id: str | None = None
    #: The upstream response the kept items follow (kept by an upstream with state).
    anchor: str | None = None
    items: tuple[bytes, ...] = ()
    size: int = 0
    #: The upstream stored the last response (a later turn may name it there).
    last_stored: bool = False
    #: The last response, when it was too large to keep.
    too_large_id: str | None = None

    def turn(
        self, frame: dict[str, Any], *, upstream_keeps_state: bool, others_resolve: bool = False
    ) -> Turn:
        """The request a frame (from :func:`read_frame`) makes, with the socket's
        conversation expanded into it when it names the last response.

        ``others_resolve``: a ``previous_response_id`` the socket does not hold goes on
        as sent, for proxai's stored responses to resolve (or refuse)."""
        return self.request(
            frame, upstream_keeps_state=upstream_keeps_state, others_resolve=others_resolve
        )[0]

    def request(
        self, frame: dict[str, Any], *, upstream_keeps_state: bool, others_resolve: bool = False
    ) -> tuple[Turn, dict[str, Any]]:
        """:meth:`turn`, and its body as Python objects (the planner's, so that the body
        is not parsed back; apart from the :class:`Turn`, which lasts the whole response,
        so that the objects die with the plan)."""
        previous = needs(frame).previous_id
        warm_up = _is_warm_up(frame)
        # A warm-up never reaches the upstream: its id is proxai's, never the upstream's.
        stored = upstream_keeps_state and frame.get("store") is not False and not warm_up
        kept: tuple[bytes, ...] = ()
        anchor: str | None = None
        if previous is not None and previous == self.last_id and self.last_stored:
            anchor = previous  # the upstream stored it: it resolves the id itself
        elif previous is not None and previous == self.last_id:
            kept, anchor = self.items, self.anchor
        elif previous is not None:
            if previous == self.too_large_id:
                raise previous_not_found(
                    previous,
                    f" It is not kept on this socket: its conversation is larger than "
                    f"{self.max_bytes} bytes (server.websocket_max_state_bytes); send the "
                    "whole context",
                )
            if not stored and not others_resolve:
                raise previous_not_found(previous)
            anchor = previous  # the upstream has it: it resolves the id itself
        fields = {k: v for k, v in frame.items() if k not in _SOCKET_FIELDS}
        body, items, data = expand(fields, prior=kept, keep_previous=anchor)
        body["stream"] = data["stream"] = True
        turn = Turn(orjson.dumps(body), warm_up, items, anchor, sum(len(i) for i in items), stored)
        return turn, data

    def keep(self, turn: Turn, record: ResponseRecord) -> None:
        """After a response: its input and output become the state, if it ended in a
        way a later turn may follow (completed or incomplete); otherwise the state stays
        as it was."""
        if record.response_id is None or record.terminal not in _KEPT_ENDINGS:
            return
        size = turn.input_bytes + record.size
        self.last_id = record.response_id
        self.last_stored = turn.stored
        if record.overflowed or size > self.max_bytes:
            self.items, self.anchor, self.size = (), None, 0
            if turn.stored:  # the upstream has it: a later turn needs none of it here
                self.too_large_id = None
                return
            self.too_large_id, self.last_id = record.response_id, None
            return
        self.too_large_id = None
        self.items = (*turn.input_items, *record.items)
        self.anchor = turn.anchor
        self.size = size

    def forget(self) -> None:
        """Free the state (the socket closed)."""
        self.items, self.anchor, self.size, self.last_id = (), None, 0, None
        self.last_stored = False


def warm_up_events(frame: Mapping[str, Any], response_id: str, now: float) -> list[bytes]:
    """The events of a warm-up (``generate: false``): the response created and
    completed at once, with no output, as OpenAI answers one."""
    created_at = int(now)
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": frame.get("instructions"),
        "model": frame.get("model"),
        "output": [],
        "parallel_tool_calls": frame.get("parallel_tool_calls", True),
        "previous_response_id": frame.get("previous_response_id"),
        "store": frame.get("store", True),
        "tool_choice": frame.get("tool_choice", "auto"),
        "tools": frame.get("tools", []),
        "metadata": frame.get("metadata") or {},
        "usage": None,
    }
    created = {"type": "response.created", "sequence_number": 0, "response": response}
    done = {**response, "status": "completed", "completed_at": created_at}
    done["usage"] = {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }
    completed = {"type": "response.completed", "sequence_number": 1, "response": done}
    return [orjson.dumps(created), orjson.dumps(completed)]


def error_frame(status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A request-level failure as a socket frame: ``{"type": "error", "status",
    "error", "headers"}``. The headers (``retry-after``, ``x-ratelimit-*``) are both at
    the top level, where Codex reads them, and in ``error.headers``, where the openai SDK
    types them."""
    kept: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower().decode("latin-1")
        if lower in _FRAME_HEADERS or lower.startswith(_FRAME_HEADER_PREFIXES):
            kept[lower] = value.decode("latin-1")
    error: dict[str, Any]
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    inner = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(inner, dict):
        error = dict(inner)
    elif isinstance(inner, str):
        error = {"type": "server_error", "message": inner}
    else:
        text = body[:2000].decode("utf-8", "replace") if body else ""
        error = {
            "type": "server_error" if status >= 500 else "invalid_request_error",
            "message": text or f"the request failed with HTTP status {status}",
        }
    error.setdefault("code", None)
    error.setdefault("param", None)
    if kept:
        error["headers"] = kept
    frame: dict[str, Any] = {"type": "error", "status": status, "error": error}
    if kept:
        frame["headers"] = kept
    return orjson.dumps(frame)


def limit_reached_error(seconds: float) -> ProxyError:
    """The error a socket ends with once it has lived ``server.websocket_max_age``."""
    return ProxyError(
        400,
        f"Responses websocket connection limit reached ({seconds:g} seconds). "
        "Create a new websocket connection to continue.",
        "invalid_request_error",
        code="websocket_connection_limit_reached",
    )
