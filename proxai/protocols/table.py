"""One table of the APIs proxai speaks: every difference between protocols, written once.

An :class:`Api` is what proxai knows of one client API: the path its clients
post to, the SDKs that speak it (:class:`ClientSdk`: the error JSON they parse
and the headers they send a key in), its request projection and its stream
observer. An :class:`UpstreamProtocol` is what an ``[upstreams.NAME] protocol``
speaks: which APIs, the header its key goes in, and the SDKs of the requests
that reach it unparsed (``GET /v1/models``).

Everything else looks protocols up here; adding an API is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import attrs

from ..config import Protocol as UpstreamKind
from ..config import TimeoutsConfig
from ..errors import ErrorShape
from .chat.observer import ChatObserver
from .chat.request import project_chat
from .messages.observer import MessagesObserver
from .messages.request import project_messages
from .names import WireApi
from .observer import StreamObserver
from .responses.observer import ResponsesObserver
from .responses.request import project_responses
from .tracking import StreamLimits

__all__ = [
    "ANTHROPIC_SDK",
    "APIS",
    "API_BY_PATH",
    "API_BY_WIRE",
    "OPENAI_SDK",
    "UPSTREAM_PROTOCOLS",
    "Api",
    "ClientSdk",
    "Projection",
    "UpstreamProtocol",
    "WireApi",
    "api_for",
    "upstream_kind_for",
]


class Projection(Protocol):
    """What every typed request projection says (``model``, ``stream``, tool names)."""

    @property
    def model(self) -> str | None: ...

    @property
    def stream(self) -> bool | None: ...

    def tool_names(self) -> list[str]: ...


#: Builds the observer of one stream from its upstream's deadlines, the request (``None``
#: for a stream proxai did not see the request of, such as a resumed one) and what one
#: stream may hold.
ObserverFactory = Callable[[TimeoutsConfig, Projection | None, StreamLimits], StreamObserver]


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


@attrs.frozen
class Api:
    """One client API."""

    wire: WireApi
    path: str  # POST here is a generation request of this API
    sdk: ClientSdk
    #: Parsed JSON body -> typed projection; raises ProxyError (400) naming the bad path.
    project: Callable[[dict[str, Any]], Projection]
    observer: ObserverFactory
    #: The upstream protocol that speaks it.
    upstream: UpstreamKind
    #: GET paths under this prefix stream this API's events (a resumed response).
    resumes_under: str | None = None
    #: Whether its bodies have the ``instructions`` that ``normalize`` passes edit.
    has_instructions: bool = False


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

    def credential(self, key: str) -> tuple[bytes, bytes]:
        """The header carrying ``key`` to this upstream."""
        value = key.encode("latin-1")
        if self.key_header == b"authorization":
            value = b"Bearer " + value
        return self.key_header, value


def _responses_observer(
    timeouts: TimeoutsConfig, request: Projection | None, limits: StreamLimits
) -> StreamObserver:
    return ResponsesObserver(timeouts, model=request.model if request else None, limits=limits)


APIS: tuple[Api, ...] = (
    Api(
        WireApi.RESPONSES,
        "/v1/responses",
        OPENAI_SDK,
        project_responses,
        _responses_observer,
        UpstreamKind.OPENAI,
        resumes_under="/v1/responses/",
        has_instructions=True,
    ),
    Api(
        WireApi.CHAT,
        "/v1/chat/completions",
        OPENAI_SDK,
        project_chat,
        lambda timeouts, request, limits: ChatObserver(timeouts, limits),
        UpstreamKind.OPENAI,
    ),
    Api(
        WireApi.MESSAGES,
        "/v1/messages",
        ANTHROPIC_SDK,
        project_messages,
        lambda timeouts, request, limits: MessagesObserver(timeouts, limits),
        UpstreamKind.ANTHROPIC_MESSAGES,
    ),
)
API_BY_PATH = {api.path: api for api in APIS}

_OPENAI_MISSING = "no OpenAI-compatible upstream is configured"

UPSTREAM_PROTOCOLS: dict[UpstreamKind, UpstreamProtocol] = {
    UpstreamKind.OPENAI: UpstreamProtocol(
        UpstreamKind.OPENAI,
        frozenset({WireApi.RESPONSES, WireApi.CHAT}),
        b"authorization",
        OPENAI_SDK,
        _OPENAI_MISSING,
        translate_to=WireApi.CHAT,
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
    ),
    UpstreamKind.ANTHROPIC_MESSAGES: UpstreamProtocol(
        UpstreamKind.ANTHROPIC_MESSAGES,
        frozenset({WireApi.MESSAGES}),
        b"x-api-key",
        ANTHROPIC_SDK,
        "no Anthropic upstream is configured: add an [upstreams.NAME] table with "
        'protocol = "anthropic_messages"',
        translate_to=WireApi.MESSAGES,
    ),
}
API_BY_WIRE = {api.wire: api for api in APIS}


def api_for(method: str, path: str) -> Api | None:
    """The API whose stream (or body) a request gets: a generation ``POST`` to its
    path, or a ``GET`` resuming one of its streams."""
    if method == "POST":
        return API_BY_PATH.get(path)
    if method == "GET":
        for api in APIS:
            if api.resumes_under is not None and path.startswith(api.resumes_under):
                return api
    return None


def upstream_kind_for(
    path: str, headers: Iterable[tuple[bytes, bytes]], configured: Callable[[UpstreamKind], bool]
) -> UpstreamKind:
    """Which kind of upstream a request goes to: its API's (a path under an API's, such
    as ``/v1/messages/count_tokens``, counts), else Anthropic for a request an
    Anthropic SDK makes (it sends ``anthropic-version``) when one is ``configured``,
    else OpenAI-compatible."""
    for api in APIS:
        if path == api.path or path.startswith(api.path + "/"):
            return api.upstream
    anthropic = UpstreamKind.ANTHROPIC_MESSAGES
    if any(name == b"anthropic-version" for name, _ in headers) and configured(anthropic):
        return anthropic
    return UpstreamKind.OPENAI
