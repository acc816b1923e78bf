"""The ASGI application: lifespan, intake, admission, and carrying out each request's plan.

It first checks the method, ``Host`` and ``Origin`` (:mod:`proxai.policy.browser`:
web pages stay out unless allowed); what proxai answers itself (``OPTIONS``,
health, metrics, the live view) is :mod:`proxai.service.local`'s; it admits each
other request (:mod:`proxai.service.gate`, :mod:`proxai.policy.target`, client
keys: nothing is read or sent upstream for a refused one), reads its body, has
:mod:`proxai.service.plan` check, route and plan it, and hands the plan as an
:class:`~proxai.relay.exchange.Exchange` to a :class:`~proxai.relay.relay.Relay`.
The upstream clients live from lifespan startup to lifespan shutdown. ASGI's
message shapes are known here and in :mod:`proxai.service.asgi_io` only.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ..config import Config
from ..errors import ProxyError
from ..ops.capture import Capture, CaptureHook, Captures
from ..ops.genai import RequestFacts
from ..ops.masking import SecretMask
from ..ops.metrics import Metrics
from ..ops.request_log import RequestLog
from ..outcome import Outcome, OutcomeKind
from ..policy.auth import ClientKeys, tenant_of
from ..policy.browser import BrowserPolicy, BrowserRequest, Verdict, is_loopback
from ..policy.retry import RetryBudget, RetryPlan
from ..policy.target import check_head_size, check_path, check_target
from ..policy.upstream_ids import Isolation
from ..protocols.table import SOCKET_API, UPSTREAM_PROTOCOLS, ResponseRecord
from ..relay.exchange import Exchange, ProxiedRequest, UpstreamTarget
from ..relay.relay import Relay
from ..relay.writer import Downstream, error_response, send_error
from ..state import Backend, RecordTooLarge, StateStore, StateUnavailable, open_backend
from ..upstream.client import Upstream, UpstreamClient
from ..upstream.websocket import StreamOpener, UpstreamSocket
from ..wire.headers import Headers
from ..wire.query import query_for_upstream
from ..wire.request_coding import decode_request_body
from .asgi_io import AsgiDownstream, ASGIReceive, ASGISend, read_body
from .background import Failures
from .conversations import Conversations, StatePlan, is_response_path, parse_query
from .gate import Gate
from .limits import Admission, KeyLimits
from .live_view import LiveView
from .local import HEALTH_PATHS, LocalAnswers, send_local_answer
from .plan import Incoming, Plan, Planner, Prepared, read_head
from .socket_endpoint import SocketEndpoint
from .storing import StoringDownstream

if TYPE_CHECKING:  # imported only when [telemetry] is enabled (see startup)
    from ..ops.telemetry import RequestTrace, Telemetry

__all__ = ["OutcomeHook", "ProxaiApp", "UpstreamFactory"]

OutcomeHook = Callable[[Outcome], None]
#: Builds the client of one upstream: ``factory(upstream, timeouts, name=name)``.
UpstreamFactory = Callable[..., UpstreamClient]

log = logging.getLogger("proxai")
#: How long shutdown waits for the telemetry exporters to send what is pending.
TELEMETRY_FLUSH_SECONDS = 5.0


class ProxaiApp:
    """ASGI 3 application; ``on_outcome`` is called with every request's outcome, and
    ``on_capture_saved`` after each request's capture is written (``[capture] enabled``)."""

    def __init__(
        self,
        config: Config,
        *,
        on_outcome: OutcomeHook | None = None,
        on_capture_saved: CaptureHook | None = None,
        upstream_factory: UpstreamFactory = UpstreamClient,
        socket_opener: StreamOpener | None = None,
    ) -> None:
        self.config = config
        self._planner = Planner(config)
        self._keys = ClientKeys.from_config(config.auth)
        self._browser = BrowserPolicy(
            allowed_origins=config.server.allowed_origins,
            allowed_hosts=config.server.allowed_hosts,
            bound_to_loopback=is_loopback(config.server.host),
        )
        self._clients: dict[str, UpstreamClient] = {}
        #: Started once and shut down since: /healthz says "stopped", not "starting".
        self._stopped = False
        self._upstream_factory = upstream_factory
        #: The stored responses (``[state]``), from startup to shutdown.
        self._conversations: Conversations | None = None
        #: How upstream WebSockets connect (``None``: TCP; tests connect in memory).
        self._socket_opener = socket_opener
        self._on_outcome = on_outcome
        self._relays: set[Relay] = set()
        #: The idle-connection sweep's scope: it ends before the pools close.
        self._sweeping = trio.CancelScope()
        self._holding_store = trio.CancelScope()
        #: OpenTelemetry (``[telemetry]``), from startup to shutdown; ``None`` when off.
        self._telemetry: Telemetry | None = None
        self._gate = Gate(
            config.server, lambda: self._relays, RetryBudget.from_config(config.retries)
        )
        self._limits = KeyLimits(
            config,
            self._keys,
            count_limited=self._count_limited,
            count_unavailable=self._count_limits_unavailable,
        )
        mask = SecretMask.from_config(config)
        self._request_log = RequestLog(config.logging, mask)
        metrics = config.metrics
        self._metrics = (
            Metrics.from_config(metrics, self._planner.router.exact_models)
            if metrics.enabled
            else None
        )
        self._captures = (
            Captures(config.capture, mask, on_saved=on_capture_saved)
            if config.capture.enabled
            else None
        )
        self._live_view = LiveView(
            config.live_view,
            self._keys,
            streams=lambda: [relay.snapshot() for relay in self._relays],
            sockets=lambda: self._sockets.snapshots(),
            draining=lambda: self._gate.draining,
            key_use=self._limits.use,
        )
        self._sockets = SocketEndpoint(self)
        self._local = LocalAnswers(
            config,
            health=self._health,
            metrics=self._metrics,
            live_view=self._live_view,
            before_metrics=self._count_pools,
        )

    @property
    def in_flight(self) -> int:
        return self._gate.in_flight

    @property
    def serving(self) -> bool:
        """Started, and its upstream clients open (until the lifespan ends, however it
        ends): what ``/healthz`` reports. Draining still serves."""
        return bool(self._clients)

    @property
    def ready(self) -> bool:
        """Serving and not draining: what ``/readyz`` reports."""
        return self.serving and not self._gate.draining

    async def startup(self, nursery: trio.Nursery) -> None:
        """Open a connection pool per upstream, and the state store in a task of
        ``nursery`` (the lifespan's), where it stays until :meth:`shutdown`."""
        backend: Backend = await nursery.start(self._hold_store)
        self._conversations = Conversations(
            backend.store,
            max_record_bytes=self.config.server.websocket_max_state_bytes,
            isolation=self._isolation(),
        )
        self._limits.open(backend)
        self._clients = {
            name: self._upstream_factory(upstream, self.config.timeouts_for(name), name=name)
            for name, upstream in self.config.all_upstreams()
        }
        if self.config.telemetry.enabled and self._telemetry is None:
            # Imported here, so that with telemetry off no opentelemetry module is loaded.
            from ..ops.telemetry import Telemetry

            self._telemetry = Telemetry(self.config, self._planner.router.exact_models)
            endpoint = self.config.telemetry.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
            log.info("telemetry: exporting traces and GenAI metrics to %s", endpoint)

    async def shutdown(self) -> None:
        """Close the upstream connection pools, flush the telemetry (lifespan shutdown)."""
        self._sweeping.cancel()
        telemetry, self._telemetry = self._telemetry, None
        if telemetry is not None:
            # The exporters' flush blocks on their HTTP requests: in a thread, bounded.
            with trio.move_on_after(TELEMETRY_FLUSH_SECONDS):
                await trio.to_thread.run_sync(telemetry.shutdown, abandon_on_cancel=True)
        if self._clients:
            self._stopped = True
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()
        self._conversations = None
        await self._limits.close()
        self._holding_store.cancel()  # the store closes in its task (shielded, bounded)

    def _isolation(self) -> Isolation | None:
        """The check of an upstream's ids, where several tenants share its key."""
        if self._keys is None or not Isolation.applies(self._keys.tenants):
            return None
        return Isolation(forward_unknown=self.config.state.forward_unknown_upstream_ids)

    async def _hold_store(self, *, task_status: trio.TaskStatus[Backend]) -> None:
        self._holding_store = trio.CancelScope()
        with self._holding_store:
            async with open_backend(self.config.state) as backend:
                task_status.started(backend)
                await trio.sleep_forever()

    def begin_drain(self) -> None:
        """Stop taking requests (``/readyz`` turns 503; new ones get 503); the
        lifespan task then runs :meth:`drain`."""
        self._gate.begin_drain()

    async def drain(self) -> None:
        """See :meth:`proxai.service.gate.Gate.drain`."""
        await self._gate.drain()

    def hurry(self) -> None:
        """End the drain now (a second SIGINT/SIGTERM): open streams get their error."""
        self._gate.hurry()

    async def __call__(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._sockets.serve(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan ------------------------------------------------------------------------

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._drain_when_asked)
                nursery.start_soon(self._close_idle_connections)
                nursery.start_soon(self._limits.renew_leases)
                await self._lifespan_messages(receive, send, nursery)
                nursery.cancel_scope.cancel()
        finally:
            # A server cancelled without a graceful shutdown still closes the pools:
            # their sockets must not wait for the garbage collector.
            with trio.CancelScope(shield=True):
                await self.shutdown()

    async def _close_idle_connections(self) -> None:
        """Close idle upstream connections once they expire, with or without traffic,
        as nginx's ``keepalive_timeout`` does: httpcore only looks at a pool's idle
        connections when a request comes to it, so a burst would otherwise leave its
        connections open for good. A failed sweep is reported and the next one runs
        (:mod:`proxai.service.background`): it must never end the lifespan."""
        upstreams = self.config.all_upstreams()
        interval = min((u.keepalive_expiry for _, u in upstreams), default=math.inf) / 2
        failures = Failures("idle_sweep", self._count_failure)
        with self._sweeping:
            while True:
                await trio.sleep(interval)
                for client in list(self._clients.values()):
                    with failures.contain():
                        await client.close_idle()
                with failures.contain():
                    self._count_pools()

    async def _drain_when_asked(self) -> None:
        """Drain once asked to. Should the drain fail, the streams still open are left to
        hypercorn's graceful timeout; the lifespan, and with it the pools, goes on."""
        await self._gate.wait_for_drain_request()
        with Failures("drain", self._count_failure).contain():
            await self._gate.drain()

    def _count_pools(self) -> None:
        if self._metrics is not None:
            for name, client in self._clients.items():
                stats = client.pool_statistics()
                self._metrics.pools(name, stats.open, stats.idle, stats.listed)

    def _count_limited(self, key: str, limit: str) -> None:
        if self._metrics is not None:
            self._metrics.limited.labels(key, limit).inc()

    def _count_limits_unavailable(self) -> None:
        if self._metrics is not None:
            self._metrics.limits_unavailable.inc()

    def _count_failure(self, task: str) -> None:
        if self._metrics is not None:
            self._metrics.background_failures.labels(task).inc()

    async def _lifespan_messages(
        self, receive: ASGIReceive, send: ASGISend, nursery: trio.Nursery
    ) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup(nursery)
                except Exception as exc:  # reported to the server, which stops
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- requests ------------------------------------------------------------------------

    async def _http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        verdict = self._verdict(scope)
        downstream = AsgiDownstream(send, receive, verdict.response_headers)
        if verdict.refusal is None and await self._local.answer(scope, verdict, downstream):
            return
        incoming = self._incoming(scope)
        outcome = Outcome(method, path, request_id=incoming.request_id)
        trace = self.trace(incoming, outcome)
        admitted = False
        admission: Admission | None = None
        capture: Capture | None = None
        try:
            tenant = self._admit(incoming, verdict)
            admission = await self._limits.admit(tenant, incoming.request_id, outcome)
            if admission is not None:
                downstream.add_headers(admission.headers)
            self._gate.enter()
            admitted = True
            # Refused requests are not captured: a flood of them must not push out the rest.
            capture = self._captures.start() if self._captures is not None else None
            if self._metrics is not None:
                self._metrics.in_flight.inc()
            if capture is not None:
                capture.request_head(method, incoming.raw_path, incoming.query, incoming.headers)
            await self._proxy(incoming, downstream, receive, outcome, capture, trace)
        except ProxyError as exc:
            body = await send_error(downstream, exc, incoming.sdk.error_shape, incoming.id_header)
            if capture is not None:
                capture.client.add(body)
            outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
            outcome.status = exc.status
            outcome.detail = exc.message
        except Exception as exc:
            outcome.kind = outcome.kind or OutcomeKind.PROXY_ERROR
            outcome.detail = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            if admitted:
                self._gate.leave()
                if self._metrics is not None:
                    self._metrics.in_flight.dec()
            if admission is not None:
                await self._limits.finish(admission, outcome)
            # Every request leaves a record, even one a bug or a shutdown cut short.
            self._report(outcome, trace=trace)
            if capture is not None and self._captures is not None:
                with trio.move_on_after(5, shield=True):
                    await self._captures.save(capture, outcome)

    # -- what the WebSocket endpoint asks of the app -------------------------------------

    @property
    def planner(self) -> Planner:
        return self._planner

    def verdict(self, scope: dict[str, Any]) -> Verdict:
        return self._verdict(scope)

    def incoming(self, scope: dict[str, Any]) -> Incoming:
        return self._incoming(scope)

    def turn_incoming(self, headers: Headers) -> Incoming:
        """A socket's turn as the ``POST /v1/responses`` it is carried as."""
        path = SOCKET_API.path.template
        return self._incoming(
            {"method": "POST", "path": path, "query_string": b"", "headers": headers}
        )

    def error_response(self, error: ProxyError, incoming: Incoming) -> tuple[Headers, bytes]:
        return error_response(error, incoming.sdk.error_shape, incoming.id_header)

    def admit_socket(self, incoming: Incoming) -> None:
        """The checks of an upgrade after the browser policy's: draining, the client
        key, a started proxai."""
        self._gate.check_open()
        if self._keys is not None:
            self._keys.check(incoming.headers, incoming.sdk)
        if not self._clients:
            raise ProxyError(503, "proxai is not started", "server_error")

    def tenant(self, incoming: Incoming) -> str:
        """Whose key an admitted request or socket is (:func:`tenant_of`)."""
        return tenant_of(self._keys, incoming.headers, incoming.sdk)

    async def admit_turn(self, incoming: Incoming, outcome: Outcome) -> Admission | None:
        """Admit one response of a socket: it counts in max_concurrent_streams and in
        its key's ``[limits]`` (raises the error its frame says)."""
        self._gate.check_open()
        self._gate.check_room()
        tenant = tenant_of(self._keys, incoming.headers, incoming.sdk)
        admission = await self._limits.admit(tenant, incoming.request_id, outcome)
        self._gate.enter()
        if self._metrics is not None:
            self._metrics.in_flight.inc()
        return admission

    async def leave_turn(self, admission: Admission | None, outcome: Outcome) -> None:
        self._gate.leave()
        if self._metrics is not None:
            self._metrics.in_flight.dec()
        if admission is not None:
            await self._limits.finish(admission, outcome)

    def draining(self) -> bool:
        return self._gate.draining

    async def wait_for_drain(self) -> None:
        await self._gate.wait_for_drain_request()

    def count_websocket(self, result: str | None, *, opened: int = 0) -> None:
        if self._metrics is None:
            return
        if result is not None:
            self._metrics.websocket_connections.labels(result).inc()
        if opened:
            self._metrics.websockets_open.inc(opened)

    def report(
        self, outcome: Outcome, *, counted: bool = True, trace: RequestTrace | None = None
    ) -> None:
        self._report(outcome, counted=counted, trace=trace)

    def trace(self, incoming: Incoming, outcome: Outcome) -> RequestTrace | None:
        """The request's trace (its SERVER span starts now), when telemetry is on."""
        if self._telemetry is None:
            return None
        return self._telemetry.request(incoming.headers, outcome)

    def _verdict(self, scope: dict[str, Any]) -> Verdict:
        """The method, Host and Origin checks (:mod:`proxai.policy.browser`)."""
        server = scope.get("server")
        request = BrowserRequest(
            scope["method"], scope["headers"], str(server[0]) if server else None
        )
        return self._browser.check(request, exempt=scope["path"] in HEALTH_PATHS)

    def _incoming(self, scope: dict[str, Any]) -> Incoming:
        path: str = scope["path"]
        return read_head(
            scope["method"],
            path,
            scope.get("raw_path") or path.encode(),
            scope.get("query_string", b""),
            scope["headers"],
            request_id="req_" + secrets.token_hex(12),
            http2=scope.get("http_version") == "2",
            configured=self._planner.router.has_protocol,
        )

    def _admit(self, incoming: Incoming, verdict: Verdict) -> str:
        """Refuse what proxai will not relay, before reading the body or going upstream;
        the request's tenant (:func:`~proxai.policy.auth.tenant_of`)."""
        if verdict.refusal is not None:
            raise verdict.refusal
        check_target(incoming.raw_path, incoming.query)
        check_path(incoming.method, incoming.path, incoming.raw_path)
        check_head_size(incoming.headers, incoming.raw_path, self.config.server.max_header_bytes)
        self._gate.check_open()
        tenant = tenant_of(self._keys, incoming.headers, incoming.sdk)
        self._gate.check_room()
        if not self._clients:
            raise ProxyError(503, "proxai is not started", "server_error")
        # Raises the 404 that says what is missing when no upstream can take it (a
        # response proxai may have stored is its own to answer).
        if not self._about_stored(incoming):
            self._planner.route(incoming, None)
        return tenant

    async def _proxy(
        self,
        incoming: Incoming,
        downstream: AsgiDownstream,
        receive: ASGIReceive,
        outcome: Outcome,
        capture: Capture | None,
        trace: RequestTrace | None,
    ) -> None:
        """Read and route one admitted request, then relay it; raises ProxyError."""
        server = self.config.server
        body = await read_body(
            incoming.headers,
            receive,
            limit=server.max_request_body_bytes,
            seconds=self.config.timeouts.request_body,
        )
        body = decode_request_body(incoming.headers, body, limit=server.max_request_body_bytes)
        if capture is not None:
            capture.request.add(body)
        await self.relay_request(incoming, body, downstream, outcome, capture, trace=trace)

    def upstream_socket(self, name: str) -> UpstreamSocket:
        """A new upstream WebSocket to ``name`` (a ``websocket = true`` upstream), for
        one client socket: it connects on its first response and is closed with it."""
        upstream = self.config.upstream_named(name)
        assert upstream is not None and upstream.websocket
        return UpstreamSocket(
            upstream,
            self.config.timeouts_for(name),
            name=name,
            max_message_bytes=self.config.server.max_event_bytes,
            open_stream=self._socket_opener,
        )

    async def relay_request(
        self,
        incoming: Incoming,
        body: bytes,
        downstream: Downstream,
        outcome: Outcome,
        capture: Capture | None,
        clients: Mapping[str, Upstream] | None = None,
        *,
        trace: RequestTrace | None = None,
    ) -> None:
        """Plan a request whose body is in and relay it (raises ProxyError); a socket's
        turn comes here too, with its own ``clients`` for the upstreams it holds a
        socket to."""
        outcome.bytes_request = len(body)
        if await self._answer_stored(incoming, downstream, outcome):
            return
        if self._conversations is not None:
            await self._conversations.guard_path(
                incoming.method, incoming.route_path, tenant=self.tenant(incoming)
            )
        planned = await self._exchange(incoming, body, downstream, outcome, clients, trace)
        if planned is None:
            return
        exchange, state = planned
        if state is not None and state.stored is not None:
            downstream = self._storing(incoming, state, downstream, outcome)
        elif state is not None and state.claims:
            downstream = self._claiming(state, downstream, outcome)
        on_attempt = self._metrics.attempt if self._metrics is not None else None
        relay = Relay(
            exchange, downstream, outcome, tap=capture, on_attempt=on_attempt, trace=trace
        )
        self._relays.add(relay)
        try:
            await relay.run()
        finally:
            self._relays.discard(relay)

    async def _exchange(
        self,
        incoming: Incoming,
        body: bytes,
        downstream: Downstream,
        outcome: Outcome,
        clients: Mapping[str, Upstream] | None = None,
        trace: RequestTrace | None = None,
    ) -> tuple[Exchange, StatePlan | None] | None:
        """Plan the request and make its :class:`Exchange` (``None``: proxai answered it
        itself). The parsed body dies here: a long stream keeps only the bytes each
        upstream is sent, not the client's request as Python objects."""
        prepared = self._planner.prepare(incoming, body)
        if prepared.tools is not None:
            outcome.model, outcome.tools = prepared.model, prepared.tools
        if trace is not None:
            trace.facts = RequestFacts.of_body(
                outcome.method, self._operation(incoming), prepared.data
            )
        state = await self._state_plan(incoming, body, prepared)
        if state is not None:
            outcome.warnings.extend(state.warnings)
        if state is not None and state.body is not body:
            body = state.body
            prepared = self._planner.prepare(incoming, body)
        stored = state.stored if state is not None else None
        plan = self._planner.plan(incoming, body, prepared, stored)
        outcome.route = plan.route.name
        if plan.local is not None:
            await send_local_answer(plan.local, downstream, outcome, incoming.id_header)
            return None
        return self._exchange_of(incoming, plan, clients or {}), state

    # -- conversation state ([state]) ----------------------------------------------------

    @property
    def state_store(self) -> StateStore | None:
        """The ``[state]`` store, from startup to shutdown."""
        return self._conversations.store if self._conversations is not None else None

    @property
    def stores_responses(self) -> bool:
        """Whether proxai keeps stored responses (a socket's turn naming a response the
        socket does not hold is then resolved, or refused, by them)."""
        return self._conversations is not None

    def _stateful(self, incoming: Incoming) -> bool:
        api = incoming.api
        return (
            self._conversations is not None
            and api is not None
            and api.stored
            and incoming.method == "POST"
            and incoming.route_path in (api.path.template, api.compact_path)
        )

    async def _state_plan(
        self, incoming: Incoming, body: bytes, prepared: Prepared
    ) -> StatePlan | None:
        """The state step of a ``POST /v1/responses`` or ``/v1/responses/compact``
        (``None``: not one). A compaction reads what it names and stores nothing."""
        if not self._stateful(incoming) or prepared.data is None:
            return None
        assert self._conversations is not None
        return await self._conversations.prepare(
            body,
            prepared.data,
            tenant=tenant_of(self._keys, incoming.headers, incoming.sdk),
            upstream_keeps_state=self._keeps_state(incoming, prepared.model),
            store=prepared.compaction is None,
        )

    def _keeps_state(self, incoming: Incoming, model: str | None) -> bool:
        """Whether the upstream a request is routed to first keeps responses itself
        (none can take it: proxai alone may hold what it asks for)."""
        try:
            route = self._planner.route(incoming, model)
        except ProxyError:
            return False
        first = self.config.upstream_named(route.upstreams[0])
        assert first is not None
        return UPSTREAM_PROTOCOLS[first.protocol].keeps_state

    def _storing(
        self, incoming: Incoming, state: StatePlan, downstream: Downstream, outcome: Outcome
    ) -> Downstream:
        """The client's downstream, storing the response before its terminal goes out."""
        conversations = self._conversations
        assert conversations is not None

        async def save(record: ResponseRecord) -> None:
            try:
                await conversations.save(state, record)
            except StateUnavailable as exc:
                outcome.warnings.append(f"the response was not stored: {exc.message}")
                return
            except RecordTooLarge:
                outcome.warnings.append(
                    "the response was not stored: larger than the whole [state] max_bytes"
                )
                return
            outcome.stored_as = record.response_id

        return StoringDownstream(downstream, conversations.record(), save)

    def _claiming(self, state: StatePlan, downstream: Downstream, outcome: Outcome) -> Downstream:
        """The client's downstream, claiming the upstream's ids of the response for its
        tenant: its id before its first event goes out, its items' before its terminal.
        A claim the store does not take leaves the ids unknown (a warning), the response
        served."""
        conversations = self._conversations
        assert conversations is not None

        async def claim(response_id: str, item_ids: Sequence[str] = ()) -> None:
            try:
                await conversations.claim(state.tenant, response_id, item_ids)
            except StateUnavailable as exc:
                outcome.warnings.append(f"the response's ids were not claimed: {exc.message}")

        async def save(record: ResponseRecord) -> None:
            if record.response_id is not None:
                await claim(record.response_id, record.item_ids)

        return StoringDownstream(downstream, conversations.id_record(), save, claim)

    def _about_stored(self, incoming: Incoming) -> bool:
        """A retrieve, input-items list or delete of a response (proxai's, perhaps)."""
        return incoming.method in ("GET", "DELETE") and is_response_path(incoming.route_path)

    async def _answer_stored(
        self, incoming: Incoming, downstream: Downstream, outcome: Outcome
    ) -> bool:
        """Retrieve, list the input items of, or delete a response proxai stored."""
        if self._conversations is None or not self._about_stored(incoming):
            return False
        answer = await self._conversations.answer(
            incoming.method,
            incoming.route_path,
            parse_query(incoming.query),
            tenant=tenant_of(self._keys, incoming.headers, incoming.sdk),
            upstream_keeps_state=self._keeps_state(incoming, None),
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
            client = clients.get(name) or self._clients[name]
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

    def _operation(self, incoming: Incoming) -> str | None:
        """The request's ``gen_ai.operation.name``: its API's, for a generation request."""
        api = incoming.api
        if api is None or incoming.method != "POST" or incoming.route_path != api.path.template:
            return None
        return api.genai_operation

    def _report(
        self, outcome: Outcome, *, counted: bool = True, trace: RequestTrace | None = None
    ) -> None:
        # Counted before logged: whoever reads the log line finds the request in /metrics.
        if self._metrics is not None and counted:
            self._metrics.observe(outcome)
        self._request_log(outcome)
        if trace is not None:
            trace.finish(outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def _health(self, path: str) -> str:
        """``/healthz``: ``ok`` while proxai can serve (draining included); ``/readyz``:
        ``ok`` while it takes new requests."""
        if not self.serving:
            return "stopped" if self._stopped else "starting"
        if path == "/readyz" and not self.ready:
            return "draining"
        return "ok"
