"""Planning one request: its head, its body and the config in; a plan out; no I/O.

:func:`read_head` says what a request is (its API, the kind of upstream it goes to,
the error shape it is answered in). :meth:`Planner.prepare` checks and projects its
body, parsed once; :meth:`Planner.plan` routes it and says what each upstream of the
route is sent (the client's bytes, rewritten by a normalize pass or a model rewrite,
or translated into the upstream's API), or that proxai answers it itself (a
:class:`~proxai.protocols.table.LocalAnswer`). The app carries a plan out; tests
check one without an app.

The body is parsed once, in :meth:`Planner.prepare` (or by the carrier: a socket's
frame), and a body the state step expanded comes with its parse
(:meth:`Planner.prepare` takes it). The upstreams share that parse: the rewrites of a
native upstream replace top-level fields of a shallow copy, and a translator builds a
new request from the client's without changing it. A request is routed once
(:class:`Routing`), and its path matched against the stored responses' once
(:attr:`Incoming.stored`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..config import Config, TimeoutsConfig, UpstreamConfig, UpstreamKind
from ..errors import ProxyError
from ..policy.normalize import normalize_body
from ..policy.routes import Route, Router
from ..protocols.observer import ObserverFactory, StreamObserver, pass_through
from ..protocols.table import (
    API_BY_WIRE,
    STORED_PATH,
    UPSTREAM_PROTOCOLS,
    Api,
    ClientSdk,
    Compaction,
    CompactionForm,
    LocalAnswer,
    ObserverBuilder,
    UsageReader,
    api_for,
    local_answer_for,
    upstream_kind_for,
)
from ..protocols.tracking import StreamLimits
from ..translate.ir import StoredAs
from ..translate.pairs import translate, upstream_api
from ..translate.reasoning_envelopes import carries_proxai_reasoning, strip_proxai_reasoning
from ..wire.headers import Headers
from ..wire.json_body import dumps_kept, load_json_object
from ..wire.json_values import json_object_or_none

if TYPE_CHECKING:
    from ..translate.stream import TranslatorFactory

__all__ = [
    "Incoming",
    "LocalPlan",
    "Plan",
    "Planner",
    "Prepared",
    "Routing",
    "StoredRef",
    "TargetPlan",
    "read_head",
]

#: proxai's id of a request: returned to the client, sent upstream, in every record.
REQUEST_ID_HEADER = b"x-proxai-request-id"
_STORED_REF = re.compile(re.escape(STORED_PATH) + r"/(resp_[A-Za-z0-9_-]{1,200})(/input_items)?")


@attrs.frozen
class StoredRef:
    """A ``GET`` or ``DELETE`` of ``/v1/responses/{id}`` or ``.../{id}/input_items``: a
    response proxai may have stored (matched once, when the head is read)."""

    response_id: str
    #: ``/input_items``: the list of its input items.
    listing: bool


def stored_ref(method: str, route_path: str) -> StoredRef | None:
    """What a request's path says of a stored response (``None``: not about one)."""
    if method not in ("GET", "DELETE"):
        return None
    match = _STORED_REF.fullmatch(route_path)
    if match is None:
        return None
    return StoredRef(match.group(1), match.group(2) is not None)


@attrs.frozen
class Incoming:
    """A client's request as proxai first sees it, before its body."""

    method: str
    path: str  # decoded
    raw_path: bytes  # as the client encoded it
    #: The path an upstream would see after normalizing it ("/v1//responses/" is
    #: /v1/responses): routes match it, so no spelling skips the observers.
    route_path: str
    query: bytes
    #: The client's headers minus its own x-proxai-request-id, plus proxai's.
    headers: Headers
    request_id: str
    #: The kind of upstream it goes to.
    kind: UpstreamKind
    #: The API whose stream or body it gets (``None``: relayed without an observer).
    api: Api | None
    #: The SDKs of its client: the error shape proxai answers in, where keys come.
    sdk: ClientSdk
    http2: bool
    #: The endpoint proxai may answer itself it is for (count_tokens), with its API.
    local: tuple[Api, LocalAnswer] | None = None
    #: The fields its API's path pattern holds (``{"model": ...}`` for a path with the
    #: model in it).
    path_fields: Mapping[str, str] = attrs.field(factory=dict)
    #: The response it retrieves, lists or deletes (``None``: none).
    stored: StoredRef | None = None

    def native(self, kind: UpstreamKind) -> bool:
        """An upstream of ``kind`` takes this request as it is."""
        if self.api is None:
            return UPSTREAM_PROTOCOLS[kind].sdk is self.sdk
        return self.api.wire in UPSTREAM_PROTOCOLS[kind].apis

    def serves(self, kind: UpstreamKind) -> bool:
        """An upstream of ``kind`` can take this request, translated if need be (only a
        generation ``POST`` is; a resumed stream or another path is not)."""
        if self.local is not None:
            # Answered by proxai for an upstream that does not speak its API.
            return upstream_api(kind, self.local[0].wire) is not None
        if self.api is None or self.method != "POST":
            return self.native(kind)
        return upstream_api(kind, self.api.wire) is not None

    @property
    def missing(self) -> str:
        """The 404's message when no upstream can take it."""
        return UPSTREAM_PROTOCOLS[self.kind].missing

    @property
    def id_header(self) -> list[tuple[bytes, bytes]]:
        return [(REQUEST_ID_HEADER, self.request_id.encode())]


def read_head(
    method: str,
    path: str,
    raw_path: bytes,
    query: bytes,
    client_headers: Sequence[tuple[bytes, bytes]],
    *,
    request_id: str,
    http2: bool,
    configured: Callable[[UpstreamKind], bool],
) -> Incoming:
    """What a request is, from its head (``configured``: whether an upstream of a kind
    is)."""
    # The client's own x-proxai-request-id is replaced: ids are proxai's.
    headers: Headers = [(n, v) for n, v in client_headers if n != REQUEST_ID_HEADER]
    headers.append((REQUEST_ID_HEADER, request_id.encode()))
    # Before any "#", so that a target check_target refuses is refused in its API's shape.
    route_path = "/" + "/".join(part for part in path.partition("#")[0].split("/") if part)
    kind = upstream_kind_for(route_path, headers, configured)
    api = api_for(method, route_path)
    return Incoming(
        method=method,
        path=path,
        raw_path=raw_path,
        route_path=route_path,
        query=query,
        headers=headers,
        request_id=request_id,
        kind=kind,
        api=api,
        sdk=api.sdk if api is not None else UPSTREAM_PROTOCOLS[kind].sdk,
        http2=http2,
        local=local_answer_for(method, route_path),
        path_fields=(api.path.match(route_path) or {}) if api is not None else {},
        stored=stored_ref(method, route_path),
    )


@attrs.frozen
class Observing:
    """An answer's :data:`~proxai.protocols.observer.ObserverFactory`: its API's builder
    with the request's model and what one stream may hold (a record, not a closure over
    the projected request, which a stream would keep for its whole life)."""

    build: ObserverBuilder
    model: str | None
    limits: StreamLimits

    def __call__(self, timeouts: TimeoutsConfig) -> StreamObserver:
        return self.build(timeouts, self.model, self.limits)


@attrs.frozen
class Prepared:
    """What the body of a request says about how to route and observe it."""

    data: dict[str, Any] | None  # the parsed body, when it is a JSON object
    model: str | None
    observer_factory: ObserverFactory
    streaming: bool  # whether first_byte applies
    #: The tools the request offers, for its outcome record (``None``: not projected).
    tools: list[str] | None = None
    #: It asks to compact the conversation (and how).
    compaction: CompactionForm | None = None


@attrs.frozen
class TargetPlan:
    """What one upstream of the route is sent, and how its answer is read."""

    body: bytes
    observer_factory: ObserverFactory
    #: The path and query it is sent to, when not the client's (a translated request).
    raw_path: bytes | None = None
    query: bytes | None = None
    #: Builds the translator of its answer into the client's API (``None``: native).
    translator: TranslatorFactory | None = None
    #: Request fields left out of ``body`` (proxai's reasoning envelopes).
    dropped: Sequence[str] = ()
    #: Reads a whole answer's usage (the answer's API's row says how).
    usage: UsageReader | None = None


@attrs.frozen
class LocalPlan:
    """A request proxai answers itself: the endpoint, and the request it answers."""

    answer: LocalAnswer
    request: dict[str, Any]

    def body(self) -> bytes:
        """The answer's JSON (raises ProxyError for a request it cannot take)."""
        return orjson.dumps(self.answer.answer(self.request))


@attrs.frozen
class Plan:
    """Everything decided about a request before any I/O."""

    route: Route
    #: Each upstream of the route by name, in the route's order (empty when answered
    #: locally).
    targets: Mapping[str, TargetPlan]
    first_byte_applies: bool
    local: LocalPlan | None = None


class Routing:
    """One request's route, decided once: each model asked for is routed once, and a
    404 is kept and raised again (the state step asks before the plan, a socket's turn
    before both, and all of them get the same answer)."""

    __slots__ = ("_decided", "_incoming", "_planner")

    def __init__(self, planner: Planner, incoming: Incoming) -> None:
        self._planner = planner
        self._incoming = incoming
        self._decided: dict[str | None, Route | ProxyError] = {}

    def route(self, model: str | None) -> Route:
        """The route for ``model``; raises the 404 when none can take the request."""
        decided = self._decided.get(model)
        if decided is None:
            try:
                decided = self._planner.route(self._incoming, model)
            except ProxyError as exc:
                decided = exc
            self._decided[model] = decided
        if isinstance(decided, ProxyError):
            raise decided
        return decided


class Planner:
    """Plans requests for one validated :class:`~proxai.config.Config`."""

    def __init__(self, config: Config) -> None:
        self.router = Router(config)
        self._upstreams: dict[str, UpstreamConfig] = dict(config.all_upstreams())
        self._compaction = config.compaction
        #: What one stream may hold (a translated one ends past max_event_bytes held).
        self._limits = StreamLimits(
            max_open_items=config.server.max_open_items, max_kept=config.server.max_event_bytes
        )

    def route(self, incoming: Incoming, model: str | None) -> Route:
        """The request's route; raises the 404 that says what is missing when no
        upstream can take it."""
        return self.router.route_for(
            model, native=incoming.native, serves=incoming.serves, missing=incoming.missing
        )

    def routing(self, incoming: Incoming) -> Routing:
        """The request's :class:`Routing`: routed once however often it is asked."""
        return Routing(self, incoming)

    def check_served(self, incoming: Incoming) -> None:
        """Raise the 404 that says what is missing when no upstream can take the request
        (before its body is read; it routes nothing)."""
        self.router.check_served(
            native=incoming.native, serves=incoming.serves, missing=incoming.missing
        )

    def prepare(
        self, incoming: Incoming, body: bytes, data: dict[str, Any] | None = None
    ) -> Prepared:
        """Check and project the body of a generation request (raises ProxyError, 400);
        pick its observer.

        Says which model the request is for (routes match it), how to build the
        observer for an event-stream answer, and whether ``first_byte`` applies: to
        requests that ask for a stream or carry no body, not to a generation that
        answers only once it is whole. ``data``: the body already parsed (a socket's
        frame, a body the state step expanded), not parsed again.
        """
        api = incoming.api
        limits = self._limits
        if api is not None and incoming.method == "GET":
            # A resumed stream (GET /v1/responses/{id}?stream=true): no request to project.
            return Prepared(None, None, Observing(api.observer, None, limits), True)
        if api is None:
            data = data if data is not None else _json_object_or_none(body)
            model = data.get("model") if data is not None else None
            streaming = not body or (data is not None and data.get("stream") is True)
            return Prepared(
                data, model if isinstance(model, str) else None, pass_through, streaming
            )
        if data is None:
            data = load_json_object(body)
        projection = api.project(data)
        compaction = None
        if api.compaction is not None:
            endpoint = incoming.route_path == api.compaction.path
            compaction = api.compaction.form(data, endpoint=endpoint)
        return Prepared(
            data,
            # A path that holds the model names it (the body then does not).
            incoming.path_fields.get("model", projection.model),
            Observing(api.observer, projection.model, limits),
            projection.stream is True,
            projection.tool_names(),
            compaction,
        )

    def plan(
        self,
        incoming: Incoming,
        body: bytes,
        prepared: Prepared,
        stored: StoredAs | None = None,
        *,
        routing: Routing | None = None,
    ) -> Plan:
        """Route a prepared request and say what each upstream of its route is sent;
        raises ProxyError (404 without a route, 400 for what cannot be translated).
        ``stored``: proxai stores the response (a translated one carries its id);
        ``routing``: the request's, when it was routed before."""
        routing = routing or self.routing(incoming)
        route = routing.route(prepared.model)
        if incoming.local is not None:
            api, answer = incoming.local
            first = self._upstreams[route.upstreams[0]]
            if api.wire not in UPSTREAM_PROTOCOLS[first.protocol].apis:
                request = prepared.data if prepared.data is not None else {}
                return Plan(route, {}, prepared.streaming, LocalPlan(answer, request))
        targets = {
            name: self._target(self._upstreams[name], body, incoming, prepared, route, stored)
            for name in dict.fromkeys(route.upstreams)
        }
        return Plan(route, targets, prepared.streaming)

    def _target(
        self,
        upstream: UpstreamConfig,
        body: bytes,
        incoming: Incoming,
        prepared: Prepared,
        route: Route,
        stored: StoredAs | None = None,
    ) -> TargetPlan:
        """What one upstream of the route gets: the client's request, rewritten where a
        normalize pass or a model rewrite applies, or translated into its API."""
        api = incoming.api
        wire = upstream_api(upstream.protocol, api.wire) if api is not None else None
        data = prepared.data
        if api is None or wire is None or wire is api.wire or data is None:
            if data is not None and api is not None and api.compaction is not None:
                data, body = self._own_compactions(api.compaction, data, body)
            sent, dropped = _body_for(upstream, body, api, data, route.upstream_model)
            usage = api.usage if api is not None else UPSTREAM_PROTOCOLS[upstream.protocol].usage
            return TargetPlan(sent, prepared.observer_factory, dropped=dropped, usage=usage)
        if route.upstream_model is not None:
            data = {**data, "model": route.upstream_model}
        compaction = None
        if api.compaction is not None:
            # An upstream reached through a translation compacts nothing: proxai asks it
            # for a summary, and reads back the compactions it made from one.
            options = self._compaction
            if prepared.compaction is not None:
                data, compaction = api.compaction.summarizing_request(
                    data,
                    prepared.compaction,
                    prompt=options.prompt,
                    summary_prefix=options.summary_prefix,
                )
                stored = None
            elif b'"compaction' in body:
                data = (
                    api.compaction.expand(
                        data, summary_prefix=options.summary_prefix, upstream_compacts=False
                    )
                    or data
                )
        translated = translate(
            api.wire, wire, data, upstream.translation, stored=stored, compaction=compaction
        )
        target = API_BY_WIRE[wire]
        limits = attrs.evolve(self._limits, end_past_kept=True)
        client_body = data
        return TargetPlan(
            dumps_kept(translated.body, client_body=lambda: client_body),
            Observing(target.observer, None, limits),
            raw_path=target.path.format(model=data.get("model") or "").encode(),
            query=b"",
            translator=translated.translator(),
            usage=target.usage,
        )

    def _own_compactions(
        self, feature: Compaction, data: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes]:
        """A request for an upstream that takes it natively, with proxai's own compaction
        items as their summaries (only proxai reads them; the upstream's own stay)."""
        if feature.mark not in body:
            return data, body
        expanded = feature.expand(
            data, summary_prefix=self._compaction.summary_prefix, upstream_compacts=True
        )
        if expanded is None:
            return data, body
        return expanded, orjson.dumps(expanded)


def _body_for(
    upstream: UpstreamConfig,
    body: bytes,
    api: Api | None,
    data: dict[str, Any] | None,
    upstream_model: str | None,
) -> tuple[bytes, list[str]]:
    """The body one upstream gets: the client's bytes unless a rewrite applies; and the
    request fields dropped on the way (proxai's own reasoning envelopes)."""
    passes = upstream.normalize
    instructions = api is not None and api.has_instructions
    wire = api.wire if api is not None else None
    envelopes = carries_proxai_reasoning(body, wire)
    if data is None or (
        upstream_model is None
        and not envelopes
        and not (instructions and passes.system_to_instructions)
    ):
        return body, []
    # A shallow copy: each upstream's rewrites are its own, and every rewrite replaces
    # top-level fields (it never edits the lists or objects they hold).
    data = dict(data)
    dropped = strip_proxai_reasoning(data, wire) if envelopes else []
    sent = normalize_body(
        body,
        data,
        passes,
        responses=instructions,
        upstream_model=upstream_model,
        edited=bool(dropped),
    )
    return sent, dropped


def _json_object_or_none(body: bytes) -> dict[str, Any] | None:
    """A body on another route, parsed if it is a JSON object (for its model and stream);
    a body that does not start like one is not parsed at all."""
    return json_object_or_none(body) if body.lstrip().startswith(b"{") else None
