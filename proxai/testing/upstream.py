"""A scripted upstream: a real HTTP/1.1 server on loopback that plays scripts.

Each request gets a :class:`Script`: what to do before the headers (wait,
stall, reset), the status and headers, then body steps — bytes sent as their
own HTTP chunk, pauses, a stall until the client gives up, a clean end, an
abrupt close or a TCP reset. The server records every request it received and
when the client closed each connection, so tests can check what proxai
forwarded and how fast it let go of the upstream.

It speaks HTTP/1.1 with h11 over trio sockets, so the bytes on the wire are
real: a body goes out chunk by chunk, exactly as scripted.
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import h11
import trio

__all__ = [
    "Close",
    "RecordedRequest",
    "Reset",
    "Script",
    "ScriptedUpstream",
    "Send",
    "Sleep",
    "Stall",
    "sse_event",
]


@attrs.frozen
class Send:
    """Send these bytes as one HTTP chunk."""

    data: bytes


@attrs.frozen
class Sleep:
    """Pause for this many seconds."""

    seconds: float


@attrs.frozen
class Stall:
    """Send nothing more until the client closes the connection."""


@attrs.frozen
class Close:
    """Close the connection now, without ending the body (a FIN mid-response)."""


@attrs.frozen
class Reset:
    """Abort the connection with a TCP reset (RST)."""


Step = Send | Sleep | Stall | Close | Reset

SSE_HEADERS: tuple[tuple[str, str], ...] = (("content-type", "text/event-stream; charset=utf-8"),)


def chat_chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    index: int = 0,
    model: str = "gpt-4o",
    id: str = "chatcmpl-1",
    created: int = 1767225600,
    **extra: Any,
) -> bytes:
    """One data-only ``chat.completion.chunk`` line, as Chat servers stream them: choice
    ``index`` carries ``delta`` (``None``: a ``choices: []`` chunk, like the usage one);
    ``extra`` adds top-level fields (``usage=...``)."""
    choices = [] if delta is None else [{"index": index, "delta": delta, "finish_reason": finish}]
    body = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }
    return sse_event(body, event="")


def sse_event(data: dict[str, Any] | bytes | str, event: str | None = None) -> bytes:
    """One SSE event as OpenAI frames it: ``event: <type>`` and one compact ``data:`` line.

    For a dict, ``event`` defaults to its ``type``; pass ``event=""`` for a
    data-only event (Chat Completions style).
    """
    if isinstance(data, dict):
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
        if event is None:
            event = data.get("type")
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = data
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + payload + b"\n\n"


@attrs.frozen
class Script:
    """What the upstream does for one request.

    ``before_head`` runs before the status line (a :class:`Sleep`, :class:`Stall`,
    :class:`Close` or :class:`Reset`); ``steps`` run after it. When the steps
    run out, the body ends cleanly. ``content_length`` sends a
    ``Content-Length`` for the sum of the :class:`Send` steps instead of
    chunked encoding.
    """

    status: int = 200
    headers: Sequence[tuple[str, str]] = SSE_HEADERS
    steps: Sequence[Step] = ()
    before_head: Sequence[Step] = ()
    content_length: bool = False

    @classmethod
    def sse(
        cls,
        events: Iterable[bytes | dict[str, Any]],
        *,
        delay: float = 0.0,
        chunk_size: int | None = None,
        then: Sequence[Step] = (),
        headers: Sequence[tuple[str, str]] = SSE_HEADERS,
    ) -> Script:
        """An event stream: each event (or each ``chunk_size`` bytes of the whole
        stream) sent as its own chunk, ``delay`` seconds apart, then ``then``."""
        raw = [e if isinstance(e, bytes) else sse_event(e) for e in events]
        if chunk_size is not None:
            whole = b"".join(raw)
            raw = [whole[i : i + chunk_size] for i in range(0, len(whole), chunk_size)]
        steps: list[Step] = []
        for i, data in enumerate(raw):
            if delay and i:
                steps.append(Sleep(delay))
            steps.append(Send(data))
        steps.extend(then)
        return cls(status=200, headers=headers, steps=tuple(steps))

    @classmethod
    def json(
        cls, body: Any, *, status: int = 200, headers: Sequence[tuple[str, str]] = ()
    ) -> Script:
        """A JSON response with a ``Content-Length``."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        return cls(
            status=status,
            headers=(("content-type", "application/json"), *headers),
            steps=(Send(data),),
            content_length=True,
        )

    @property
    def body(self) -> bytes:
        """Every byte the steps send, in order."""
        return b"".join(s.data for s in self.steps if isinstance(s, Send))


@attrs.define
class RecordedRequest:
    """A request as the scripted upstream received it (times are ``trio.current_time()``)."""

    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    received_at: float
    response_done_at: float | None = None
    #: Body bytes of the response handed to the connection so far.
    bytes_sent: int = 0
    #: When the client closed the connection while this request was the last on it.
    closed_at: float | None = None
    _closed: trio.Event = attrs.field(factory=trio.Event, repr=False)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), decoded."""
        key = name.lower().encode()
        for n, v in self.headers:
            if n.lower() == key:
                return v.decode("latin-1")
        return None

    def json(self) -> Any:
        return json.loads(self.body)

    async def wait_closed(self) -> float:
        """Wait until the client closes this request's connection; return when it did."""
        await self._closed.wait()
        assert self.closed_at is not None
        return self.closed_at

    def _mark_closed(self) -> None:
        if self.closed_at is None:
            self.closed_at = trio.current_time()
            self._closed.set()


Responder = Callable[[RecordedRequest], Script]


async def loopback_listeners(
    ssl_context: ssl.SSLContext | None,
) -> tuple[int, list[trio.abc.Listener[trio.abc.Stream]]]:
    """Listeners on 127.0.0.1, on a port the OS chose (https with ``ssl_context``)."""
    tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(tcp)
    if ssl_context is not None:
        listeners = [trio.SSLListener(t, ssl_context, https_compatible=True) for t in tcp]
    return tcp[0].socket.getsockname()[1], listeners


async def receive_request(stream: trio.abc.Stream, conn: h11.Connection) -> RecordedRequest | None:
    """The next whole request on ``conn`` (a server's), or ``None`` once the client closed."""
    head: h11.Request | None = None
    body: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.ConnectionClosed):
            return None
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return RecordedRequest(
                method=head.method.decode(),
                target=head.target.decode(),
                headers=[(bytes(n), bytes(v)) for n, v in head.headers],
                body=b"".join(body),
                received_at=trio.current_time(),
            )


ScriptT = TypeVar("ScriptT")


def in_order(
    scripts: Sequence[ScriptT], seen: Callable[[], int], owner: str
) -> Callable[[Any], ScriptT]:
    """A responder playing ``scripts`` in the order requests arrive (``seen()``: how
    many have, this one included), the last one repeating."""
    played = list(scripts)
    if not played:
        raise ValueError(f"{owner} needs at least one script")

    def respond(_: Any) -> ScriptT:
        return played[min(seen() - 1, len(played) - 1)]

    return respond


class ScriptedUpstream:
    """Serve scripts on a loopback port chosen by the OS.

    ``responder`` is a function from the received request to its script, or a
    sequence of scripts played in the order requests arrive (the last one
    repeats). Start it with ``url = await nursery.start(upstream.serve)``;
    ``url`` ends in ``/v1``. With ``ssl_context`` it serves https (for tests of
    proxai's upstream TLS verification).
    """

    def __init__(
        self, responder: Responder | Sequence[Script], *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._ssl_context = ssl_context
        self._responder: Responder = (
            responder
            if callable(responder)
            else in_order(responder, lambda: len(self.requests), "ScriptedUpstream")
        )
        self.requests: list[RecordedRequest] = []
        self.connections_opened = 0
        self.connections_closed = 0
        self.port = 0
        self._request_arrived = trio.Condition()
        self._connection_closed = trio.Condition()

    @property
    def base_url(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (port 0) and serve until cancelled."""
        self.port, listeners = await loopback_listeners(self._ssl_context)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.base_url)

    async def wait_for_requests(self, count: int) -> list[RecordedRequest]:
        """Wait until at least ``count`` requests have arrived."""
        async with self._request_arrived:
            while len(self.requests) < count:
                await self._request_arrived.wait()
        return self.requests[:count]

    @property
    def open_connections(self) -> int:
        """Connections from clients that neither side has closed yet."""
        return self.connections_opened - self.connections_closed

    async def wait_open_connections(self, at_most: int) -> None:
        """Wait until at most ``at_most`` connections are open (clients closed the rest)."""
        async with self._connection_closed:
            while self.open_connections > at_most:
                await self._connection_closed.wait()

    async def _handle(self, stream: trio.abc.Stream) -> None:
        self.connections_opened += 1
        conn = h11.Connection(h11.SERVER)
        last: RecordedRequest | None = None
        try:
            while True:
                request = await self._read_request(stream, conn)
                if request is None:
                    break
                last = request
                keep_going = await self._respond(stream, conn, request)
                if not keep_going or conn.our_state is not h11.DONE:
                    break
                request.response_done_at = trio.current_time()
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            self.connections_closed += 1
            if last is not None:
                last._mark_closed()
            with trio.CancelScope(shield=True):
                await stream.aclose()
                async with self._connection_closed:
                    self._connection_closed.notify_all()

    async def _read_request(
        self, stream: trio.abc.Stream, conn: h11.Connection
    ) -> RecordedRequest | None:
        request = await receive_request(stream, conn)
        if request is not None:
            self.requests.append(request)
            async with self._request_arrived:
                self._request_arrived.notify_all()
        return request

    async def _respond(
        self, stream: trio.abc.Stream, conn: h11.Connection, request: RecordedRequest
    ) -> bool:
        """Play the script; return False when the connection must not be reused."""
        script = self._responder(request)
        client_gone = done = False
        async with trio.open_nursery() as nursery:

            async def watch_client() -> None:
                # The client sends nothing while a response is under way: any read
                # that returns means it closed (or reset) the connection.
                nonlocal client_gone
                try:
                    data = await stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    client_gone = True
                    request._mark_closed()
                    nursery.cancel_scope.cancel()
                else:
                    conn.receive_data(bytes(data))

            nursery.start_soon(watch_client)
            try:
                done = await self._play(stream, conn, script, request)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The client hung up (or reset) while the script was still sending.
                client_gone = True
                request._mark_closed()
            nursery.cancel_scope.cancel()
        return done and not client_gone

    async def _play(
        self,
        stream: trio.abc.Stream,
        conn: h11.Connection,
        script: Script,
        request: RecordedRequest,
    ) -> bool:
        for step in script.before_head:
            if not await self._control(stream, step):
                return False
        headers = [(k, v) for k, v in script.headers]
        if script.content_length:
            headers.append(("content-length", str(len(script.body))))
        await stream.send_all(conn.send(h11.Response(status_code=script.status, headers=headers)))
        for step in script.steps:
            if isinstance(step, Send):
                if step.data:
                    await stream.send_all(conn.send(h11.Data(data=step.data)))
                    request.bytes_sent += len(step.data)
            elif not await self._control(stream, step):
                return False
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return True

    async def _control(self, stream: trio.abc.Stream, step: Step) -> bool:
        """Run a non-sending step; False when it ended the connection."""
        if isinstance(step, Sleep):
            await trio.sleep(step.seconds)
            return True
        if isinstance(step, Stall):
            await trio.sleep(math.inf)
        if isinstance(step, Reset):
            reset_on_close(stream)
        await stream.aclose()
        return False


def reset_on_close(stream: trio.abc.Stream) -> None:
    """Make closing ``stream`` (a socket's, or TLS over one) abort it with a TCP reset."""
    raw = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    assert isinstance(raw, trio.SocketStream)
    raw.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
