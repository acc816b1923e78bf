"""A whole proxai app over in-memory ASGI and a scripted in-memory upstream.

:class:`MemoryProxy` runs :class:`~proxai.service.app.ProxaiApp` inside the
test's own trio run, with a :class:`~proxai.testing.memory.ScriptTransport` as
every upstream, so under ``autojump_clock`` every timestamp is an exact virtual
time: deadline tests check their instants, and run in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import httpx
import trio

from ..config import Config, UpstreamConfig
from ..config_file import load_config
from ..outcome import Outcome
from ..service.app import ProxaiApp
from ..upstream.client import UpstreamClient
from .memory import ScriptTransport
from .streams import payloads
from .upstream import Responder, Script
from .ws_upstream import ScriptedSocketUpstream

__all__ = ["MEMORY_TIMEOUTS", "MemoryExchange", "MemoryProxy"]

#: The virtual-clock tests' deadlines (seconds), each distinct so a test can tell them apart.
MEMORY_TIMEOUTS = {
    "connect": 5.0,
    "first_byte": 10.0,
    "idle": 30.0,
    "tool_arguments": 20.0,
    "total": 1000.0,
    "request_body": 5.0,
    "client_write": 500.0,
}


@attrs.define
class MemoryExchange:
    """What the in-memory client saw, with virtual times."""

    started_at: float
    status: int | None = None
    headers: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    chunks: list[tuple[float, bytes]] = attrs.field(factory=list)
    ended_at: float | None = None
    #: The app returned without ending the body: a real server closes the connection
    #: and the client sees the response broken.
    aborted: bool = False
    outcome: Outcome | None = None

    @property
    def body(self) -> bytes:
        return b"".join(c for _, c in self.chunks)

    @property
    def elapsed(self) -> float:
        assert self.ended_at is not None
        return self.ended_at - self.started_at

    def events(self) -> list[dict[str, Any]]:
        return payloads(self.body)

    def json(self) -> Any:
        return json.loads(self.body)


class MemoryProxy:
    """A ProxaiApp whose upstream is a :class:`ScriptTransport`."""

    def __init__(
        self,
        responder: Responder | Sequence[Script],
        *,
        upstreams: dict[str, dict[str, Any]] | None = None,
        server: dict[str, Any] | None = None,
        routes: list[dict[str, Any]] | None = None,
        retries: dict[str, Any] | None = None,
        auth: dict[str, Any] | None = None,
        upstream: dict[str, Any] | None = None,
        socket_upstream: ScriptedSocketUpstream | None = None,
        state: dict[str, Any] | None = None,
        compaction: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
        live_view: dict[str, Any] | None = None,
        telemetry: dict[str, Any] | None = None,
        transport_factory: Callable[[UpstreamConfig], httpx.AsyncBaseTransport] | None = None,
        **timeouts: float,
    ) -> None:
        """``upstreams`` adds ``[upstreams.NAME]`` tables; every upstream plays ``responder``.

        Retries are off (``max_attempts = 1``) unless ``retries`` is given, so a fault
        shows as it is even on a route of several upstreams; tests of retries turn them
        on (``retries={}``: proxai's defaults). ``upstream`` adds keys to the default
        ``[upstream]``. ``socket_upstream``: where the
        ``websocket = true`` upstreams' sockets connect, in memory (it must be serving).
        ``state``, ``compaction``, ``limits``, ``live_view``, ``telemetry``: those tables.
        ``transport_factory``: each upstream's transport instead of the shared
        :class:`ScriptTransport` (a :class:`~proxai.testing.stepped.SteppedUpstream`'s,
        played step by step).
        """
        self.transport = ScriptTransport(responder)
        overrides: dict[str, Any] = {
            "upstream": {
                "base_url": "http://upstream.test/v1",
                "api_key": "sk-up",
                **(upstream or {}),
            },
            "timeouts": {**MEMORY_TIMEOUTS, **timeouts},
            "retries": retries if retries is not None else {"max_attempts": 1},
        }
        if routes is not None:
            overrides["routes"] = routes
        if auth is not None:
            overrides["auth"] = auth
        if upstreams:
            overrides["upstreams"] = upstreams
        if server:
            overrides["server"] = server
        if state:
            overrides["state"] = state
        if compaction is not None:
            overrides["compaction"] = compaction
        if limits:
            overrides["limits"] = limits
        if live_view is not None:
            overrides["live_view"] = live_view
        if telemetry is not None:
            overrides["telemetry"] = telemetry
        self.config: Config = load_config(None, overrides=overrides)
        self.outcomes: list[Outcome] = []
        self.app = ProxaiApp(
            self.config,
            on_outcome=self.outcomes.append,
            upstream_factory=lambda upstream, timeouts, name: UpstreamClient(
                upstream,
                timeouts,
                transport=self.transport
                if transport_factory is None
                else transport_factory(upstream),
                name=name,
            ),
            socket_opener=None if socket_upstream is None else socket_upstream.open_stream,
        )

    async def __aenter__(self) -> MemoryProxy:
        # A virtual clock starts at 0, trio's real one never does: start far from 0 so
        # that no deadline can pass for correct by counting from the clock's origin.
        if trio.current_time() < 10_000:
            await trio.sleep(10_000)
        self._lifespan = contextlib.AsyncExitStack()
        nursery = await self._lifespan.enter_async_context(trio.open_nursery())
        await self.app.startup(nursery)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.app.shutdown()
        await self._lifespan.aclose()

    async def request(
        self,
        body: dict[str, Any] | bytes,
        *,
        path: str = "/v1/responses",
        read_delay: float | Callable[[int], float] = 0.0,
        disconnect_after: float | None = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
        method: str = "POST",
        body_stalls: bool = False,
        client: tuple[str, int] | None = None,
    ) -> MemoryExchange:
        """One request; ``read_delay`` makes the client take that long to accept each
        body message (a slow reader), or the n-th message when it is a function of n;
        ``disconnect_after`` hangs up at that time; ``body_stalls`` sends half the
        body and then nothing; ``client``: the peer's address in the scope (none unless
        given; the live view answers loopback ones only)."""
        raw = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
        exchange = MemoryExchange(started_at=trio.current_time())
        reported = len(self.outcomes)
        gone = trio.Event()
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                # body_stalls: the first half of the body, then nothing more
                half = raw[: len(raw) // 2] if body_stalls else raw
                return {"type": "http.request", "body": half, "more_body": body_stalls}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await trio.lowlevel.checkpoint()  # a real server's send() yields
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                exchange.headers = list(message["headers"])
                return
            if message.get("body"):
                delay = read_delay(len(exchange.chunks)) if callable(read_delay) else read_delay
                if delay:
                    await trio.sleep(delay)
            if message.get("body"):
                exchange.chunks.append((trio.current_time(), message["body"]))
            if not message.get("more_body", False):
                exchange.ended_at = trio.current_time()

        path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": query.encode(),
            "headers": [(b"content-type", b"application/json"), *headers],
        }
        if client is not None:
            scope["client"] = client
        async with trio.open_nursery() as nursery:
            if disconnect_after is not None:

                async def hang_up() -> None:
                    await trio.sleep(disconnect_after)
                    gone.set()

                nursery.start_soon(hang_up)
            await self.app(scope, receive, send)
            if exchange.ended_at is None and exchange.status is not None and not gone.is_set():
                exchange.aborted = True
                exchange.ended_at = trio.current_time()
            nursery.cancel_scope.cancel()
        if len(self.outcomes) > reported:  # /healthz and /readyz leave no record
            exchange.outcome = self.outcomes[-1]
        return exchange
