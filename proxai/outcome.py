"""The record every proxied request ends with.

The relay fills one :class:`Outcome` per request; later layers log and count
it. It never holds bodies, prompts or arguments: only what happened, when, and
how much.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import attrs

__all__ = [
    "CLIENT_ENDED",
    "CUT_SHORT",
    "ENDED_WELL",
    "MAX_LISTED",
    "MAX_NAME",
    "MAX_USAGE_DEPTH",
    "RETRYABLE_BEFORE_HEAD",
    "STALLS",
    "STREAM_DEADLINES",
    "TRY_AGAIN",
    "UPSTREAM_CUT_SHORT",
    "WARNINGS",
    "AttemptRecord",
    "CallSummary",
    "Outcome",
    "OutcomeKind",
    "Usage",
    "cap_depth",
    "cut_name",
    "listed",
    "more_entry",
]

#: How many levels of a usage object are kept (real ones have two or three): deeper
#: objects and arrays become ``null``, so nothing that walks the record can run out of
#: stack, and orjson (which refuses more than 254 levels) can always write it.
MAX_USAGE_DEPTH = 8
#: Entries the record keeps of a list a request or a stream can make as long as it likes
#: (``tools``, ``dropped``, ``calls``): 60,000 unknown fields must not make a 600 KB log line.
MAX_LISTED = 32
#: Characters kept of one name in those lists (tool names, field paths, call ids).
MAX_NAME = 128


#: What nests in parsed JSON (a tuple: ``dict | list`` would be built at every test).
_NESTED = (dict, list)


def cut_name(name: str) -> str:
    """``name`` as the record keeps it: at most :data:`MAX_NAME` characters, a cut one ending
    in ``…``."""
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"


def more_entry(count: int) -> str:
    """The last entry of a list that had more than :data:`MAX_LISTED` names."""
    return f"... and {count} more"


def listed(names: Iterable[str]) -> list[str]:
    """``names`` as the record keeps them: all of them when there are at most
    :data:`MAX_LISTED`, else the first ``MAX_LISTED - 1`` and ``"... and K more"``; each cut
    to :data:`MAX_NAME` characters. A list kept so is kept as it is."""
    kept: list[str] = []
    more = 0
    for name in names:
        if len(kept) < MAX_LISTED:
            kept.append(cut_name(name))
        else:
            more += 1
    if more:
        kept[-1] = more_entry(more + 1)
    return kept


class OutcomeKind(enum.StrEnum):
    """How a request ended, from proxai's point of view."""

    COMPLETED = "completed"  # the upstream's response was relayed to its end
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    UPSTREAM_ERROR = "upstream_error"  # the upstream answered non-2xx, relayed as is
    PROXY_ERROR = "proxy_error"  # proxai answered with an error of its own (400, 413, 502, ...)
    UPSTREAM_UNREACHABLE = "upstream_unreachable"  # no connection could be made
    STALLED_FIRST_BYTE = "stalled_first_byte"
    STALLED_IDLE = "stalled_idle"
    STALLED_TOOL_ARGUMENTS = "stalled_tool_arguments"
    TOTAL_TIMEOUT = "total_timeout"
    UPSTREAM_EOF = "upstream_eof"  # the upstream closed before a terminal event
    UPSTREAM_RESET = "upstream_reset"
    UPSTREAM_EVENT_TOO_LARGE = "upstream_event_too_large"  # over server.max_event_bytes
    #: More items open at once than server.max_open_items, or a translated stream holding
    #: more than server.max_event_bytes.
    UPSTREAM_OVER_LIMIT = "upstream_over_limit"
    CLIENT_DISCONNECTED = "client_disconnected"
    CLIENT_STALLED = "client_stalled"  # stopped reading for timeouts.client_write
    REQUEST_BODY_TIMEOUT = "request_body_timeout"  # body not received within timeouts.request_body
    UNAUTHORIZED = "unauthorized"  # no valid client key ([auth])
    #: Refused: ``server.max_concurrent_streams`` in flight in this process, or
    #: ``[limits] fleet_max_concurrent_streams`` across the fleet.
    OVERLOADED = "overloaded"
    SHUTDOWN = "shutdown"  # proxai was shutting down (ended after server.drain_timeout)
    #: Translating the upstream's response failed (a proxai defect, contained): the client
    #: got its API's error.
    TRANSLATION_FAILED = "translation_failed"
    #: The ``[state]`` store did not answer a lookup the request needs (a 503), or
    #: ``[limits]`` could not decide with ``fail_closed = true``.
    STATE_UNAVAILABLE = "state_unavailable"
    #: Refused (429) by a limit of its client key (``[limits]``: ``limited`` says which).
    RATE_LIMITED = "rate_limited"


# What the kinds mean, for the code that acts on them: each set is named for what its
# members share, and every classification of outcomes lives here.

#: The upstream's body ended before its terminal event (its connection's doing).
UPSTREAM_CUT_SHORT = frozenset(
    {
        OutcomeKind.UPSTREAM_EOF,
        OutcomeKind.UPSTREAM_RESET,
        OutcomeKind.UPSTREAM_EVENT_TOO_LARGE,
        OutcomeKind.UPSTREAM_OVER_LIMIT,
    }
)
#: A deadline proxai keeps on a stream after its headers passed.
STREAM_DEADLINES = frozenset(
    {OutcomeKind.STALLED_IDLE, OutcomeKind.STALLED_TOOL_ARGUMENTS, OutcomeKind.TOTAL_TIMEOUT}
)
#: Ends that leave the client's response cut short: proxai says so in the protocol's
#: shape, or answers an HTTP error, or breaks the body.
CUT_SHORT = (
    UPSTREAM_CUT_SHORT
    | STREAM_DEADLINES
    | {OutcomeKind.CLIENT_STALLED, OutcomeKind.SHUTDOWN, OutcomeKind.TRANSLATION_FAILED}
)
#: The upstream's body ended as its protocol ends a response (its terminal event, or for
#: a body no observer knows, its end): what the client got is the upstream's whole answer.
ENDED_WELL = frozenset({OutcomeKind.COMPLETED, OutcomeKind.INCOMPLETE, OutcomeKind.FAILED})
#: Ends a client should simply try again, elsewhere if it can (Anthropic's
#: ``overloaded_error``, which its SDKs retry): proxai gave up waiting, nothing failed.
TRY_AGAIN = STREAM_DEADLINES | {OutcomeKind.SHUTDOWN}
#: Ends by a deadline, the client's own (``client_write``) included: ``proxai_stalls``.
STALLS = STREAM_DEADLINES | {OutcomeKind.STALLED_FIRST_BYTE, OutcomeKind.CLIENT_STALLED}
#: Ends the client brought about (it hung up, or stopped reading): not proxai's failure,
#: nor the upstream's.
CLIENT_ENDED = frozenset({OutcomeKind.CLIENT_DISCONNECTED, OutcomeKind.CLIENT_STALLED})
#: Failures before the response headers that another attempt may not meet.
RETRYABLE_BEFORE_HEAD = frozenset(
    {
        OutcomeKind.UPSTREAM_UNREACHABLE,
        OutcomeKind.STALLED_FIRST_BYTE,
        OutcomeKind.UPSTREAM_RESET,
        OutcomeKind.UPSTREAM_EOF,
    }
)
#: Not the end a request should have, however long it took: logged at warning.
WARNINGS = (
    STALLS
    | UPSTREAM_CUT_SHORT
    | {
        OutcomeKind.UPSTREAM_UNREACHABLE,
        OutcomeKind.SHUTDOWN,
        OutcomeKind.OVERLOADED,
        OutcomeKind.TRANSLATION_FAILED,
    }
)


@attrs.frozen
class CallSummary:
    """A tool call the response streamed: what it was, never what it said."""

    type: str  # function_call, custom_tool_call, mcp_call
    name: str | None
    call_id: str | None
    arguments_length: int  # characters aggregated from the deltas


@attrs.define
class AttemptRecord:
    """One try of one upstream (see :mod:`proxai.policy.retry`)."""

    upstream: str
    started_s: float  # seconds from the request's start
    status: int | None = None  # the upstream's status, when it answered
    kind: OutcomeKind | None = None  # how it failed before answering
    detail: str | None = None
    retry_after: float | None = None  # seconds, from the upstream's Retry-After

    @property
    def result(self) -> str | None:
        """The status it got (``"503"``), or how it failed (``"upstream_reset"``)."""
        if self.status is not None:
            return str(self.status)
        return self.kind.value if self.kind else None


@attrs.frozen
class Usage:
    """The tokens a response reported, in one shape whatever its API: filled by the
    upstream API's reader from that API's own fields (``usage_of`` in
    ``protocols/*/reader.py``), read by ``[limits]``, telemetry, the metrics and the
    request log, none of which knows an API's field names. ``None``: not reported."""

    #: Every input token, those read from or written to a cache included (Anthropic
    #: reports those apart from its ``input_tokens``; they are added in).
    input_tokens: int | None = None
    #: Of the input, those read from the cache.
    cached_tokens: int | None = None
    #: Of the input, those written to the cache (Anthropic's ``cache_creation``).
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    #: Of the output, the reasoning.
    reasoning_tokens: int | None = None
    #: As the API reported it (Anthropic reports none).
    total_tokens: int | None = None

    @property
    def charged(self) -> int | None:
        """What ``tokens_per_minute`` charges: the total where given, else input plus
        output; ``None`` when it names neither."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def counts(self) -> dict[str, int]:
        """The counts reported, by name (the request log's ``usage``, the metrics' kinds)."""
        return {name: n for name, n in attrs.asdict(self).items() if n is not None}


@attrs.define(on_setattr=attrs.setters.NO_OP)
class Outcome:
    """What happened to one request. Times are seconds from the request's start.

    Converters run when a record is made, not on every assignment: the relay counts
    events and bytes into it once per event, and attrs' checked ``__setattr__`` would
    cost a Python call each time. The few lists set later are given through
    :func:`listed` by whoever sets them.
    """

    method: str
    path: str
    kind: OutcomeKind | None = None
    #: ``http``, or ``websocket`` for a response of a client socket (``socket_id``'s).
    transport: str = "http"
    socket_id: str | None = None
    request_id: str | None = None  # also sent to the client and upstream as x-proxai-request-id
    upstream: str | None = None  # the configured upstream's name ("default" for [upstream])
    route: str | None = None  # the [[routes]] entry that matched, if any
    attempts: list[AttemptRecord] = attrs.field(factory=list)  # every upstream try, in order
    #: A retry was due but over the retry budget: the last attempt's failure was the answer.
    retry_refused: bool = False
    status: int | None = None
    detail: str | None = None
    streaming: bool = False
    first_byte_s: float | None = None  # upstream response headers received
    first_event_s: float | None = None  # first complete SSE event received
    total_s: float | None = None
    events: int = 0  # complete SSE events relayed (comments excluded)
    bytes_in: int = 0  # body bytes received from the upstream
    bytes_out: int = 0  # body bytes sent to the client
    model: str | None = None  # as requested
    #: Declared tool names (hosted tools by type), as :func:`listed` keeps them.
    tools: list[str] = attrs.field(factory=list, converter=listed)
    stalled_item: str | None = None  # e.g. "function_call get_weather (call_weather_01)"
    #: The upstream's usage object as it reported it (captures keep it as it was).
    usage: dict[str, Any] | None = None
    #: The same, in one shape whatever the API: what everything that counts tokens reads.
    tokens: Usage | None = None
    #: The upstream's id of its response and the model it names (its stream's first
    #: word of each), and why it stopped (``stop``, ``max_tokens``, ``completed``...),
    #: as :func:`listed` keeps them.
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = attrs.field(factory=list, converter=listed)
    #: The first :data:`MAX_LISTED` tool calls the response streamed...
    calls: list[CallSummary] = attrs.field(factory=list)
    calls_more: int = 0  # ... and how many more it streamed
    #: Whether every aggregate (arguments, text) equalled its ``.done`` value and the
    #: final output; ``None`` when there was nothing to compare.
    aggregates_match: bool | None = None
    anomalies: list[str] = attrs.field(factory=list)  # odd upstream input, forwarded anyway
    #: What proxai could not do for the request and served it without (a response not
    #: stored because the state store did not answer), in proxai's words.
    warnings: list[str] = attrs.field(factory=list)
    #: The id proxai stored the response under (``[state]``), if it did.
    stored_as: str | None = None
    #: The client key's name in ``[limits]`` (its ``name``, or a digest prefix; never the
    #: key), when limits apply to it.
    limit_key: str | None = None
    #: The limit that refused the request (``requests_per_minute``, ``tokens_per_minute``,
    #: ``max_concurrent_streams`` (the key's), ``fleet_max_concurrent_streams``), if one did.
    limited: str | None = None
    #: Tokens charged to the key's ``tokens_per_minute`` window at the request's end.
    charged_tokens: int | None = None
    #: Body bytes received from the client (decoded).
    bytes_request: int = 0
    #: ``responses→chat`` when the request was translated (client API → upstream API).
    translation: str | None = None
    #: Request fields the translation dropped (dotted paths), e.g. ``tools.web_search``, as
    #: :func:`listed` keeps them.
    dropped: list[str] = attrs.field(factory=list, converter=listed)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view (for captures and the demo); ``usage`` at most
        :data:`MAX_USAGE_DEPTH` deep, whoever set it."""
        record = attrs.asdict(attrs.evolve(self, usage=None), value_serializer=_plain)
        record["usage"] = cap_depth(self.usage, MAX_USAGE_DEPTH)[0]
        return record


def _plain(inst: object, field: object, value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def cap_depth(value: Any, depth: int) -> tuple[Any, bool]:
    """A copy of a parsed JSON value whose objects and arrays nest at most ``depth``
    levels (deeper ones become ``None``), and whether any did.

    Iterative: an upstream's JSON can nest a thousand levels, past Python's stack.
    """
    if not isinstance(value, _NESTED):
        return value, False
    if depth < 1:
        return None, True
    capped = False
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    pending: list[tuple[dict[Any, Any] | list[Any], dict[Any, Any] | list[Any], int]] = [
        (value, root, 1)
    ]
    while pending:
        source, copy, level = pending.pop()
        for key, inner in source.items() if isinstance(source, dict) else enumerate(source):
            if isinstance(inner, _NESTED):
                if level < depth:
                    kept: Any = {} if isinstance(inner, dict) else []
                    pending.append((inner, kept, level + 1))
                else:
                    kept, capped = None, True
            else:
                kept = inner
            if isinstance(copy, dict):
                copy[key] = kept
            else:
                copy.append(kept)
    return root, capped
