"""The neutral stream every translation goes through: decoders in, encoders out.

A translation pair is an upstream API's *decoder* (its SSE frames or its
whole JSON body in, :data:`Event` s out) and a client API's *encoder*
(events in, the client's SSE bytes or whole JSON body out). Each API has one
of each, so three APIs need three decoders and three encoders, not six
pairwise stream translators.

The events say only what every API can say: a response began, an item
(text, reasoning, refusal, tool call) opened, grew, closed; usage; how the
response finished, or that the upstream failed in-band. Everything here is
sans-io and pure data.
"""

from __future__ import annotations

import enum
import re
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ..outcome import MAX_LISTED, cut_name, more_entry
from ..protocols.names import WireApi
from ..protocols.tracking import TrackingObserver
from ..wire.sse import Frames, SSEFrame

__all__ = [
    "CUSTOM_TOOL_PARAMETER",
    "MAX_TOKEN_COUNT",
    "REASONING_ENVELOPE_PREFIX",
    "THINKING_SIGNATURE",
    "TOOL_ID_ESCAPE",
    "Clock",
    "Decoder",
    "Encoder",
    "Event",
    "Failed",
    "FinishReason",
    "Finished",
    "IdSource",
    "ItemDelta",
    "ItemDone",
    "ItemKind",
    "ItemStarted",
    "Started",
    "StoredAs",
    "TranslationContext",
    "Usage",
    "clamp_count",
    "escape_tool_id",
    "random_token",
    "unescape_tool_id",
    "unwrap_reasoning",
    "wrap_reasoning",
]

#: The one string parameter a ``custom`` (free-form) Responses tool becomes on a Chat
#: upstream: ``{"input": "..."}``; unwrapped back into the call's ``input`` on the way out.
CUSTOM_TOOL_PARAMETER = "input"

#: Reasoning text carried statelessly in a Responses reasoning item's
#: ``encrypted_content`` (proxai stores nothing): this prefix, then the text.
REASONING_ENVELOPE_PREFIX = "proxai-reasoning-v1."


#: The signature of a thinking block proxai made from reasoning that came unsigned (Claude
#: Code drops a thinking block without one). It starts with the envelope prefix, so when the
#: block comes back the request translator restores its text as ``reasoning_content``
#: (DeepSeek-style upstreams want it back). Not Anthropic's signature: a real Anthropic
#: upstream would reject it.
THINKING_SIGNATURE = REASONING_ENVELOPE_PREFIX + "unsigned"


def wrap_reasoning(text: str) -> str:
    """The ``encrypted_content`` that carries ``text`` back to proxai next turn."""
    return REASONING_ENVELOPE_PREFIX + text


def unwrap_reasoning(envelope: str | None) -> str | None:
    """The reasoning text of a envelope proxai wrote, or ``None`` for anything else
    (a real encrypted blob from OpenAI is not ours to read)."""
    if envelope and envelope.startswith(REASONING_ENVELOPE_PREFIX):
        return envelope[len(REASONING_ENVELOPE_PREFIX) :]
    return None


#: Starts a tool-call id proxai escaped for Anthropic, whose API takes only
#: ``^[a-zA-Z0-9_-]+$`` (Kimi K2 names its calls ``functions.get_weather:0``).
TOOL_ID_ESCAPE = "proxai-id-"
#: The characters an id keeps as they are after :data:`TOOL_ID_ESCAPE`; ``-`` starts an escape.
_ID_LITERALS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
_ESCAPED_BYTE = re.compile(r"-([0-9a-f]{2})")


def escape_tool_id(value: str) -> str:
    """A tool-call id Anthropic accepts, which :func:`unescape_tool_id` turns back into
    ``value`` (proxai keeps no table: the next turn may reach another process).

    An id Anthropic accepts stays as it is, unless it starts with :data:`TOOL_ID_ESCAPE`;
    any other becomes the prefix, then the id with each UTF-8 byte of a character
    outside ``[A-Za-z0-9_]`` written ``-xx`` (lowercase hex):
    ``functions.get_weather:0`` -> ``proxai-id-functions-2eget_weather-3a0``.
    """
    if _ANTHROPIC_ID.fullmatch(value) and not value.startswith(TOOL_ID_ESCAPE):
        return value
    out = [TOOL_ID_ESCAPE]
    for char in value:
        if char in _ID_LITERALS:
            out.append(char)
        else:
            out.extend(f"-{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def unescape_tool_id(value: str) -> str:
    """The id :func:`escape_tool_id` made ``value`` from; any id it could not have made
    (the client's own, or not escaped at all) is returned as it is."""
    if not value.startswith(TOOL_ID_ESCAPE):
        return value
    escaped = value[len(TOOL_ID_ESCAPE) :]
    out = bytearray()
    position = 0
    while position < len(escaped):
        char = escaped[position]
        if char in _ID_LITERALS:
            out.append(ord(char))
            position += 1
            continue
        byte = _ESCAPED_BYTE.match(escaped, position)
        if byte is None:
            return value
        out.append(int(byte.group(1), 16))
        position += 3
    try:
        original = out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return value
    # Only what escape_tool_id writes: a plain id that needed no escape is not taken back.
    return original if escape_tool_id(original) == value else value


class ItemKind(enum.StrEnum):
    """What an output item carries."""

    TEXT = "text"  # assistant text (Responses message / output_text, Anthropic text block)
    REFUSAL = "refusal"  # a refusal (Chat ``delta.refusal``, Responses refusal part)
    REASONING = "reasoning"  # reasoning text (reasoning_content, thinking, reasoning_text)
    TOOL_CALL = "tool_call"  # a function call: deltas are its JSON arguments


class FinishReason(enum.StrEnum):
    """Why the model stopped, in neutral terms."""

    STOP = "stop"  # a natural end (Chat stop, Anthropic end_turn, Responses completed)
    STOP_SEQUENCE = "stop_sequence"  # one of the request's stop sequences matched
    TOOL_CALLS = "tool_calls"  # it called tools and waits for their results
    LENGTH = "length"  # the output token limit (max_tokens, max_output_tokens)
    CONTENT_FILTER = "content_filter"  # cut by a content filter / refusal


@attrs.frozen
class Started:
    """The upstream's response began (its first chunk or event)."""

    id: str | None = None  # the upstream's response / completion / message id
    model: str | None = None  # the model the upstream says answered
    created: int | None = None  # unix seconds


@attrs.frozen
class ItemStarted:
    """An output item opened. ``key`` is the decoder's number for it: 0, 1, 2...
    in the order items open, never reused within a response."""

    key: int
    kind: ItemKind
    call_id: str | None = None  # TOOL_CALL: the call's id (synthesized if the upstream gave none)
    name: str | None = None  # TOOL_CALL: the function's name, as the upstream spelled it


@attrs.frozen
class ItemDelta:
    """More of an open item: text, reasoning text, refusal text or argument JSON."""

    key: int
    text: str


@attrs.frozen
class ItemDone:
    """An item closed. Decoders close every item they opened, before
    :class:`Finished`; encoders need nothing else to close it in their API."""

    key: int
    #: REASONING: an opaque signature (Anthropic ``signature_delta``) or envelope, if any.
    signature: str | None = None


#: The largest token count proxai passes on: the largest integer a JSON reader in
#: JavaScript holds exactly. An upstream's count past it (or below 0) is a broken server's,
#: and clamped, so every sum an encoder makes of counts can still be written.
MAX_TOKEN_COUNT = 2**53 - 1


def clamp_count(value: int | None) -> int | None:
    """``value`` within 0 .. :data:`MAX_TOKEN_COUNT` (``None`` stays unreported)."""
    if value is None:
        return None
    return min(max(value, 0), MAX_TOKEN_COUNT)


@attrs.frozen
class Usage:
    """Token counts as far as the upstream reported them (``None``: not reported), each
    clamped to 0 .. :data:`MAX_TOKEN_COUNT`."""

    #: All prompt tokens, cached ones included.
    input_tokens: int | None = attrs.field(default=None, converter=clamp_count)
    #: Reasoning tokens included.
    output_tokens: int | None = attrs.field(default=None, converter=clamp_count)
    #: Of input_tokens, read from a cache.
    cached_tokens: int | None = attrs.field(default=None, converter=clamp_count)
    #: Of output_tokens.
    reasoning_tokens: int | None = attrs.field(default=None, converter=clamp_count)
    #: Anthropic's cache writes, if any.
    cache_creation_tokens: int | None = attrs.field(default=None, converter=clamp_count)


@attrs.frozen
class Finished:
    """The response ended normally. A decoder emits it last, once it has all it
    will get (a Chat decoder waits for the usage chunk or ``[DONE]``)."""

    reason: FinishReason
    stop_sequence: str | None = None


@attrs.frozen
class Failed:
    """The upstream reported an error in-band (an ``error`` chunk or event, a
    ``response.failed``). Last event of a response; open items stay open."""

    message: str
    code: str | None = None  # e.g. "rate_limit_exceeded", "context_length_exceeded"
    #: The error's type in the upstream's words ("server_error", "overloaded_error").
    type: str | None = None


Event = Started | ItemStarted | ItemDelta | ItemDone | Usage | Finished | Failed

#: The time now, in Unix seconds (:func:`time.time` unless a test fixes it).
Clock = Callable[[], float]
#: A fresh token for an id proxai makes up, unique enough that ids never collide
#: (:func:`random_token` unless a test counts them).
IdSource = Callable[[], str]


def random_token() -> str:
    """32 random hex digits, as OpenAI's and Anthropic's own ids end."""
    return uuid.uuid4().hex


@attrs.frozen
class StoredAs:
    """A response proxai stores (``store`` true, an upstream that keeps nothing): the
    id it is stored under, which the client's API's response carries (proxai's own,
    unguessable), and the ``previous_response_id`` it followed (echoed)."""

    response_id: str
    previous_response_id: str | None = None


@attrs.define
class TranslationContext:
    """What translating one request learned from it, for its response's translators.

    Built by the request translator, handed to the decoder and the encoder.
    Mutable only while the request is translated; read-only afterwards.
    """

    client: WireApi
    upstream: WireApi
    stream: bool
    #: The model name the client asked for (echoed back: clients compare it).
    model: str | None = None
    #: Tool names as the upstream sees them -> as the client sent them (names shortened
    #: to fit an upstream's limit come back whole).
    tool_names: dict[str, str] = attrs.field(factory=dict)
    #: Responses ``custom`` tools by name: their calls unwrap ``{"input": ...}``.
    custom_tools: frozenset[str] = frozenset()
    #: The client asked for ``include: ["reasoning.encrypted_content"]``: put reasoning
    #: in the envelope so it can come back next turn.
    reasoning_envelope: bool = False
    #: The client's streamed request asked ``stream_options.include_usage`` (a Chat
    #: client's, as only Chat has it): its encoder sends the usage chunk.
    include_usage: bool = False
    #: Request fields the client API echoes in its response object (Responses:
    #: instructions, tools, tool_choice, parallel_tool_calls, text, reasoning, ...).
    echo: dict[str, Any] = attrs.field(factory=dict)
    #: Request fields dropped on the way (dotted paths), for the outcome record: the first
    #: :data:`~proxai.outcome.MAX_LISTED` - 1 noted, then ``"... and K more"`` (see
    #: :func:`~proxai.outcome.listed`). Filled by :meth:`note_dropped`.
    dropped: list[str] = attrs.field(factory=list)
    #: The time the encoders write (``created``, ``created_at``, ``completed_at``) and the
    #: source of the ids they make up: arguments, as :class:`~proxai.policy.retry.RetryPlan`
    #: takes its rng, so a translation is a function of its input.
    clock: Clock = attrs.field(default=time.time, repr=False, eq=False)
    ids: IdSource = attrs.field(default=random_token, repr=False, eq=False)
    #: Set when proxai stores the response (see :class:`StoredAs`).
    stored: StoredAs | None = None
    #: Every path noted, while the request is translated (each is listed or counted once).
    _dropped_paths: set[str] = attrs.field(factory=set, init=False, repr=False, eq=False)

    def note_dropped(self, path: str) -> None:
        """``path`` of the request was not forwarded: listed or counted, once per path, in
        constant time (a request can have 60,000 fields no upstream reads)."""
        if path in self._dropped_paths:
            return
        self._dropped_paths.add(path)
        count = len(self._dropped_paths)
        if count <= MAX_LISTED:
            self.dropped.append(cut_name(path))
        else:
            self.dropped[MAX_LISTED - 1 :] = [more_entry(count - MAX_LISTED + 1)]

    def translated(self) -> None:
        """The request is translated: let go of what only that needed (the paths noted),
        since the context lives as long as the response."""
        self._dropped_paths = set()

    def now(self) -> int:
        """The time now, in whole Unix seconds (as every API writes it)."""
        return int(self.clock())

    def new_id(self, prefix: str) -> str:
        """A fresh id in an API's style (``msg_...``, ``fc_...``)."""
        return prefix + self.ids()

    def client_tool_name(self, upstream_name: str | None) -> str | None:
        """The client's name for a tool the upstream called."""
        if upstream_name is None:
            return None
        return self.tool_names.get(upstream_name, upstream_name)


class Decoder(Protocol):
    """An upstream API's responses, as neutral events."""

    #: What the decoder saw and left out (other choices, hosted tool items, fragments it
    #: could not place), deduplicated, for the outcome record.
    notes: list[str]

    def follow(self, observer: TrackingObserver) -> None:
        """Read the items of ``observer``'s reader (which reads each frame before the
        decoder is fed it) instead of keeping a reader of its own."""
        ...

    def feed(self, frame: SSEFrame, payload: object = ...) -> list[Event]:
        """Events of one SSE frame of a streamed response (comments give none).
        ``payload``: what the upstream API's reader parsed of its data (see
        :data:`~proxai.protocols.observer.Read`), so the data is not parsed again; by
        default (:data:`~proxai.protocols.observer.UNSEEN`) the decoder's reader reads it."""
        ...

    def close(self) -> list[Event]:
        """The stream ended cleanly: events still held (a Chat stream without a usage
        chunk finishes here). Gives no :class:`Finished` if the stream never said it
        finished: the relay's observer then ends the client's stream with an error."""
        ...

    def decode_body(self, body: dict[str, Any]) -> list[Event]:
        """All events of a whole (non-streamed) response body."""
        ...


class Encoder(Protocol):
    """A client API's stream or body, from neutral events."""

    def feed(self, event: Event) -> Frames:
        """The client's events for ``event``, each framed as it is made (often none)."""
        ...

    def fail(self, message: str, *, code: str | None, try_again: bool) -> Frames:
        """Close the client's stream with its protocol's error, after whatever was
        sent (Responses ``error`` + ``response.failed``, Anthropic ``event: error``,
        Chat an error chunk + ``[DONE]``). ``try_again``: proxai gave up waiting (a
        stall, shutdown), so the client may retry (Anthropic ``overloaded_error``)."""
        ...

    @property
    def finished(self) -> bool:
        """The client's terminal event was sent (by :meth:`feed` or :meth:`fail`)."""
        ...

    def broken(self, message: str, *, code: str) -> Frames:
        """Like :meth:`fail`, after a failure inside the translation (the encoder's own
        included): the client's error, whatever state the failure left the encoder in."""
        ...

    def body(self) -> bytes:
        """The whole response body for a non-streamed request, after every event was fed."""
        ...
