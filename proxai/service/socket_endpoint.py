"""The Responses WebSocket mode's endpoint: the upgrade's checks, then each turn.

The upgrade (``GET /v1/responses``, ``Upgrade: websocket``) is refused before it
is accepted, with an HTTP answer, when proxai would refuse the request over HTTP:
426 when ``server.websocket`` is off (Codex then falls back to HTTP at once), 404
for another path, 403 for a web page or a Host the browser policy refuses, 401
without a client key, 503 while draining. Once accepted, the socket runs as
:func:`proxai.service.sockets.run_socket` says, and each ``response.create`` is one
turn: read and expanded by :mod:`proxai.protocols.responses.socket` (a warm-up is
answered here), then planned and relayed like ``POST /v1/responses`` with
``stream: true`` (:meth:`ProxaiApp.relay_request`), its answer sent as frames by a
:class:`~proxai.service.socket_io.TurnDownstream`.

A turn counts in ``max_concurrent_streams`` while it runs, not while the socket
idles; its outcome is logged like a request's, with ``transport=websocket`` and the
socket's id; the upgrade leaves its own record when the socket ends.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import trio

from ..config import UpstreamConfig
from ..errors import ProxyError
from ..outcome import Outcome, OutcomeKind
from ..protocols.table import (
    SOCKET_API,
    SOCKETS,
    UPSTREAM_PROTOCOLS,
    Conversation,
    ResponseRecord,
    api_for,
)
from ..upstream.websocket import UpstreamSocket
from .asgi_io import ASGIReceive, ASGISend
from .plan import Incoming
from .socket_io import CLOSE_SECONDS, ClientSocket, TurnDownstream
from .sockets import SocketLimits, SocketStats, run_socket

if TYPE_CHECKING:
    from .app import ProxaiApp

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
    stats: SocketStats
    conversation: Conversation
    responses: int = 0
    #: The upstream sockets it holds (``websocket = true`` upstreams), by upstream name.
    upstream_sockets: dict[str, UpstreamSocket] = attrs.field(factory=dict)


class SocketEndpoint:
    """Serves the app's WebSocket scopes."""

    def __init__(self, app: ProxaiApp) -> None:
        self._app = app
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
        app = self._app
        server = app.config.server
        scope = {**scope, "method": "GET"}  # an upgrade is a GET; ASGI's scope omits it
        socket = ClientSocket(send, receive, max_message_bytes=server.max_request_body_bytes)
        if not await socket.connected():
            return
        socket_id = "ws_" + secrets.token_hex(12)
        incoming = app.incoming(scope)
        upgrade = Outcome(
            "GET",
            scope["path"],
            request_id=socket_id,
            transport="websocket",
            socket_id=socket_id,
        )
        started = trio.current_time()
        try:
            self._check_upgrade(scope, incoming)
            tenant = self._hold_place(incoming)  # no wait between its check and count
        except ProxyError as exc:
            headers, body = app.error_response(exc, incoming)
            can_answer = "websocket.http.response" in scope.get("extensions", {})
            await socket.deny(exc.status, headers, body, can_answer=can_answer)
            upgrade.kind = exc.kind or OutcomeKind.PROXY_ERROR
            upgrade.status, upgrade.detail = exc.status, exc.message
            app.count_websocket(str(exc.status))
            app.report(upgrade, counted=False)
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
            SocketStats(opened_at=started),
            SOCKETS.conversation(server.websocket_max_state_bytes),
        )
        self._open.add(state)
        app.count_websocket("accepted", opened=1)
        upgrade.status = 101
        try:
            await run_socket(
                socket,
                lambda text: self._turn(state, text),
                SocketLimits(
                    server.websocket_max_queued,
                    server.websocket_max_age,
                    app.config.timeouts.client_write,
                    server.max_request_body_bytes,
                ),
                state.stats,
                draining=app.draining,
                wait_for_drain=app.wait_for_drain,
            )
            upgrade.kind = OutcomeKind.COMPLETED
        finally:
            self._open.discard(state)
            self._free_place(tenant)
            state.conversation.forget()
            app.count_websocket(None, opened=-1)
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                for upstream in state.upstream_sockets.values():
                    await upstream.aclose()
            upgrade.total_s = trio.current_time() - started
            upgrade.events = state.responses
            upgrade.detail = state.stats.ended_by
            upgrade.kind = upgrade.kind or OutcomeKind.CLIENT_DISCONNECTED
            app.report(upgrade, counted=False)

    def _check_upgrade(self, scope: dict[str, Any], incoming: Incoming) -> None:
        """Raise what refuses the upgrade (before it is accepted)."""
        app = self._app
        api = api_for("POST", incoming.route_path)
        if api is None or not api.socket or incoming.route_path != api.path.template:
            raise ProxyError(
                404,
                f"no WebSocket is served at {incoming.path[:200]}: the Responses "
                "WebSocket mode is GET /v1/responses",
                "invalid_request_error",
                code="not_found",
            )
        verdict = app.verdict(scope)
        if verdict.refusal is not None:
            raise verdict.refusal
        if not app.config.server.websocket:
            raise ProxyError(
                426,
                "the Responses WebSocket mode is off on this proxai (server.websocket = "
                "false): use POST /v1/responses",
                "invalid_request_error",
                code="websocket_not_supported",
            )
        app.admit_socket(incoming)

    def _hold_place(self, incoming: Incoming) -> str:
        """Count the socket in its key's ``server.websocket_max_per_key`` (raises the
        429 past it); the key's tenant, whose place :meth:`_free_place` frees."""
        tenant = self._app.tenant(incoming)
        limit = self._app.config.server.websocket_max_per_key
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
        return tenant

    def _free_place(self, tenant: str) -> None:
        held = self._per_key.pop(tenant, 1) - 1
        if held > 0:
            self._per_key[tenant] = held

    # -- a turn ----------------------------------------------------------------------

    async def _turn(self, state: _Socket, text: str) -> bool:
        """One client frame: a response, an error frame, or nothing (``False``: the
        client stopped reading, the socket must end)."""
        app = self._app
        try:
            frame = SOCKETS.read_frame(text)
        except ProxyError as exc:
            return await self._send_own(
                state, SOCKETS.error_frame(exc.status, exc.body(), exc.headers)
            )
        if frame is None:
            return True
        incoming = app.turn_incoming(state.headers)
        outcome = Outcome(
            "response.create",
            SOCKET_API.path.template,
            request_id=incoming.request_id,
            transport="websocket",
            socket_id=state.socket_id,
        )
        trace = app.trace(incoming, outcome)
        state.responses += 1
        record = SOCKETS.record(app.config.server.websocket_max_state_bytes)
        downstream = TurnDownstream(
            state.socket, record, client_write=app.config.timeouts.client_write
        )
        admitted = False
        admission = None
        try:
            admission = await app.admit_turn(incoming, outcome)
            admitted = True
            model = frame.get("model")
            route = app.planner.route(incoming, model if isinstance(model, str) else None)
            first = self._upstream(route.upstreams[0])
            if first.websocket:
                # The frame's fields in their order; ``stream`` said, as the socket implies.
                body = orjson.dumps(
                    {**{k: v for k, v in frame.items() if k != "type"}, "stream": True}
                )
                clients = {
                    name: self._upstream_socket(state, name)
                    for name in route.upstreams
                    if self._upstream(name).websocket
                }
                await app.relay_request(
                    incoming, body, downstream, outcome, None, clients, trace=trace
                )
                _cut(state.socket, outcome, app.config.timeouts.client_write)
                return outcome.kind is not OutcomeKind.CLIENT_STALLED
            keeps_state = UPSTREAM_PROTOCOLS[first.protocol].keeps_state
            # proxai's stored responses hold only what upstreams that keep none answered.
            resolve = app.stores_responses and not keeps_state
            turn = state.conversation.turn(
                frame, upstream_keeps_state=keeps_state, others_resolve=resolve
            )
            if turn.warm_up:
                await self._warm_up(state, frame, record, outcome)
            else:
                await app.relay_request(incoming, turn.body, downstream, outcome, None, trace=trace)
                _cut(state.socket, outcome, app.config.timeouts.client_write)
            state.conversation.keep(turn, record)
        except ProxyError as exc:
            headers = (*exc.headers, *incoming.id_header)
            if not await self._send_own(
                state, SOCKETS.error_frame(exc.status, exc.body(), headers)
            ):
                outcome.kind = OutcomeKind.CLIENT_STALLED
                return False
            outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
            outcome.status, outcome.detail = exc.status, exc.message
        finally:
            if admitted:
                await app.leave_turn(admission, outcome)
            app.report(outcome, trace=trace)
        return outcome.kind is not OutcomeKind.CLIENT_STALLED

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
        return await state.socket.send_within(frame, self._app.config.timeouts.client_write)

    def _upstream(self, name: str) -> UpstreamConfig:
        upstream = self._app.config.upstream_named(name)
        assert upstream is not None  # routes name configured upstreams only
        return upstream

    def _upstream_socket(self, state: _Socket, name: str) -> UpstreamSocket:
        """The upstream socket this client socket holds to ``name`` (made on first use,
        closed when the client socket ends)."""
        upstream = state.upstream_sockets.get(name)
        if upstream is None:
            upstream = state.upstream_sockets[name] = self._app.upstream_socket(name)
        return upstream


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
