"""The ASGI application: the lifespan, and the wiring of the request pipeline.

A request comes in by one of two carriers, each an entry into the same pipeline:
an HTTP request (:mod:`proxai.service.http_endpoint`) or a turn of a Responses
WebSocket (:mod:`proxai.service.socket_endpoint`). Both read the head
(:mod:`proxai.service.intake`), are admitted by the same bracket
(:mod:`proxai.service.admission`: the gate, client keys, ``[limits]``), and are
planned once and run (:mod:`proxai.service.pipeline`), their records going to
:mod:`proxai.service.reporting`. This module builds those parts from the config and
runs the lifespan: the upstream clients and the state store live from startup to
shutdown, beside the idle-connection sweep, the drain and the lease renewal. ASGI's
message shapes are known in :mod:`proxai.service.asgi_io` and
:mod:`proxai.service.socket_io` only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..config import Config
from ..ops.capture import CaptureHook, Captures
from ..ops.masking import SecretMask
from ..ops.metrics import Metrics
from ..ops.request_log import RequestLog
from ..policy.auth import ClientKeys
from ..policy.retry import RetryBudget
from ..policy.upstream_ids import Isolation
from ..state import Backend, StateStore, open_backend
from ..upstream.client import UpstreamClient
from ..upstream.websocket import StreamOpener
from .admission import Admission
from .asgi_io import ASGIReceive, ASGISend
from .background import Failures
from .conversations import Conversations
from .gate import Gate
from .http_endpoint import HttpEndpoint
from .intake import Intake
from .limits import KeyLimits
from .live_view import LiveView
from .local import LocalAnswers
from .pipeline import Pipeline
from .plan import Planner
from .reporting import OutcomeHook, Reporter
from .socket_endpoint import SocketEndpoint

__all__ = ["OutcomeHook", "ProxaiApp", "UpstreamFactory"]

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
        planner = Planner(config)
        self._exact_models = planner.router.exact_models
        self._keys = ClientKeys.from_config(config.auth)
        #: Started once and shut down since: /healthz says "stopped", not "starting".
        self._stopped = False
        self._upstream_factory = upstream_factory
        #: The idle-connection sweep's scope: it ends before the pools close.
        self._sweeping = trio.CancelScope()
        self._holding_store = trio.CancelScope()
        self._metrics = (
            Metrics.from_config(config.metrics, self._exact_models)
            if config.metrics.enabled
            else None
        )
        self._gate = Gate(
            config.server, lambda: self._pipeline.relays, RetryBudget.from_config(config.retries)
        )
        mask = SecretMask.from_config(config)
        self._reporter = Reporter(RequestLog(config.logging, mask), self._metrics, on_outcome)
        self._limits = KeyLimits(
            config,
            self._keys,
            count_limited=self._reporter.count_limited,
            count_unavailable=self._reporter.count_limits_unavailable,
        )
        self._pipeline = Pipeline(
            config, planner, self._gate, metrics=self._metrics, socket_opener=socket_opener
        )
        intake = Intake(config, planner.router.has_protocol)
        admission = Admission(
            self._gate,
            self._keys,
            self._limits,
            metrics=self._metrics,
            started=lambda: self.serving,
        )
        self._sockets = SocketEndpoint(
            config,
            intake=intake,
            admission=admission,
            pipeline=self._pipeline,
            reporter=self._reporter,
        )
        self._live_view = LiveView(
            config.live_view,
            self._keys,
            streams=lambda: [relay.snapshot() for relay in self._pipeline.relays],
            sockets=self._sockets.snapshots,
            draining=lambda: self._gate.draining,
            key_use=self._limits.use,
        )
        local = LocalAnswers(
            config,
            health=self._health,
            metrics=self._metrics,
            live_view=self._live_view,
            before_metrics=self._count_pools,
        )
        self._http = HttpEndpoint(
            config,
            intake=intake,
            admission=admission,
            pipeline=self._pipeline,
            local=local,
            reporter=self._reporter,
            captures=(
                Captures(config.capture, mask, on_saved=on_capture_saved)
                if config.capture.enabled
                else None
            ),
        )

    @property
    def in_flight(self) -> int:
        return self._gate.in_flight

    @property
    def serving(self) -> bool:
        """Started, and its upstream clients open (until the lifespan ends, however it
        ends): what ``/healthz`` reports. Draining still serves."""
        return bool(self._pipeline.clients)

    @property
    def ready(self) -> bool:
        """Serving and not draining: what ``/readyz`` reports."""
        return self.serving and not self._gate.draining

    @property
    def state_store(self) -> StateStore | None:
        """The ``[state]`` store, from startup to shutdown."""
        return self._pipeline.state_store

    async def startup(self, nursery: trio.Nursery) -> None:
        """Open a connection pool per upstream, and the state store in a task of
        ``nursery`` (the lifespan's), where it stays until :meth:`shutdown`."""
        backend: Backend = await nursery.start(self._hold_store)
        self._pipeline.conversations = Conversations(
            backend.store,
            max_record_bytes=self.config.server.websocket_max_state_bytes,
            isolation=self._isolation(),
        )
        self._limits.open(backend)
        self._pipeline.clients = {
            name: self._upstream_factory(upstream, self.config.timeouts_for(name), name=name)
            for name, upstream in self.config.all_upstreams()
        }
        if self.config.telemetry.enabled and self._reporter.telemetry is None:
            # Imported here, so that with telemetry off no opentelemetry module is loaded.
            from ..ops.telemetry import Telemetry

            self._reporter.telemetry = Telemetry(self.config, self._exact_models)
            endpoint = self.config.telemetry.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
            log.info("telemetry: exporting traces and GenAI metrics to %s", endpoint)

    async def shutdown(self) -> None:
        """Close the upstream connection pools, flush the telemetry (lifespan shutdown)."""
        self._sweeping.cancel()
        telemetry, self._reporter.telemetry = self._reporter.telemetry, None
        if telemetry is not None:
            # The exporters' flush blocks on their HTTP requests: in a thread, bounded.
            with trio.move_on_after(TELEMETRY_FLUSH_SECONDS):
                await trio.to_thread.run_sync(telemetry.shutdown, abandon_on_cancel=True)
        if self._pipeline.clients:
            self._stopped = True
        clients, self._pipeline.clients = self._pipeline.clients, {}
        for client in clients.values():
            await client.aclose()
        self._pipeline.conversations = None
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

    def __call__(
        self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend
    ) -> Awaitable[None]:
        """The ASGI app. It returns its scope's handler's coroutine rather than awaiting
        it, so that no frame of this dispatch stays under a stream for its life (the
        server is told the app is ASGI, and awaits what this returns)."""
        kind = scope["type"]
        if kind == "http":
            return self._http.serve(scope, receive, send)
        if kind == "websocket":
            return self._sockets.serve(scope, receive, send)
        if kind == "lifespan":
            return self._lifespan(receive, send)
        return _ignored()

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
        failures = Failures("idle_sweep", self._reporter.count_failure)
        with self._sweeping:
            while True:
                await trio.sleep(interval)
                for client in list(self._pipeline.clients.values()):
                    with failures.contain():
                        await client.close_idle()
                with failures.contain():
                    self._count_pools()

    async def _drain_when_asked(self) -> None:
        """Drain once asked to. Should the drain fail, the streams still open are left to
        hypercorn's graceful timeout; the lifespan, and with it the pools, goes on."""
        await self._gate.wait_for_drain_request()
        with Failures("drain", self._reporter.count_failure).contain():
            await self._gate.drain()

    def _count_pools(self) -> None:
        if self._metrics is not None:
            for name, client in self._pipeline.clients.items():
                stats = client.pool_statistics()
                self._metrics.pools(name, stats.open, stats.idle, stats.listed)

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

    def _health(self, path: str) -> str:
        """``/healthz``: ``ok`` while proxai can serve (draining included); ``/readyz``:
        ``ok`` while it takes new requests."""
        if not self.serving:
            return "stopped" if self._stopped else "starting"
        if path == "/readyz" and not self.ready:
            return "draining"
        return "ok"


async def _ignored() -> None:
    """A scope of a type proxai does not serve: nothing to do."""
