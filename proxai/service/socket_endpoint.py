"""The Responses WebSocket mode's endpoint: the upgrade's checks, then each turn.

The upgrade (``GET /v1/responses``, ``Upgrade: websocket``) is refused before it
is accepted, with an HTTP answer, when proxai would refuse the request over HTTP:
426 when ``server.websocket`` is off (Codex then falls back to HTTP at once), 404
for another path, 403 for a web page or a Host the browser policy refuses, 401
without a client key, 503 while draining. Once accepted, the socket runs as
:func:`proxai.service.sockets.run_socket` says, and each ``response.create`` is one
turn: read and expanded by :mod:`proxai.protocols.responses.socket` (a warm-up is
answered here), then admitted, planned and relayed like ``POST /v1/responses`` with
``stream: true``: the socket is the pipeline's second entry
(:mod:`proxai.service.admission`, :mod:`proxai.service.pipeline`, the same as the HTTP
endpoint's), its answer sent as frames by a
:class:`~proxai.service.socket_io.TurnDownstream`.

A turn counts in ``max_concurrent_streams`` while it runs, not while the socket
idles; its tenant is the socket's, computed once at the upgrade, and its route is
decided once, for the upstream sockets and the plan alike. Its outcome is logged like
a request's, with ``transport=websocket`` and the socket's id; the upgrade leaves its
own record when the socket ends.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import attrs
import orjson
import trio

from ..config import Config
from ..errors import ProxyError
from ..outcome import Outcome, OutcomeKind
from ..protocols.table import (
    SOCKET_API,
    SOCKETS,
    UPSTREAM_PROTOCOLS,
    Conversation,
    ResponseRecord,
    Turn,
    api_for,
)
from ..relay.writer import error_response
from ..upstream.client import Upstream
from ..upstream.websocket import UpstreamSocket
from .admission import Admission
from .asgi_io import ASGIReceive, ASGISend
from .intake import Intake
from .pipeline import Body, Pipeline, Request
from .plan import Incoming
from .reporting import Reporter
from .socket_io import CLOSE_SECONDS, ClientSocket, TurnDownstream
from .sockets import SocketLimits, SocketStats, run_socket

__all__ = ["SocketEndpoint", "SocketSnapshot"]


@attrs.frozen
class SocketSnapshot:
    """The live view's picture of one client socket."""

    socket_id: str
    age_s: float
    responses: int
    in_response: bool
    queued: int
    state_bytes: int


@attrs.define(eq=False)
class _Socket:
    """One accepted client socket's state."""

    socket_id: str
    socket: ClientSocket
    headers: list[tuple[bytes, bytes]]
    #: Whose socket it is (computed at the upgrade): every turn's tenant.
    tenant: str
    stats: SocketStats
    conversation: Conversation
    responses: int = 0
    #: The upstream sockets it holds (``websocket = true`` upstreams), by upstream name.
    upstream_sockets: dict[str, UpstreamSocket] = attrs.field(factory=dict)


class SocketEndpoint:
    """Serves the app's WebSocket scopes."""

    def __init__(
        self,
        config: Config,
        *,
        intake: Intake,
        admission: Admission,
        pipeline: Pipeline,
        reporter: Reporter,
    ) -> None:
        self._config = config
        self._intake = intake
        self._admission = admission
        self._pipeline = pipeline
        self._reporter = reporter
        self._open: set[_Socket] = set()
        #: Open (or being accepted) sockets by tenant: ``server.websocket_max_per_key``.
        self._per_key: dict[str, int] = {}

    def snapshots(self) -> list[SocketSnapshot]:
        now = trio.current_time()
        return [
            SocketSnapshot(
                s.socket_id,
                round(now - s.stats.opened_at, 3),
                s.responses,
                s.stats.in_turn,
                s.stats.queued,
                s.conversation.size,
            )
            for s in self._open
        ]

    @property
    def open_count(self) -> int:
        return len(self._open)

    # -- the upgrade ---------------------------------------------------------------------

    async def serve(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        server = self._config.server
        reporter = self._reporter
        scope = {**scope, "method": "GET"}  # an upgrade is a GET; ASGI's scope omits it
        socket = ClientSocket(send, receive, max_message_bytes=server.max_request_body_bytes)
        if not await socket.connected():
            return
        socket_id = "ws_" + secrets.token_hex(12)
        incoming = self._intake.incoming(scope)
        upgrade = Outcome(
            "GET",
            scope["path"],
            request_id=socket_id,
            transport="websocket",
            socket_id=socket_id,
        )
        started = trio.current_time()
        try:
            tenant = self._check_upgrade(scope, incoming)
            self._hold_place(tenant)  # no wait between its check and count
        except ProxyError as exc:
            headers, body = error_response(exc, incoming.sdk.error_shape, incoming.id_header)
            can_answer = "websocket.http.response" in scope.get("extensions", {})
            await socket.deny(exc.status, headers, body, can_answer=can_answer)
            upgrade.kind = exc.kind or OutcomeKind.PROXY_ERROR
            upgrade.status, upgrade.detail = exc.status, exc.message
            reporter.count_websocket(str(exc.status))
            reporter.report(upgrade, counted=False)
            return
        try:
            await socket.accept()
        except BaseException:
            self._free_place(tenant)
            raise
        state = _Socket(
            socket_id,
            socket,
            # A turn carries the upgrade's headers, as a POST would, but not the
            # handshake's own (its key, version and extensions belong to this socket).
            [(n, v) for n, v in incoming.headers if not n.startswith(b"sec-websocket-")],
            tenant,
            SocketStats(opened_at=started),
            SOCKETS.conversation(server.websocket_max_state_bytes),
        )
        self._open.add(state)
        reporter.count_websocket("accepted", opened=1)
        upgrade.status = 101
        try:
            await run_socket(
                socket,
                lambda text: self._turn(state, text),
                SocketLimits(
                    server.websocket_max_queued,
                    server.websocket_max_age,
                    self._config.timeouts.client_write,
                    server.max_request_body_bytes,
                ),
                state.stats,
                draining=self._admission.draining,
                wait_for_drain=self._admission.wait_for_drain,
            )
            upgrade.kind = OutcomeKind.COMPLETED
        finally:
            self._open.discard(state)
            self._free_place(tenant)
            state.conversation.forget()
            reporter.count_websocket(None, opened=-1)
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                for upstream in state.upstream_sockets.values():
                    await upstream.aclose()
            upgrade.total_s = trio.current_time() - started
            upgrade.events = state.responses
            upgrade.detail = state.stats.ended_by
            upgrade.kind = upgrade.kind or OutcomeKind.CLIENT_DISCONNECTED
            reporter.report(upgrade, counted=False)

    def _check_upgrade(self, scope: dict[str, Any], incoming: Incoming) -> str:
        """Raise what refuses the upgrade (before it is accepted); the socket's tenant."""
        api = api_for("POST", incoming.route_path)
        if api is None or not api.socket or incoming.route_path != api.path.template:
            raise ProxyError(
                404,
                f"no WebSocket is served at {incoming.path[:200]}: the Responses "
                "WebSocket mode is GET /v1/responses",
                "invalid_request_error",
                code="not_found",
            )
        verdict = self._intake.verdict(scope)
        if verdict.refusal is not None:
            raise verdict.refusal
        if not self._config.server.websocket:
            raise ProxyError(
                426,
                "the Responses WebSocket mode is off on this proxai (server.websocket = "
                "false): use POST /v1/responses",
                "invalid_request_error",
                code="websocket_not_supported",
            )
        return self._admission.check_upgrade(incoming)

    def _hold_place(self, tenant: str) -> None:
        """Count the socket in its key's ``server.websocket_max_per_key`` (raises the
        429 past it); :meth:`_free_place` frees the place."""
        limit = self._config.server.websocket_max_per_key
        held = self._per_key.get(tenant, 0)
        if limit and held >= limit:
            raise ProxyError(
                429,
                f"this key already has {limit} WebSockets open on this proxai "
                "(server.websocket_max_per_key): close one, or use POST /v1/responses",
                "requests",
                code="too_many_websockets",
                headers=((b"retry-after", b"1"),),
                kind=OutcomeKind.RATE_LIMITED,
            )
        self._per_key[tenant] = held + 1

    def _free_place(self, tenant: str) -> None:
        held = self._per_key.pop(tenant, 1) - 1
        if held > 0:
            self._per_key[tenant] = held

    # -- a turn ----------------------------------------------------------------------

    async def _turn(self, state: _Socket, text: str) -> bool:
        """One client frame: a response, an error frame, or nothing (``False``: the
        client stopped reading, the socket must end)."""
        try:
            frame = SOCKETS.read_frame(text)
        except ProxyError as exc:
            return await self._send_own(
                state, SOCKETS.error_frame(exc.status, exc.body(), exc.headers)
            )
        if frame is None:
            return True
        incoming = self._intake.turn(state.headers)
        outcome = Outcome(
            "response.create",
            SOCKET_API.path.template,
            request_id=incoming.request_id,
            transport="websocket",
            socket_id=state.socket_id,
        )
        trace = self._reporter.trace(incoming, outcome)
        state.responses += 1

        async def refuse(exc: ProxyError) -> None:
            headers = (*exc.headers, *incoming.id_header)
            if not await self._send_own(
                state, SOCKETS.error_frame(exc.status, exc.body(), headers)
            ):
                outcome.kind = OutcomeKind.CLIENT_STALLED
                return
            outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
            outcome.status, outcome.detail = exc.status, exc.message

        try:
            self._admission.check(incoming, tenant=state.tenant)
            async with self._admission.admitted(state.tenant, incoming, outcome):
                try:
                    request = self._pipeline.request(incoming, state.tenant, outcome, trace=trace)
                    await self._respond(state, request, frame)
                except ProxyError as exc:  # answered while still admitted
                    await refuse(exc)
        except ProxyError as exc:  # refused before admission
            await refuse(exc)
        finally:
            self._reporter.report(outcome, trace=trace)
        return outcome.kind is not OutcomeKind.CLIENT_STALLED

    async def _respond(self, state: _Socket, request: Request, frame: dict[str, Any]) -> None:
        """An admitted turn: over the upstream socket its route starts with, or as a
        request, with the socket's conversation expanded into it (raises ProxyError)."""
        outcome, client_write = request.outcome, self._config.timeouts.client_write
        model = frame.get("model")
        route = request.routing.route(model if isinstance(model, str) else None)
        first = self._pipeline.upstream(route.upstreams[0])
        record = SOCKETS.record(self._config.server.websocket_max_state_bytes)
        downstream = TurnDownstream(state.socket, record)
        if first.websocket:
            clients: dict[str, Upstream] = {
                name: self._upstream_socket(state, name)
                for name in route.upstreams
                if self._pipeline.upstream(name).websocket
            }
            await self._pipeline.run(request, _socket_body(frame), downstream, clients)
            _cut(state.socket, outcome, client_write)
            return
        keeps_state = UPSTREAM_PROTOCOLS[first.protocol].keeps_state
        # proxai's stored responses hold only what upstreams that keep none answered.
        resolve = self._pipeline.stores_responses and not keeps_state
        turn, body = _turn_body(state.conversation, frame, keeps_state, resolve)
        if turn.warm_up:
            await self._warm_up(state, frame, record, outcome)
        else:
            await self._pipeline.run(request, body, downstream)
            _cut(state.socket, outcome, client_write)
        state.conversation.keep(turn, record)

    async def _warm_up(
        self, state: _Socket, frame: dict[str, Any], record: ResponseRecord, outcome: Outcome
    ) -> None:
        """``generate: false``: a response with no output, answered by proxai; its
        input becomes the socket's state (Codex's base instructions ride on it)."""
        outcome.model = frame.get("model") if isinstance(frame.get("model"), str) else None
        started = trio.current_time()
        for event in SOCKETS.warm_up_events(frame, SOCKETS.new_id(), time.time()):
            record.event(event)
            if not await self._send_own(state, event):
                outcome.kind = OutcomeKind.CLIENT_STALLED
                outcome.detail = "the client did not read the warm-up's frames"
                return
            outcome.events += 1
            outcome.bytes_out += len(event)
        outcome.kind, outcome.status, outcome.streaming = OutcomeKind.COMPLETED, 200, True
        outcome.detail = "warm-up (generate: false) answered by proxai"
        outcome.total_s = trio.current_time() - started

    async def _send_own(self, state: _Socket, frame: bytes) -> bool:
        """One of proxai's own frames, bounded by ``client_write`` (``False``: the
        client does not read; the socket ends)."""
        return await state.socket.send_within(frame, self._config.timeouts.client_write)

    def _upstream_socket(self, state: _Socket, name: str) -> UpstreamSocket:
        """The upstream socket this client socket holds to ``name`` (made on first use,
        closed when the client socket ends)."""
        upstream = state.upstream_sockets.get(name)
        if upstream is None:
            upstream = state.upstream_sockets[name] = self._pipeline.upstream_socket(name)
        return upstream


def _socket_body(frame: dict[str, Any]) -> Body:
    """A turn's body for an upstream socket, with its objects: the frame's fields in
    their order, ``stream`` said, as the socket implies."""
    data = {**{k: v for k, v in frame.items() if k != "type"}, "stream": True}
    return Body(orjson.dumps(data), data)


def _turn_body(
    conversation: Conversation, frame: dict[str, Any], keeps_state: bool, resolve: bool
) -> tuple[Turn, Body]:
    """The turn a frame makes and the body it is sent as, the objects in the body only
    (the turn lasts the whole response)."""
    turn, data = conversation.request(
        frame, upstream_keeps_state=keeps_state, others_resolve=resolve
    )
    return turn, Body(turn.body, data)


def _cut(socket: ClientSocket, outcome: Outcome, client_write: float) -> None:
    """A turn whose frame was cut (the client read nothing for ``client_write`` + 1 s, see
    :class:`TurnDownstream`) ended for the client as a stalled one, whatever the relay had
    decided before (the upstream's early end, a stall): the client got none of that
    ending, and the socket ends. Over HTTP the same client is recorded so too
    (:func:`proxai.relay.ending.client_gone`)."""
    if not socket.broken or outcome.kind is OutcomeKind.CLIENT_STALLED:
        return
    was = f"{outcome.kind}: {outcome.detail}" if outcome.detail else str(outcome.kind)
    outcome.kind = OutcomeKind.CLIENT_STALLED
    outcome.detail = (
        f"the client read nothing for {client_write + CLOSE_SECONDS} s: its socket was cut "
        f"before the response's ending reached it (the response had ended {was})"
    )
