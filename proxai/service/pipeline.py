"""An admitted request's way through proxai, the same for both carriers: plan once, then
run.

The HTTP endpoint (:mod:`proxai.service.http_endpoint`) and a socket's turn
(:mod:`proxai.service.socket_endpoint`) are its two entries: each has read the head
(:mod:`proxai.service.intake`), admitted it (:mod:`proxai.service.admission`) and
holds its body, and hands :meth:`Pipeline.run` a :class:`Request` and the
:class:`~proxai.relay.writer.Downstream` its answer goes to. What is decided about a
request is decided once and passed along: its tenant (the admission's), its route
(:class:`~proxai.service.plan.Routing`, which the state step and the plan share), its
body's parse (the carrier's or :meth:`~proxai.service.plan.Planner.prepare`'s, and the
state step hands over the objects of a body it expanded), its stored-response path
(:attr:`~proxai.service.plan.Incoming.stored`).

The run: a response proxai stored is answered from the store; otherwise the request is
prepared, its conversation state resolved (:mod:`proxai.service.conversations`),
planned (:mod:`proxai.service.plan`), and carried out by a
:class:`~proxai.relay.relay.Relay` over an :class:`~proxai.relay.exchange.Exchange`,
storing the answer on its way when the state step says so
(:mod:`proxai.service.storing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..config import Config, UpstreamConfig
from ..errors import ProxyError
from ..ops.capture import Capture
from ..ops.genai import RequestFacts
from ..ops.metrics import Metrics
from ..outcome import Outcome, OutcomeKind, listed
from ..policy.retry import RetryPlan
from ..protocols.table import UPSTREAM_PROTOCOLS
from ..relay.exchange import Exchange, ProxiedRequest, UpstreamTarget
from ..relay.relay import Relay
from ..relay.writer import Downstream
from ..state import StateStore
from ..upstream.client import Upstream, UpstreamClient
from ..upstream.websocket import StreamOpener, UpstreamSocket
from ..wire.query import query_for_upstream
from .conversations import Conversations, StatePlan, parse_query
from .gate import Gate
from .local import send_local_answer
from .plan import Incoming, Plan, Planner, Prepared, Routing
from .storing import storing_downstream

if TYPE_CHECKING:
    from ..ops.telemetry import RequestTrace

__all__ = ["Body", "Pipeline", "Request"]


@attrs.define(eq=False)
class Request:
    """An admitted request, with what its admission and intake decided."""

    incoming: Incoming
    #: Whose it is (:func:`~proxai.policy.auth.tenant_of`, computed at admission).
    tenant: str
    outcome: Outcome
    routing: Routing
    capture: Capture | None = None
    trace: RequestTrace | None = None


@attrs.define(eq=False)
class Body:
    """A request's body: its bytes, and their parse when the carrier made it (a
    socket's frame). The parse is handed over once (:meth:`take`): the plan reads it
    and drops it, so that no caller holds the objects through a long stream."""

    raw: bytes
    parsed: dict[str, Any] | None = attrs.field(default=None, repr=False)

    def take(self) -> dict[str, Any] | None:
        parsed, self.parsed = self.parsed, None
        return parsed

    def handed_over(self) -> Body:
        """This body as a new record, this one left empty: what its carrier's frame
        still holds while the request is relayed is nothing."""
        body = Body(self.raw, self.take())
        self.raw = b""
        return body


class Pipeline:
    """Plans and runs admitted requests for one proxai; its upstream clients and stored
    responses are set from startup to shutdown."""

    def __init__(
        self,
        config: Config,
        planner: Planner,
        gate: Gate,
        *,
        metrics: Metrics | None,
        socket_opener: StreamOpener | None,
    ) -> None:
        self.config = config
        self._planner = planner
        #: Each exchange's retry admission (the retry budget).
        self._gate = gate
        self._metrics = metrics
        #: How upstream WebSockets connect (``None``: TCP; tests connect in memory).
        self._socket_opener = socket_opener
        #: The upstream clients by upstream name (empty: not started, or stopped).
        self.clients: dict[str, UpstreamClient] = {}
        #: The stored responses (``[state]``).
        self.conversations: Conversations | None = None
        #: The relays running (the live view's streams, the drain's to stop).
        self.relays: set[Relay] = set()

    def request(
        self,
        incoming: Incoming,
        tenant: str,
        outcome: Outcome,
        *,
        capture: Capture | None = None,
        trace: RequestTrace | None = None,
    ) -> Request:
        return Request(incoming, tenant, outcome, self._planner.routing(incoming), capture, trace)

    def check_served(self, incoming: Incoming) -> None:
        """Raise the 404 that says what is missing when no upstream can take the request,
        before its body is read (a response proxai may have stored is its own to answer)."""
        if incoming.stored is None:
            self._planner.check_served(incoming)

    @property
    def state_store(self) -> StateStore | None:
        return self.conversations.store if self.conversations is not None else None

    @property
    def stores_responses(self) -> bool:
        """Whether proxai keeps stored responses (a socket's turn naming a response the
        socket does not hold is then resolved, or refused, by them)."""
        return self.conversations is not None

    def upstream(self, name: str) -> UpstreamConfig:
        upstream = self.config.upstream_named(name)
        assert upstream is not None  # routes name configured upstreams only
        return upstream

    def upstream_socket(self, name: str) -> UpstreamSocket:
        """A new upstream WebSocket to ``name`` (a ``websocket = true`` upstream), for
        one client socket: it connects on its first response and is closed with it."""
        upstream = self.upstream(name)
        assert upstream.websocket
        return UpstreamSocket(
            upstream,
            self.config.timeouts_for(name),
            name=name,
            max_message_bytes=self.config.server.max_event_bytes,
            open_stream=self._socket_opener,
        )

    async def run(
        self,
        request: Request,
        body: Body,
        downstream: Downstream,
        clients: Mapping[str, Upstream] | None = None,
    ) -> None:
        """Plan a request whose body is in and relay it (raises ProxyError); a socket's
        turn comes with its own ``clients`` for the upstreams it holds a socket to."""
        incoming, outcome = request.incoming, request.outcome
        outcome.bytes_request = len(body.raw)
        if await self._answer_stored(request, downstream):
            return
        if self.conversations is not None:
            await self.conversations.guard_path(
                incoming.method, incoming.route_path, tenant=request.tenant
            )
        planned = await self._exchange(request, body, downstream, clients or {})
        del body  # the exchange has what each upstream is sent
        if planned is None:
            return
        exchange, state = planned
        del planned
        if state is not None:
            state = state.planned()
        if state is not None and self.conversations is not None:
            downstream = storing_downstream(self.conversations, state, downstream, outcome)
        on_attempt = self._metrics.attempt if self._metrics is not None else None
        relay = Relay(
            exchange,
            downstream,
            outcome,
            tap=request.capture,
            on_attempt=on_attempt,
            trace=request.trace,
        )
        del exchange  # the relay lets go of it once the upstream answers
        self.relays.add(relay)
        try:
            await relay.run()
        finally:
            self.relays.discard(relay)

    async def _exchange(
        self,
        request: Request,
        body: Body,
        downstream: Downstream,
        clients: Mapping[str, Upstream],
    ) -> tuple[Exchange, StatePlan | None] | None:
        """Plan the request and make its :class:`Exchange` (``None``: proxai answered it
        itself). The parsed body dies here: a long stream keeps only the bytes each
        upstream is sent, not the client's request as Python objects."""
        incoming, outcome, planner = request.incoming, request.outcome, self._planner
        raw = body.raw
        prepared = planner.prepare(incoming, raw, body.take())
        if prepared.tools is not None:
            outcome.model, outcome.tools = prepared.model, listed(prepared.tools)
        if request.trace is not None:
            request.trace.facts = RequestFacts.of_body(
                outcome.method, self._operation(incoming), prepared.data
            )
        state, expanded = await self._state_plan(request, raw, prepared)
        if state is not None:
            outcome.warnings.extend(state.warnings)
        if state is not None and state.body is not raw:
            raw = state.body
            prepared = planner.prepare(incoming, raw, expanded)
        del expanded
        stored = state.stored if state is not None else None
        plan = planner.plan(incoming, raw, prepared, stored, routing=request.routing)
        outcome.route = plan.route.name
        if plan.local is not None:
            await send_local_answer(plan.local, downstream, outcome, incoming.id_header)
            return None
        return self._exchange_of(incoming, plan, clients), state

    def _stateful(self, incoming: Incoming) -> bool:
        api = incoming.api
        return (
            self.conversations is not None
            and api is not None
            and api.stored
            and incoming.method == "POST"
            and incoming.route_path in (api.path.template, api.compact_path)
        )

    async def _state_plan(
        self, request: Request, body: bytes, prepared: Prepared
    ) -> tuple[StatePlan | None, dict[str, Any] | None]:
        """The state step of a ``POST /v1/responses`` or ``/v1/responses/compact``
        (``None``: not one), and the expanded body's objects. A compaction reads what it
        names and stores nothing."""
        if not self._stateful(request.incoming) or prepared.data is None:
            return None, None
        assert self.conversations is not None
        return await self.conversations.prepare(
            body,
            prepared.data,
            tenant=request.tenant,
            upstream_keeps_state=self._keeps_state(request.routing, prepared.model),
            store=prepared.compaction is None,
        )

    def _keeps_state(self, routing: Routing, model: str | None) -> bool:
        """Whether the upstream a request is routed to first keeps responses itself
        (none can take it: proxai alone may hold what it asks for; the plan raises the
        404 later, from the same routing)."""
        try:
            route = routing.route(model)
        except ProxyError:
            return False
        return UPSTREAM_PROTOCOLS[self.upstream(route.upstreams[0]).protocol].keeps_state

    async def _answer_stored(self, request: Request, downstream: Downstream) -> bool:
        """Retrieve, list the input items of, or delete a response proxai stored."""
        incoming, outcome = request.incoming, request.outcome
        if self.conversations is None or incoming.stored is None:
            return False
        answer = await self.conversations.answer(
            incoming.method,
            incoming.stored,
            parse_query(incoming.query),
            tenant=request.tenant,
            upstream_keeps_state=self._keeps_state(request.routing, None),
        )
        if answer is None:
            return False
        status, body = answer
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *incoming.id_header,
        ]
        await downstream.send_head(status, headers)
        await downstream.send_body(body, more=False)
        outcome.status, outcome.kind = status, OutcomeKind.COMPLETED
        outcome.detail = "answered by proxai from its stored responses"
        return True

    def _exchange_of(
        self, incoming: Incoming, plan: Plan, clients: Mapping[str, Upstream]
    ) -> Exchange:
        server = self.config.server
        targets = {}
        for name, target in plan.targets.items():
            client = clients.get(name) or self.clients[name]
            targets[name] = UpstreamTarget(
                client,
                client.timeouts,
                target.body,
                observer_factory=target.observer_factory,
                raw_path=target.raw_path,
                query=target.query,
                translator=target.translator,
                dropped=target.dropped,
                usage=target.usage,
            )
        request = ProxiedRequest(
            incoming.method,
            incoming.path,
            incoming.raw_path,
            query_for_upstream(incoming.query),
            incoming.headers,
            first_byte_applies=plan.first_byte_applies,
        )
        return Exchange(
            request,
            targets,
            RetryPlan(plan.route.upstreams, self.config.retries),
            self.config.timeouts,
            retry_admission=self._gate,
            error_shape=incoming.sdk.error_shape,
            max_event_bytes=server.max_event_bytes,
            max_translated_body_bytes=server.max_translated_body_bytes,
            can_abort=not incoming.http2,
            response_headers=incoming.id_header,
        )

    @staticmethod
    def _operation(incoming: Incoming) -> str | None:
        """The request's ``gen_ai.operation.name``: its API's, for a generation request."""
        api = incoming.api
        if api is None or incoming.method != "POST" or incoming.route_path != api.path.template:
            return None
        return api.genai_operation
