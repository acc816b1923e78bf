"""One table of the APIs proxai speaks: every difference between protocols, written once.

An :class:`Api` is what proxai knows of one client API: the path its clients
post to (a :class:`PathPattern`, which may hold the model), the SDKs that speak it
(:class:`ClientSdk`: the error JSON they parse and the headers they send a key in),
its request projection, its stream observer and the endpoints proxai answers
itself for it (:class:`LocalAnswer`: count_tokens). An :class:`UpstreamProtocol`
is what an ``[upstreams.NAME] protocol`` speaks: which APIs, the header its key goes
in, the SDKs of the requests that reach it unparsed (``GET /v1/models``), the header
that marks its SDKs' requests and the path prefix its ``base_url`` holds.

Everything else looks protocols up here; adding an API is adding a row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs

from ..config import TimeoutsConfig, UpstreamKind
from ..errors import ErrorShape, ProxyError
from ..outcome import Usage
from .chat.observer import ChatObserver
from .chat.reader import chat_usage
from .chat.request import project_chat
from .messages.count_tokens import count_tokens_body
from .messages.observer import MessagesObserver
from .messages.reader import messages_usage
from .messages.request import project_messages
from .names import WireApi
from .observer import StreamObserver
from .responses import compaction as responses_compaction
from .responses import history as responses_history
from .responses import socket as responses_socket
from .responses.compaction import CompactionAnswer, CompactionForm
from .responses.history import Needs
from .responses.observer import ResponsesObserver
from .responses.reader import responses_usage
from .responses.record import ResponseRecord, is_terminal
from .responses.request import project_responses
from .responses.socket import Conversation, Turn
from .tracking import StreamLimits

__all__ = [
    "ANTHROPIC_SDK",
    "APIS",
    "API_BY_PATH",
    "API_BY_WIRE",
    "CLIENT_KEY_HEADERS",
    "DEFAULT_KIND",
    "OPENAI_SDK",
    "SERVED_PREFIXES",
    "SOCKETS",
    "SOCKET_API",
    "STORED_API",
    "STORED_PATH",
    "STORING",
    "UPSTREAM_PROTOCOLS",
    "Api",
    "ClientSdk",
    "Compaction",
    "CompactionForm",
    "Conversation",
    "LocalAnswer",
    "Needs",
    "PathPattern",
    "Projection",
    "ResponseRecord",
    "Sockets",
    "Storing",
    "Turn",
    "UpstreamProtocol",
    "UsageReader",
    "WireApi",
    "api_for",
    "local_answer_for",
    "upstream_kind_for",
]


class Projection(Protocol):
    """What every typed request projection says (``model``, ``stream``, tool names)."""

    @property
    def model(self) -> str | None: ...

    @property
    def stream(self) -> bool | None: ...

    def tool_names(self) -> list[str]: ...


#: A row's observer builder (not the relay's :data:`~proxai.protocols.observer.ObserverFactory`,
#: which a plan makes of it): the observer of one stream from its upstream's deadlines, the
#: model the request asked for (``None`` for a stream proxai did not see the request of,
#: such as a resumed one), and what one stream may hold. The model, not the projected
#: request: a stream holds its factory for its whole life, and a request's instructions
#: and tools can be tens of KB.
ObserverBuilder = Callable[[TimeoutsConfig, str | None, StreamLimits], StreamObserver]


@attrs.frozen
class UsageReader:
    """Where an API's whole answer reports its usage (``key``, a top-level field), and
    its usage object in proxai's one shape (``read``: its reader's ``usage_of``): what
    reads a whole answer's usage asks the row, never names the field."""

    key: str
    read: Callable[[Mapping[str, Any]], Usage]

    def __call__(self, usage: Mapping[str, Any]) -> Usage:
        return self.read(usage)


CHAT_USAGE = UsageReader("usage", chat_usage)
MESSAGES_USAGE = UsageReader("usage", messages_usage)
RESPONSES_USAGE = UsageReader("usage", responses_usage)


@attrs.frozen
class ClientSdk:
    """What a family of client SDKs expects of proxai."""

    error_shape: ErrorShape
    #: Headers they send a key in besides ``Authorization: Bearer`` (which always counts).
    key_headers: frozenset[bytes]
    #: The header a 401 tells them to send the key in.
    key_header_name: str


OPENAI_SDK = ClientSdk(ErrorShape.OPENAI, frozenset(), "Authorization")
ANTHROPIC_SDK = ClientSdk(ErrorShape.ANTHROPIC, frozenset({b"x-api-key"}), "x-api-key")

#: Headers that carry a client's key for APIs proxai has no row for: they stay at proxai
#: too (an API given a row names its own in its SDK's ``key_headers``).
OTHER_KEY_HEADERS = frozenset(
    {
        b"api-key",  # Azure OpenAI clients
        b"x-goog-api-key",  # Gemini clients
        b"ocp-apim-subscription-key",  # Azure API Management gateways
        b"x-auth-token",  # OpenStack-style gateways
    }
)

#: A path field: ``{model}``. It matches within one segment, as little as it can, so
#: ``/models/{model}:generateContent`` leaves ``:generateContent`` to the literal.
_FIELD = re.compile(r"\{([a-z_]+)\}")


@attrs.frozen
class PathPattern:
    """The path of an API's endpoint: literal text and ``{name}`` fields (Gemini's
    ``/v1beta/models/{model}:generateContent`` holds the model), matched whole."""

    template: str
    _whole: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)
    _under: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        parts = _FIELD.split(self.template)  # literal, field name, literal, ...
        regex = "".join(
            re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+?)" for i, part in enumerate(parts)
        )
        object.__setattr__(self, "_whole", re.compile(regex))
        object.__setattr__(self, "_under", re.compile(regex + "(?:/.*)?", re.DOTALL))

    @property
    def literal(self) -> bool:
        """Whether it holds no field (one path only)."""
        return _FIELD.search(self.template) is None

    def match(self, path: str) -> dict[str, str] | None:
        """The fields of ``path`` if it is this endpoint's (``{}`` for a literal one)."""
        found = self._whole.fullmatch(path)
        return found.groupdict() if found is not None else None

    def holds(self, path: str) -> bool:
        """Whether ``path`` is this endpoint's or one below it (``/v1/messages/count_tokens``
        is below ``/v1/messages``)."""
        return self._under.fullmatch(path) is not None

    def format(self, **fields: str) -> str:
        """The path with its fields filled in (a literal path ignores them)."""
        return _FIELD.sub(lambda field: fields[field.group(1)], self.template)


@attrs.frozen
class LocalAnswer:
    """An endpoint of an API that proxai answers itself when the upstream a request goes
    to does not speak that API (Anthropic's ``count_tokens`` over a Chat upstream)."""

    path: str  # POST here
    #: The answer's JSON from the request's (raises ProxyError for a body it cannot take).
    answer: Callable[[dict[str, Any]], dict[str, Any]]
    #: The outcome record's detail for a request answered so.
    detail: str


@attrs.frozen
class Storing:
    """How an API's responses are kept and named by later requests (Responses':
    ``previous_response_id``, ``item_reference``, retrieve and delete), for upstreams
    that keep none (:mod:`proxai.service.conversations`, :mod:`proxai.service.storing`)."""

    #: A record of one response from its events (``max_bytes``; ``ids_only``).
    record: type[ResponseRecord]
    #: Whether an event's data is its response's last.
    is_terminal: Callable[[bytes], bool]
    #: A new id of a response proxai names itself.
    new_id: Callable[[], str]
    #: What a request body names of earlier responses and items.
    needs: Callable[[Mapping[str, Any]], Needs]
    #: ``(body, *, prior, resolved, keep_previous)`` -> the body to send, its whole input,
    #: and the body as Python objects (for the planner, so that it is not parsed back).
    expand: Callable[..., tuple[dict[str, Any], tuple[bytes, ...], dict[str, Any]]]
    #: The API's errors for what a request names and proxai cannot give it.
    previous_not_found: Callable[[str], ProxyError]
    previous_too_large: Callable[[str, int], ProxyError]
    references_too_large: Callable[[int, int], ProxyError]
    item_not_found: Callable[[int, str], ProxyError]


@attrs.frozen
class Compaction:
    """Where an API's clients ask to compact a conversation (a ``POST`` with its request
    body), and what reads its compaction items. An upstream that speaks the API compacts
    itself and gets them as sent; for one reached through a translation, proxai compacts
    (:mod:`proxai.protocols.responses.compaction`)."""

    path: str
    #: Bytes every compaction item of proxai's holds (a request without them is not parsed).
    mark: bytes
    #: ``(body, *, endpoint)`` -> how the request asks to compact (``None``: it does not).
    form: Callable[..., CompactionForm | None]
    #: ``(body, *, summary_prefix, upstream_compacts)`` -> the body with proxai's items
    #: read (``None``: it holds none).
    expand: Callable[..., dict[str, Any] | None]
    #: ``(body, form, *, prompt, summary_prefix)`` -> the request asking for the summary.
    summarizing_request: Callable[..., tuple[dict[str, Any], CompactionAnswer]]


@attrs.frozen
class Sockets:
    """An API whose requests a WebSocket may carry (``GET`` of its path upgraded: the
    Responses WebSocket mode, :mod:`proxai.protocols.responses.socket`)."""

    #: One socket's turns and what they chain (``max_bytes``).
    conversation: type[Conversation]
    #: A record of one turn's response, which the next turn chains on (``max_bytes``).
    record: type[ResponseRecord]
    #: A client's message as a request frame (``None``: not one).
    read_frame: Callable[[str | bytes], dict[str, Any] | None]
    #: A warm-up's events, answered by proxai: ``(frame, response id, now)``.
    warm_up_events: Callable[[Mapping[str, Any], str, float], list[bytes]]
    #: An error as the socket's frame: ``(status, body, headers)``.
    error_frame: Callable[[int, bytes, Iterable[tuple[bytes, bytes]]], bytes]
    #: The error a socket past its age gets (its seconds).
    limit_reached_error: Callable[[float], ProxyError]
    new_id: Callable[[], str]


RESPONSES_STORING = Storing(
    ResponseRecord,
    is_terminal,
    responses_socket.new_response_id,
    responses_history.needs,
    responses_history.expand,
    responses_history.previous_not_found,
    responses_history.previous_too_large,
    responses_history.references_too_large,
    responses_history.item_not_found,
)
RESPONSES_SOCKETS = Sockets(
    Conversation,
    ResponseRecord,
    responses_socket.read_frame,
    responses_socket.warm_up_events,
    responses_socket.error_frame,
    responses_socket.limit_reached_error,
    responses_socket.new_response_id,
)
RESPONSES_COMPACTION = Compaction(
    "/v1/responses/compact",
    responses_compaction.ENVELOPE_MARK,
    responses_compaction.compaction_form,
    responses_compaction.expand_compactions,
    responses_compaction.summarizing_request,
)


@attrs.frozen
class Api:
    """One client API."""

    wire: WireApi
    #: Its name in messages to people ("Chat Completions").
    title: str
    path: PathPattern  # POST here is a generation request of this API
    sdk: ClientSdk
    #: Parsed JSON body -> typed projection; raises ProxyError (400) naming the bad path.
    project: Callable[[dict[str, Any]], Projection]
    observer: ObserverBuilder
    #: The upstream protocol that speaks it.
    upstream: UpstreamKind
    #: Its usage object (a stream's, a whole answer's) in proxai's one shape.
    usage: UsageReader
    #: GET paths under this prefix stream this API's events (a resumed response).
    resumes_under: str | None = None
    #: Whether its bodies have the ``instructions`` that ``normalize`` passes edit.
    has_instructions: bool = False
    #: Its endpoints proxai answers itself when the upstream does not speak it.
    local_answers: tuple[LocalAnswer, ...] = ()
    #: ``GET`` of its path with ``Upgrade: websocket`` opens a socket of its requests.
    sockets: Sockets | None = None
    #: Its responses are stored and named by later requests.
    storing: Storing | None = None
    #: Its clients compact conversations (its requests can hold compaction items).
    compaction: Compaction | None = None
    #: Its generation requests' ``gen_ai.operation.name`` (OpenTelemetry's GenAI
    #: conventions name Responses, Chat Completions and Messages alike).
    genai_operation: str = "chat"

    @property
    def socket(self) -> bool:
        return self.sockets is not None

    @property
    def stored(self) -> bool:
        return self.storing is not None

    @property
    def compact_path(self) -> str | None:
        return self.compaction.path if self.compaction is not None else None


@attrs.frozen
class UpstreamProtocol:
    """What an upstream configured with ``protocol = kind`` speaks."""

    kind: UpstreamKind
    apis: frozenset[WireApi]
    #: The header proxai's key goes in: ``authorization`` (as a bearer token) or ``x-api-key``.
    key_header: bytes
    #: The SDKs of the requests that reach it unparsed (its own API's SDKs).
    sdk: ClientSdk
    #: The 404's message when a request needs such an upstream and none is configured.
    missing: str
    #: The API a request of another API is translated to for it (``None``: none is).
    translate_to: WireApi | None = None
    #: A header only its SDKs send: a request carrying it, on a path of no API, goes to
    #: such an upstream when one is configured (``anthropic-version``).
    marked_by: bytes | None = None
    #: What proxai's paths start with that its ``base_url`` already ends in: ``/v1/x``
    #: on proxai is ``{base_url}/x`` upstream.
    base_path: bytes = b"/v1"
    #: It keeps stored responses itself: a ``previous_response_id`` proxai does not
    #: know is its to resolve (``store`` true).
    keeps_state: bool = False
    #: It may serve the Responses WebSocket (its ``websocket = true`` says it does).
    websocket: bool = False
    #: Its ``gen_ai.provider.name`` in traces and GenAI metrics: the provider whose API
    #: it speaks (a vLLM behind ``openai_chat`` speaks OpenAI's).
    genai_provider: str = "openai"
    #: The usage of a whole answer on a path of no API (``/v1/embeddings``), in
    #: proxai's one shape: its provider's other endpoints report it so.
    usage: UsageReader = CHAT_USAGE

    def credential(self, key: str) -> tuple[bytes, bytes]:
        """The header carrying ``key`` to this upstream."""
        value = key.encode("latin-1")
        if self.key_header == b"authorization":
            value = b"Bearer " + value
        return self.key_header, value


def _responses_observer(
    timeouts: TimeoutsConfig, model: str | None, limits: StreamLimits
) -> StreamObserver:
    return ResponsesObserver(timeouts, model=model, limits=limits)


APIS: tuple[Api, ...] = (
    Api(
        WireApi.RESPONSES,
        "Responses",
        PathPattern("/v1/responses"),
        OPENAI_SDK,
        project_responses,
        _responses_observer,
        UpstreamKind.OPENAI,
        RESPONSES_USAGE,
        resumes_under="/v1/responses/",
        has_instructions=True,
        sockets=RESPONSES_SOCKETS,
        storing=RESPONSES_STORING,
        compaction=RESPONSES_COMPACTION,
    ),
    Api(
        WireApi.CHAT,
        "Chat Completions",
        PathPattern("/v1/chat/completions"),
        OPENAI_SDK,
        project_chat,
        lambda timeouts, model, limits: ChatObserver(timeouts, limits),
        UpstreamKind.OPENAI,
        CHAT_USAGE,
    ),
    Api(
        WireApi.MESSAGES,
        "Messages",
        PathPattern("/v1/messages"),
        ANTHROPIC_SDK,
        project_messages,
        lambda timeouts, model, limits: MessagesObserver(timeouts, limits),
        UpstreamKind.ANTHROPIC_MESSAGES,
        MESSAGES_USAGE,
        local_answers=(
            LocalAnswer(
                "/v1/messages/count_tokens", count_tokens_body, "count_tokens estimated by proxai"
            ),
        ),
    ),
)
#: The APIs whose path holds no field, by path: found with one dict lookup.
API_BY_PATH = {api.path.template: api for api in APIS if api.path.literal}
#: The API whose responses are stored and named by later requests, and the one whose
#: requests a WebSocket may carry: the rows that say so, so that no module outside the
#: table spells their paths.
STORED_API = next(api for api in APIS if api.storing is not None)
SOCKET_API = next(api for api in APIS if api.sockets is not None)
#: Their features, as the service reaches them (it names no API's module).
assert STORED_API.storing is not None and SOCKET_API.sockets is not None
STORING: Storing = STORED_API.storing
SOCKETS: Sockets = SOCKET_API.sockets
#: Where a stored response lives: ``GET``/``DELETE`` ``{STORED_PATH}/{id}``, and below it.
STORED_PATH = STORED_API.path.template

_OPENAI_MISSING = "no OpenAI-compatible upstream is configured"

UPSTREAM_PROTOCOLS: dict[UpstreamKind, UpstreamProtocol] = {
    UpstreamKind.OPENAI: UpstreamProtocol(
        UpstreamKind.OPENAI,
        frozenset({WireApi.RESPONSES, WireApi.CHAT}),
        b"authorization",
        OPENAI_SDK,
        _OPENAI_MISSING,
        translate_to=WireApi.CHAT,
        keeps_state=True,
        websocket=True,
    ),
    UpstreamKind.OPENAI_CHAT: UpstreamProtocol(
        UpstreamKind.OPENAI_CHAT,
        frozenset({WireApi.CHAT}),
        b"authorization",
        OPENAI_SDK,
        _OPENAI_MISSING,
        translate_to=WireApi.CHAT,
    ),
    UpstreamKind.OPENAI_RESPONSES: UpstreamProtocol(
        UpstreamKind.OPENAI_RESPONSES,
        frozenset({WireApi.RESPONSES}),
        b"authorization",
        OPENAI_SDK,
        _OPENAI_MISSING,
        translate_to=WireApi.RESPONSES,
        keeps_state=True,
        websocket=True,
    ),
    UpstreamKind.ANTHROPIC_MESSAGES: UpstreamProtocol(
        UpstreamKind.ANTHROPIC_MESSAGES,
        frozenset({WireApi.MESSAGES}),
        b"x-api-key",
        ANTHROPIC_SDK,
        "no Anthropic upstream is configured: add an [upstreams.NAME] table with "
        'protocol = "anthropic_messages"',
        translate_to=WireApi.MESSAGES,
        marked_by=b"anthropic-version",
        genai_provider="anthropic",
        usage=MESSAGES_USAGE,
    ),
}
API_BY_WIRE = {api.wire: api for api in APIS}
#: Where a request that names no API goes (``GET /v1/models`` without a mark).
DEFAULT_KIND = UpstreamKind.OPENAI
#: The paths proxai relays: those under an upstream kind's ``base_path``.
SERVED_PREFIXES = tuple(
    sorted({protocol.base_path.decode() for protocol in UPSTREAM_PROTOCOLS.values()})
)

#: Every header a client's key may come in: none of them goes upstream, whether or not
#: proxai has a key of its own (``Authorization`` always counts).
CLIENT_KEY_HEADERS = frozenset(
    {b"authorization"}.union(
        OTHER_KEY_HEADERS,
        *(api.sdk.key_headers for api in APIS),
        *(protocol.sdk.key_headers for protocol in UPSTREAM_PROTOCOLS.values()),
    )
)


def api_for(method: str, path: str) -> Api | None:
    """The API whose stream (or body) a request gets: a generation ``POST`` to its
    path or its compact path, or a ``GET`` resuming one of its streams."""
    if method == "POST":
        api = API_BY_PATH.get(path)
        if api is not None:
            return api
        return next(
            (api for api in APIS if api.path.match(path) is not None or api.compact_path == path),
            None,
        )
    if method == "GET":
        for api in APIS:
            if api.resumes_under is not None and path.startswith(api.resumes_under):
                return api
    return None


def upstream_kind_for(
    path: str, headers: Iterable[tuple[bytes, bytes]], configured: Callable[[UpstreamKind], bool]
) -> UpstreamKind:
    """Which kind of upstream a request goes to: its API's (a path under an API's, such
    as ``/v1/messages/count_tokens``, counts), else the kind whose SDKs' mark it carries
    (Anthropic's send ``anthropic-version``) when one is ``configured``, else
    :data:`DEFAULT_KIND`."""
    for api in APIS:
        if api.path.holds(path):
            return api.upstream
    names = {name for name, _ in headers}
    for protocol in UPSTREAM_PROTOCOLS.values():
        if protocol.marked_by in names and configured(protocol.kind):
            return protocol.kind
    return DEFAULT_KIND


def local_answer_for(method: str, path: str) -> tuple[Api, LocalAnswer] | None:
    """The endpoint proxai may answer itself that a request is for, and its API."""
    if method != "POST":
        return None
    for api in APIS:
        for answer in api.local_answers:
            if answer.path == path:
                return api, answer
    return None
