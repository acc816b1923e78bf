"""The no-hang machine: hypothesis's stateful testing over a real proxai on virtual time.

A :class:`World` is one proxai (:class:`~proxai.testing.memory_proxy.MemoryProxy`: the
real app, relay, observers, translators and writer) in front of a
:class:`~proxai.testing.stepped.SteppedUpstream`, with a client over SSE or over the
Responses WebSocket (:func:`~proxai.testing.memory_socket.open_memory_socket`). It lives
in a trio run of its own, in a thread, on a :class:`~trio.testing.MockClock` that moves
only when told: every command (a rule's step) runs in that run through
``trio.from_thread.run`` and returns once every task is blocked, so between two steps
nothing happens and the machine looks at a still picture. Advancing the clock jumps
from deadline to deadline up to the target, as ``autojump_clock`` would, so every
deadline fires at its exact instant.

:class:`ProxaiMachine` is the hypothesis side: the rules are the upstream's, the
client's and the clock's moves; after each one it checks the five invariants of
docs/cancellation.md ("The no-hang machine").
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import orjson
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from proxai.errors import ending_code
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.table import WireApi
from proxai.protocols.tracking import AFTER_TERMINAL_GRACE
from proxai.testing import stream_checks as checks
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.memory_socket import Closed, MemorySocket, open_memory_socket
from proxai.testing.soak import live_tasks
from proxai.testing.stepped import SteppedExchange, SteppedUpstream
from proxai.wire.sse import SSEFramer
from tests.faults.streams import STREAMS, Event, request_body, upstream_error

T = TypeVar("T")

TIMEOUTS = {
    "connect": 5.0,
    "first_byte": 8.0,
    "tool_arguments": 12.0,
    "idle": 20.0,
    "client_write": 30.0,
    "total": 150.0,
    "request_body": 5.0,
}
DRAIN = 10.0
MAX_ATTEMPTS = 2
#: Messages (SSE) or frames (socket) the client's connection holds unread before the
#: server's send blocks: a small window, so a client that stops reading is felt at once.
WINDOW = 2
#: Requests (SSE) or turns (socket) one example may make.
MAX_REPLIES = 3
#: Float slack on deadline instants (the machine adds them up as proxai does, not
#: necessarily in the same order).
EPS = 1e-6

#: Upstream kind for each upstream API: native where the client's API is the upstream's.
KIND = {
    WireApi.RESPONSES: "openai_responses",
    WireApi.CHAT: "openai_chat",
    WireApi.MESSAGES: "anthropic_messages",
}
PATH = {
    WireApi.RESPONSES: "/v1/responses",
    WireApi.CHAT: "/v1/chat/completions",
    WireApi.MESSAGES: "/v1/messages",
}
TERMINAL_TYPES = ("response.completed", "response.incomplete", "response.failed")


@attrs.frozen
class Start:
    """A start state: the client's API, the upstream's API, the carrier, tool calls."""

    client: WireApi
    upstream: WireApi
    socket: bool
    tools: int

    @property
    def id(self) -> str:
        carrier = "ws" if self.socket else "sse"
        return f"{self.client.value}-{self.upstream.value}-{carrier}-tools{self.tools}"

    @property
    def passes_through(self) -> bool:
        return self.client is self.upstream


START_STATES = [
    Start(client, upstream, socket, tools)
    for client in WireApi
    for upstream in WireApi
    for socket in (False, True)
    if not socket or client is WireApi.RESPONSES
    for tools in (0, 2)
]


class Failure(AssertionError):
    """An invariant that did not hold."""


# --- the upstream's side, as the machine played it ------------------------------------------


@attrs.define(eq=False)
class Play:
    """What the machine has played on one upstream exchange."""

    exchange: SteppedExchange
    events: list[Event]
    next: int = 0  # the next event to send
    partial: int = 0  # bytes of events[next] already sent
    head_at: float | None = None
    last_bytes_at: float | None = None
    #: The guarded calls open, and when each was last fed (opened or an argument delta).
    feeds: dict[str, float] = attrs.field(factory=dict)
    terminal_at: float | None = None
    done_at: float | None = None  # the body ended, or the connection broke
    how: str | None = None  # "eof", "reset", "status"
    answered: int | None = None  # an error status answered before any stream

    @property
    def remaining(self) -> bytes:
        return self.events[self.next].data[self.partial :]

    @property
    def streaming(self) -> bool:
        return self.head_at is not None and self.answered is None and self.done_at is None


@attrs.define(eq=False)
class Reply:
    """One response the client asked for: an HTTP request, or a turn on the socket."""

    index: int
    started_at: float
    status: int | None = None
    body: bytearray = attrs.field(factory=bytearray)
    frames: list[dict[str, Any]] = attrs.field(factory=list)
    ended_at: float | None = None
    #: The request's relay returned (SSE: the app call; socket: the turn's record).
    finished_at: float | None = None
    aborted: bool = False
    closed_socket: bool = False  # the socket closed before this turn ended
    hung_up_at: float | None = None
    backpressured: bool = False
    plays: list[Play] = attrs.field(factory=list)
    outcome: Outcome | None = None
    ending: tuple[str, Any, Any] | None = None  # ("complete"|"http"|"error", status/code, ...)
    recorded: bool = False  # its outcome record was checked
    #: A turn still queued when the socket ended: it never ran.
    dropped: bool = False
    gone: trio.Event = attrs.field(factory=trio.Event)

    @property
    def over(self) -> bool:
        return self.ended_at is not None or self.hung_up_at is not None


# --- the trio side ---------------------------------------------------------------------------


class World:
    """proxai, its stepped upstream and one client, in a trio run of their own."""

    def __init__(self, start: Start) -> None:
        self.start = start
        self.clock = trio.testing.MockClock()
        self.upstream = SteppedUpstream(on_exchange=self._arrived)
        self.replies: list[Reply] = []
        self.pending: list[bytes] = []  # SSE: delivered, not read yet
        self.socket: MemorySocket | None = None
        self.frames_read = 0
        self.socket_closed = False  # by either side
        self.drain_at: float | None = None
        self.baseline_tasks = 0
        self.drain_running = 0  # the drain's own task, while it runs
        self._room = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._nursery: trio.Nursery | None = None

    # -- the bridge ------------------------------------------------------------------------

    def open(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        self.baseline_tasks = self.call(self.tasks)

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run one step in the trio run, then let it settle."""
        if self._error is not None:
            raise Failure(f"the trio run ended: {self._error!r}") from self._error

        async def step() -> T:
            result = await afn(*args)
            await self.settle()
            return result

        try:
            return trio.from_thread.run(step, trio_token=self._token)
        except trio.RunFinishedError:
            assert self._thread is not None
            self._thread.join(5)
            raise Failure(f"the trio run ended: {self._error!r}") from self._error

    def close(self) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive() and self._error is None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._closing.set, trio_token=self._token)
        self._thread.join(30)
        if self._thread.is_alive():
            raise Failure("the trio run did not end after the test")
        self._thread = None
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            trio.run(self._main, clock=self.clock)
        except BaseException as exc:  # reported to the test thread
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._closing = trio.Event()
        self.clock.jump(10_000)  # MemoryProxy starts the clock far from 0
        start = self.start
        upstream_table: dict[str, Any] = {"protocol": KIND[start.upstream]}
        if start.passes_through and start.client is not WireApi.MESSAGES:
            upstream_table = {}  # the default openai kind speaks Responses and Chat
        self.proxy = MemoryProxy(
            [],
            upstream=upstream_table,
            transport_factory=self.upstream.transport,
            retries={"max_attempts": MAX_ATTEMPTS, "budget_min_per_second": 1000},
            server={"drain_timeout": DRAIN, "max_concurrent_streams": 8},
            **TIMEOUTS,
        )
        async with (
            self.upstream.running(),
            self.proxy,
            trio.open_nursery() as nursery,
            contextlib.AsyncExitStack() as sockets,
        ):
            self._nursery = nursery
            if start.socket:
                self.socket = await sockets.enter_async_context(
                    open_memory_socket(self.proxy.app, buffer=WINDOW)
                )
                await self.socket.accepted.wait()
            await self.settle()
            self._ready.set()
            await self._closing.wait()
            nursery.cancel_scope.cancel()

    def _arrived(self, exchange: SteppedExchange) -> None:
        """A request upstream belongs to the response in flight: proxai relays one at a
        time here (one HTTP request at a time; a socket's turns one after another)."""
        if self.socket is not None:
            done = sum(1 for o in self.proxy.outcomes if o.method == "response.create")
            owner = self.replies[done] if done < len(self.replies) else None
        else:
            owner = next((r for r in self.replies if r.finished_at is None), None)
        if owner is None:
            raise Failure(f"an upstream request no response asked for: {exchange.request}")
        owner.plays.append(Play(exchange, STREAMS[self.start.upstream](self.start.tools)))

    async def tasks(self) -> int:
        """The tasks of the run but the upstream's."""
        return live_tasks() - self.upstream.task_count()

    # -- time ------------------------------------------------------------------------------

    @staticmethod
    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, every deadline on the way firing at its
        instant (and everything it wakes running) before the next."""
        target = trio.current_time() + seconds
        for _ in range(100_000):
            await self.settle()
            gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
            now = trio.current_time()
            if now + gap > target:
                if target > now:
                    self.clock.jump(target - now)
                await self.settle()
                return
            self.clock.jump(max(gap, 0.0))
        raise Failure("the clock would not reach its target: a deadline keeps recurring")

    @property
    def now(self) -> float:
        return self.clock.current_time()

    # -- the client ------------------------------------------------------------------------

    async def request(self) -> None:
        """The client's next request (SSE) or ``response.create`` (socket)."""
        start = self.start
        body = request_body(start.client, bool(start.tools))
        reply = Reply(len(self.replies), trio.current_time())
        self.replies.append(reply)
        if self.socket is not None:
            frame = {"type": "response.create", **{k: v for k, v in body.items() if k != "stream"}}
            await self.socket.send(frame)
            return
        assert self._nursery is not None
        self._nursery.start_soon(self._http, reply, json.dumps(body).encode())

    async def _http(self, reply: Reply, raw: bytes) -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await reply.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await trio.lowlevel.checkpoint()
            if reply.gone.is_set():
                return  # hypercorn drops what is sent to a connection that went away
            if message["type"] == "http.response.start":
                reply.status = message["status"]
                return
            data = message.get("body", b"")
            if data:
                # hypercorn's write is shielded: nothing the app does ends it, only the
                # client reading (or leaving)
                with trio.CancelScope(shield=True):
                    while len(self.pending) >= WINDOW and not reply.gone.is_set():
                        await self._room.wait()
                if reply.gone.is_set():
                    return
                self.pending.append(data)
                reply.body += data
            if not message.get("more_body", False):
                reply.ended_at = trio.current_time()

        scope = {
            "type": "http",
            "method": "POST",
            "path": PATH[self.start.client],
            "query_string": b"",
            "headers": [(b"host", b"localhost"), (b"content-type", b"application/json")],
        }
        try:
            await self.proxy.app(scope, receive, send)
        finally:
            reply.finished_at = trio.current_time()
            if reply.status is not None and reply.ended_at is None and not reply.gone.is_set():
                reply.aborted = True
                reply.ended_at = trio.current_time()

    async def read(self, everything: bool) -> None:
        if self.socket is not None:
            while self.socket.receive_nowait() is not None:
                self.frames_read += 1
                if not everything:
                    break
            return
        if everything:
            self.pending.clear()
        elif self.pending:
            self.pending.pop(0)
        self._room.set()
        self._room = trio.Event()

    def unread(self) -> int:
        if self.socket is not None:
            return len(self.socket.delivered) - self.frames_read
        return len(self.pending)

    async def hang_up(self, close_frame: bool = False) -> None:
        """The client leaves: over SSE its connection ends; on a socket it hangs up (the
        connection gone) or, with ``close_frame``, sends a close frame and waits for
        the server's answer, as the SDK's ``connection.close()`` does."""
        now = trio.current_time()
        if self.socket is not None:
            done = sum(1 for o in self.proxy.outcomes if o.method == "response.create")
            for reply in self.replies:
                if not reply.over:
                    reply.hung_up_at = now
                    reply.dropped = reply.index > done  # still queued: it never runs
            self.socket_closed = True
            if close_frame:
                await self.socket.send_close(1000)
            else:
                await self.socket.close()
            return
        reply = self.replies[-1]
        reply.hung_up_at = now
        reply.gone.set()
        self._room.set()
        self._room = trio.Event()

    async def begin_drain(self) -> None:
        self.drain_at = trio.current_time()
        assert self._nursery is not None

        async def drain() -> None:
            self.drain_running = 1
            try:
                await self.proxy.app.drain()
            finally:
                self.drain_running = 0

        self._nursery.start_soon(drain)

    # -- the upstream ----------------------------------------------------------------------

    async def head(self, play: Play) -> None:
        await play.exchange.head()
        play.head_at = play.last_bytes_at = trio.current_time()

    async def answer(self, play: Play, status: int, retry_after: bool) -> None:
        headers = [("retry-after", "1")] if retry_after else []
        await play.exchange.answer(status, upstream_error(self.start.upstream, status), headers)
        play.answered = status
        play.head_at = play.done_at = trio.current_time()
        play.how = "status"

    async def send(self, play: Play, cut: int | None) -> None:
        now = trio.current_time()
        data = play.remaining if cut is None else play.remaining[:cut]
        await play.exchange.send(data)
        play.last_bytes_at = now
        play.partial += len(data)
        event = play.events[play.next]
        if play.partial < len(event.data):
            return
        play.next += 1
        play.partial = 0
        for ident in event.ends:
            play.feeds.pop(ident, None)
        if event.opens is not None:
            play.feeds[event.opens] = now
        if event.feeds is not None and event.feeds in play.feeds:
            play.feeds[event.feeds] = now
        if event.terminal:
            play.terminal_at = now

    async def end(self, play: Play) -> None:
        await play.exchange.end()
        play.done_at = trio.current_time()
        play.how = "eof"

    async def reset(self, play: Play) -> None:
        await play.exchange.reset()
        play.done_at = trio.current_time()
        play.how = "reset"


# --- what the client's ending says -----------------------------------------------------------


def sse_of_frames(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: " + str(f.get("type")).encode() + b"\ndata: " + orjson.dumps(f) + b"\n\n"
        for f in frames
    )


def _openai_error(body: bytes, wire: WireApi) -> str:
    framer = SSEFramer()
    frames = [f for f in framer.feed(body) if f.data is not None]
    if wire is WireApi.CHAT:
        return str(json.loads(frames[-2].data)["error"]["code"])  # type: ignore[arg-type]
    error = json.loads(frames[-2].data)  # type: ignore[arg-type]
    return str(error["code"])


def classify(client: WireApi, reply: Reply) -> tuple[str, Any, Any]:
    """("complete", final, None), ("error", code or type, None) in the stream, or
    ("http", status, code or type): what the client's SDK makes of its ending, after
    proxai's strict checks of the stream."""
    import anthropic
    import openai

    if reply.frames or (reply.status is None and reply.ended_at is not None):
        frames = reply.frames
        last = frames[-1] if frames else {}
        if last.get("type") == "error" and "status" in last:
            error = last.get("error") or {}
            return ("http", last["status"], error.get("code") or error.get("type"))
        body = sse_of_frames(frames)
    else:
        if reply.status != 200:
            payload = json.loads(reply.body)
            error = payload["error"]
            return ("http", reply.status, error.get("code") or error.get("type"))
        body = bytes(reply.body)
    if client is WireApi.RESPONSES:
        checks.check_responses_stream(body)
        try:
            return ("complete", checks.responses_final(body), None)
        except openai.APIError:
            return ("error", _openai_error(body, client), None)
    if client is WireApi.CHAT:
        checks.check_chat_stream(body)
        try:
            return ("complete", checks.chat_final(body), None)
        except openai.APIError:
            return ("error", _openai_error(body, client), None)
    checks.check_messages_stream(body)
    try:
        return ("complete", checks.messages_final(body), None)
    except anthropic.APIStatusError as exc:
        error = exc.body.get("error", {}) if isinstance(exc.body, dict) else {}
        return ("error", error.get("type"), None)


def complete_as_sent(client: WireApi, final: Any, tools: int) -> list[str]:
    """What is wrong with a complete response: it must hold everything the upstream sent
    (the text and every call with its arguments), never a success made up."""
    problems: list[str] = []
    args = '{"city":"Paris"}'
    if client is WireApi.RESPONSES:
        texts = [c.text for o in final.output if o.type == "message" for c in o.content]
        calls = [o.arguments for o in final.output if o.type == "function_call"]
        if final.status != "completed":
            problems.append(f"status {final.status}")
    elif client is WireApi.CHAT:
        message = final.choices[0].message
        texts = [message.content or ""]
        calls = [c.function.arguments for c in message.tool_calls or []]
    else:
        texts = [b.text for b in final.content if b.type == "text"]
        calls = [
            json.dumps(b.input, separators=(",", ":"))
            for b in final.content
            if b.type == "tool_use"
        ]
    if "".join(texts) != "Hello":
        problems.append(f"text {texts!r}")
    if calls != [args] * tools:
        problems.append(f"calls {calls!r}")
    return problems


_ANTHROPIC_OVERLOADED = {
    OutcomeKind.STALLED_FIRST_BYTE,
    OutcomeKind.STALLED_IDLE,
    OutcomeKind.STALLED_TOOL_ARGUMENTS,
    OutcomeKind.TOTAL_TIMEOUT,
    OutcomeKind.SHUTDOWN,
}


_ANTHROPIC_HTTP = {504: "timeout_error", 502: "api_error", 503: "overloaded_error"}


def names(client: WireApi, kind: OutcomeKind, code: Any, status: int | None = None) -> bool:
    """Whether an outcome of ``kind`` is the one an error of ``code`` (a type on
    Anthropic's API) reports (``status``: an HTTP error's, before any stream)."""
    if client is WireApi.MESSAGES and status is not None:
        if code != _ANTHROPIC_HTTP.get(status):
            return False
        code = {504: "upstream_timeout", 502: None, 503: "proxy_shutting_down"}[status]
        return ending_code(kind) == code if code else kind not in _ANTHROPIC_OVERLOADED
    if client is WireApi.MESSAGES:
        if code == "overloaded_error":
            return kind in _ANTHROPIC_OVERLOADED
        return code == "api_error" and kind not in _ANTHROPIC_OVERLOADED
    return ending_code(kind) == code


# --- the machine -----------------------------------------------------------------------------


class ProxaiMachine(RuleBasedStateMachine):
    """Rules: the upstream's, the client's and the clock's moves. Invariants: after each."""

    start: Start  # set by the test for each start state

    def __init__(self) -> None:
        super().__init__()
        self.world = World(self.start)
        self.world.open()
        self.world.call(self.world.request)
        self.frames_seen = 0  # of the socket's delivered frames

    def teardown(self) -> None:
        try:
            if self.world._error is None:
                self._finish()
        finally:
            self.world.close()

    # -- helpers ---------------------------------------------------------------------------

    @property
    def reply(self) -> Reply:
        """The response in progress (the oldest not over), else the last one."""
        for reply in self.world.replies:
            if not reply.over:
                return reply
        return self.world.replies[-1]

    def play(self) -> Play | None:
        """The upstream exchange the machine plays: the latest that can still move."""
        for reply in reversed(self.world.replies):
            for play in reversed(reply.plays):
                if not play.exchange.finished and play.done_at is None:
                    return play
        return None

    # -- the upstream's rules --------------------------------------------------------------

    @precondition(lambda self: (p := self.play()) is not None and p.head_at is None)
    @rule()
    def upstream_sends_its_head(self) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.head, play)

    @precondition(lambda self: (p := self.play()) is not None and p.head_at is None)
    @rule(status=st.sampled_from([429, 500, 503]), retry_after=st.booleans())
    def upstream_answers_an_error(self, status: int, retry_after: bool) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.answer, play, status, retry_after)

    @precondition(
        lambda self: (p := self.play()) is not None and p.streaming and p.next < len(p.events)
    )
    @rule()
    def upstream_sends_the_next_event(self) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.send, play, None)

    @precondition(
        lambda self: (p := self.play()) is not None and p.streaming and p.next < len(p.events)
    )
    @rule(count=st.integers(2, 20))
    def upstream_sends_several_events(self, count: int) -> None:
        """Several events, each its own chunk (so that streams get to their end)."""
        play = self.play()
        assert play is not None
        for _ in range(count):
            if play.next >= len(play.events) or not play.streaming:
                break
            self.world.call(self.world.send, play, None)

    @precondition(
        lambda self: (
            (p := self.play()) is not None
            and p.streaming
            and p.next < len(p.events)
            and len(p.remaining) > 1
        )
    )
    @rule(cut=st.integers(1, 400))
    def upstream_splits_an_event(self, cut: int) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.send, play, min(cut, len(play.remaining) - 1))

    @precondition(lambda self: (p := self.play()) is not None and p.streaming)
    @rule()
    def upstream_ends_its_body(self) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.end, play)

    @precondition(lambda self: self.play() is not None)
    @rule()
    def upstream_resets_the_connection(self) -> None:
        play = self.play()
        assert play is not None
        self.world.call(self.world.reset, play)

    # -- the client's rules ----------------------------------------------------------------

    @precondition(lambda self: self.world.unread() > 0)
    @rule(everything=st.booleans())
    def client_reads(self, everything: bool) -> None:
        self.world.call(self.world.read, everything)

    @precondition(lambda self: not self.reply.over and not self.world.socket_closed)
    @rule()
    def client_hangs_up(self) -> None:
        self.world.call(self.world.hang_up)

    @precondition(
        lambda self: (
            self.world.socket is not None and not self.reply.over and not self.world.socket_closed
        )
    )
    @rule()
    def client_sends_a_close_frame(self) -> None:
        """Distinct from a hang-up: the connection stays, the client says it is leaving."""
        self.world.call(self.world.hang_up, True)

    @precondition(
        lambda self: (
            len(self.world.replies) < MAX_REPLIES
            and (
                (self.world.socket is not None and not self.world.socket_closed)
                or (
                    self.world.socket is None
                    and all(r.finished_at is not None for r in self.world.replies)
                )
            )
        )
    )
    @rule()
    def client_sends_the_next_request(self) -> None:
        self.world.call(self.world.request)

    # -- time and shutdown -----------------------------------------------------------------

    @rule(
        seconds=st.sampled_from(
            [0.25, 0.5, 1.0, 2.0, 4.0, 7.75, 8.0, 11.75, 12.0, 19.75, 20.0, 30.0, 60.0, 150.0]
        )
    )
    def time_passes(self, seconds: float) -> None:
        self.world.call(self.world.advance, seconds)

    @precondition(lambda self: self._next_bound() is not None)
    @rule(offset=st.sampled_from([-0.25, 0.0, 0.25]))
    def time_reaches_a_deadline(self, offset: float) -> None:
        bound = self._next_bound()
        assert bound is not None
        self.world.call(self.world.advance, max(bound - self.world.now + offset, 0.0))

    @precondition(lambda self: self.world.drain_at is None)
    @rule()
    def shutdown_begins(self) -> None:
        self.world.call(self.world.begin_drain)

    # -- the invariants --------------------------------------------------------------------

    @invariant()
    def the_five_invariants(self) -> None:
        self._track()
        world = self.world
        if world.upstream.violations:
            raise Failure(
                f"an upstream connection reused mid-response: {world.upstream.violations}"
            )
        for reply in world.replies:
            self._ending(reply)
            self._deadlines(reply)
            self._released(reply)

    def _track(self) -> None:
        """Note frames delivered to turns, outcomes, and backpressure."""
        world = self.world
        if world.socket is not None:
            turns = world.replies
            delivered = world.socket.delivered
            position = 0
            for when, item in delivered[self.frames_seen :]:
                self.frames_seen += 1
                while position < len(turns) and turns[position].over:
                    position += 1
                if isinstance(item, Closed):
                    world.socket_closed = True
                    for reply in turns[position:]:
                        if not reply.over:
                            reply.closed_socket = True
                            reply.ended_at = when
                            reply.backpressured = reply.backpressured or world.unread() >= WINDOW
                    continue
                if position >= len(turns):
                    raise Failure(f"a frame no turn asked for: {item[:200]!r}")
                frame = json.loads(item)  # type: ignore[arg-type]
                reply = turns[position]
                reply.frames.append(frame)
                kind = frame.get("type")
                if kind in TERMINAL_TYPES or (kind == "error" and "status" in frame):
                    reply.ended_at = when
            outcomes = [o for o in world.proxy.outcomes if o.method == "response.create"]
        else:
            outcomes = [o for o in world.proxy.outcomes if o.method == "POST"]
        for reply, outcome in zip(world.replies, outcomes, strict=False):
            if reply.outcome is None:
                reply.outcome = outcome
                if world.socket is not None:
                    reply.finished_at = world.now
        if world.socket is not None and world.socket.finished.is_set():
            # The handler returned: the connection is gone (a real server closes it),
            # whatever the client had not been told.
            world.socket_closed = True
            for reply in world.replies:
                if reply.outcome is None:
                    reply.dropped = not reply.plays and not reply.frames
                if not reply.over:
                    reply.closed_socket = True
                    reply.ended_at = world.now
                    # the client had left its window full: the cut was for not reading
                    reply.backpressured = reply.backpressured or world.unread() >= WINDOW
        current = self.reply
        if world.unread() >= WINDOW and not current.over:
            current.backpressured = True

    def _ending(self, reply: Reply) -> None:
        """(1) a well-formed ending of the client's own protocol; (4) the record names it;
        (5) pass-through bytes are a prefix of the upstream's, cut at an event boundary."""
        start = self.start
        if reply.ending is None and reply.ended_at is not None:
            if reply.aborted:
                raise Failure(f"response {reply.index} broken off: {bytes(reply.body)[-300:]!r}")
            if reply.closed_socket:
                unstarted = not reply.frames and not reply.plays
                # A turn queued behind one the client stopped reading dies with the
                # socket that was cut for it (a socket cannot hold a turn for later).
                cut_before = unstarted and any(
                    r.outcome is not None and r.outcome.kind is OutcomeKind.CLIENT_STALLED
                    for r in self.world.replies[: reply.index]
                )
                if (
                    reply.hung_up_at is None
                    and not (unstarted and self.world.drain_at is not None)
                    and not reply.backpressured  # cut for not reading (client_write)
                    and not cut_before
                ):
                    raise Failure(
                        f"turn {reply.index}: the socket closed before its ending\n"
                        f"{self._story(reply)}"
                    )
                reply.ending = ("gone", None, None)
                if unstarted:
                    reply.dropped = True  # queued, never run: no record, nothing to free
            else:
                try:
                    reply.ending = classify(start.client, reply)
                except Exception as exc:
                    raise Failure(
                        f"response {reply.index}: the client's SDK or the stream checks refused "
                        f"its ending: {exc!r}\n{self._story(reply)}"
                    ) from exc
                self._justify(reply)
                self._prefix(reply)
        if reply.ending is not None and reply.outcome is not None and not reply.recorded:
            reply.recorded = True
            self._record(reply)

    def _story(self, reply: Reply) -> str:
        lines = [f"start {self.start.id}; response {reply.index} began at {reply.started_at}"]
        for n, play in enumerate(reply.plays):
            lines.append(
                f"  attempt {n}: at {play.exchange.request.received_at} head {play.head_at} "
                f"events {play.next}/{len(play.events)} (+{play.partial} bytes) "
                f"last bytes {play.last_bytes_at} open {play.feeds} done {play.done_at} {play.how} "
                f"answered {play.answered} gone {play.exchange.gone_at}"
            )
        lines.append(
            f"  ended {reply.ended_at} status {reply.status} hung up {reply.hung_up_at} "
            f"backpressured {reply.backpressured} drain {self.world.drain_at} now {self.world.now}"
        )
        body = bytes(reply.body) if not reply.frames else sse_of_frames(reply.frames)
        lines.append(f"  client got: {body[-600:]!r}")
        if reply.outcome is not None:
            lines.append(f"  outcome: {reply.outcome.kind} {reply.outcome.detail}")
        return "\n".join(lines)

    def _stall_passed(self, reply: Reply, when: float) -> bool:
        """Some deadline had passed by ``when`` (on the wall clock: the upstream clock
        proxai measures silence on never runs ahead of it)."""
        t = when + EPS
        if reply.started_at + TIMEOUTS["total"] <= t:
            return True
        if not reply.plays:
            return False
        play = reply.plays[-1]
        if play.head_at is None:
            return play.exchange.request.received_at + TIMEOUTS["first_byte"] <= t
        assert play.last_bytes_at is not None
        if play.last_bytes_at + TIMEOUTS["idle"] <= t:
            return True
        return any(fed + TIMEOUTS["tool_arguments"] <= t for fed in play.feeds.values())

    def _justify(self, reply: Reply) -> None:
        """The ending is one that happened: a success only after the upstream's own, and
        each error's cause among what the machine did."""
        assert reply.ending is not None and reply.ended_at is not None
        what, value, code = reply.ending
        play = reply.plays[-1] if reply.plays else None
        story = self._story(reply)
        drained = self.world.drain_at is not None
        if what == "complete":
            if reply.hung_up_at is not None and reply.hung_up_at < reply.ended_at:
                raise Failure(f"an ending after the client hung up\n{story}")
            assert play is not None
            needed = len(play.events) - (0 if self.start.passes_through else 1)
            if self.start.passes_through and self.start.upstream is WireApi.CHAT:
                # The usage chunk after every finish_reason is the stream's terminal:
                # an upstream that stops there is owed only its [DONE], which proxai adds.
                needed = len(play.events) - 1
            if (
                not self.start.passes_through
                and self.start.upstream is WireApi.CHAT
                and play.how == "eof"
            ):
                # A Chat stream that ends its body cleanly after its finish_reason has
                # said how it ends (issue 38 item 7): the usage chunk and [DONE] may be
                # missing.
                needed = len(play.events) - 2
            if play.next < needed:
                raise Failure(f"a success the upstream never sent\n{story}")
            problems = complete_as_sent(self.start.client, value, self.start.tools)
            if problems:
                raise Failure(
                    f"a complete response that is not the upstream's: {problems}\n{story}"
                )
            return
        if what == "http":
            status = value
            if status in (429, 500, 503) and play is not None and play.answered == status:
                return
            if status == 503 and code in ("proxy_shutting_down", "overloaded_error") and drained:
                return
            if status == 504 and self._stall_passed(reply, reply.ended_at):
                return
            if status == 502 and play is not None and play.how in ("eof", "reset"):
                return
            raise Failure(f"an HTTP {status} ({code}) nothing the machine did explains\n{story}")
        # an error in the stream
        timeout = ("upstream_timeout", "overloaded_error")
        if value in timeout and self._stall_passed(reply, reply.ended_at):
            return
        shutdown = ("proxy_shutting_down", "overloaded_error")
        if (
            value in shutdown
            and self.world.drain_at is not None
            and reply.ended_at + EPS >= self.world.drain_at + DRAIN
        ):
            return
        if value in ("upstream_closed", "api_error") and play is not None and play.how == "eof":
            return
        if value in ("upstream_reset", "api_error") and play is not None and play.how == "reset":
            return
        if value in ("server_error", "api_error") and reply.backpressured:
            return  # the client stopped reading for client_write
        raise Failure(f"an error ({value}) nothing the machine did explains\n{story}")

    def _prefix(self, reply: Reply) -> None:
        """(5) What a pass-through client got is the upstream's bytes up to an event
        boundary, then (only after a fault) proxai's closing."""
        if not self.start.passes_through or not reply.plays or reply.ending is None:
            return
        if reply.ending[0] == "http":
            return
        play = reply.plays[-1]
        boundaries = [0]
        for event in play.events:
            boundaries.append(boundaries[-1] + len(event.data))
        if reply.frames:
            sent = [json.loads(e.data.split(b"data: ", 1)[1]) for e in play.events[: play.next]]
            got = reply.frames
            k = 0
            while k < min(len(sent), len(got)) and sent[k] == got[k]:
                k += 1
            if reply.ending[0] == "complete":
                if k != len(play.events) or len(got) != k:
                    raise Failure(
                        f"frames differ from the upstream's events at {k}\n{self._story(reply)}"
                    )
                return
            # Any other ending: the upstream's events unchanged up to where the client's
            # frames part from them, then only proxai's closing (an error frame, then
            # response.failed once the response had begun), never an upstream event
            # changed, dropped or made up.
            closing = [f.get("type") for f in got[k:]]
            if closing not in (["error"], ["error", "response.failed"]):
                raise Failure(
                    f"after the upstream's first {k} events the client got {closing[:5]}, "
                    f"not proxai's closing\n{self._story(reply)}"
                )
            return
        body = bytes(reply.body)
        up = bytes(play.exchange.sent)
        if reply.ending[0] == "complete":
            done, ends = b"data: [DONE]\n\n", boundaries[-1:]
            if self.start.upstream is WireApi.CHAT and body.endswith(done) and body != up:
                # owed after the usage chunk, the last event but [DONE]: added by proxai
                body, ends = body[: -len(done)], boundaries[-2:-1]
            if body != up[: len(body)] or len(body) not in ends:
                raise Failure(f"a complete body that is not the upstream's\n{self._story(reply)}")
            return
        k = 0
        limit = min(len(body), len(up))
        while k < limit and body[k] == up[k]:
            k += 1
        cut = max(b for b in boundaries if b <= k)
        # the client's bytes from `cut` on must be proxai's closing, not the upstream's
        # half event: the closing starts with a fresh event (b"event:" or b"data:")
        rest = body[cut:]
        if not (rest.startswith(b"event: ") or rest.startswith(b"data: ")):
            raise Failure(
                f"proxai's closing does not start at an event boundary\n{self._story(reply)}"
            )
        tail = body[cut:]
        if up[cut:].startswith(tail[: len(up) - cut]) and len(tail) <= len(up) - cut:
            raise Failure(f"an error ending with no closing of proxai's\n{self._story(reply)}")

    def _record(self, reply: Reply) -> None:
        """(4) The outcome record names the ending that actually happened."""
        assert reply.ending is not None and reply.outcome is not None
        what, value, code = reply.ending
        kind = reply.outcome.kind
        story = self._story(reply)
        if what == "gone":
            ok = kind in (OutcomeKind.CLIENT_DISCONNECTED, OutcomeKind.CLIENT_STALLED)
        elif what == "complete":
            ok = kind is OutcomeKind.COMPLETED
        elif what == "http":
            if reply.outcome.status != value:
                raise Failure(
                    f"outcome status {reply.outcome.status}, the client got {value}\n{story}"
                )
            if kind is OutcomeKind.UPSTREAM_ERROR:
                ok = value in (429, 500, 503)
            else:
                ok = names(self.start.client, kind, code, value)
        else:
            ok = names(self.start.client, kind, value)
            if kind is OutcomeKind.CLIENT_DISCONNECTED and reply.hung_up_at is not None:
                ok = True
        if not ok:
            raise Failure(
                f"the outcome {kind} does not name the ending {reply.ending[:2]}\n{story}"
            )

    def _bound(self, reply: Reply) -> float | None:
        """(2) When the client must have its ending by, if the machine can say exactly
        (a client that reads keeps the upstream clock with the wall clock)."""
        if reply.over or reply.backpressured:
            return None
        bounds: list[float] = []
        if self.world.socket is None:
            bounds.append(reply.started_at + TIMEOUTS["total"])
        elif reply.plays:
            bounds.append(reply.plays[0].exchange.request.received_at + TIMEOUTS["total"])
        if self.world.drain_at is not None and (self.world.socket is None or reply.plays):
            bounds.append(self.world.drain_at + DRAIN)
        if reply.plays:
            play = reply.plays[-1]
            last = len(reply.plays) >= MAX_ATTEMPTS
            if play.head_at is None:
                if last:
                    bounds.append(play.exchange.request.received_at + TIMEOUTS["first_byte"])
            elif play.answered is not None:
                if last:
                    bounds.append(play.done_at or play.head_at)
            elif play.done_at is not None:
                bounds.append(play.done_at)
            elif play.terminal_at is not None:
                bounds.append(play.terminal_at)
            else:
                assert play.last_bytes_at is not None
                bounds.append(play.last_bytes_at + TIMEOUTS["idle"])
                bounds += [fed + TIMEOUTS["tool_arguments"] for fed in play.feeds.values()]
        return min(bounds) if bounds else None

    def _next_bound(self) -> float | None:
        bound = self._bound(self.reply)
        return None if bound is None or bound < self.world.now else bound

    def _deadlines(self, reply: Reply) -> None:
        bound = self._bound(reply)
        if bound is not None and self.world.now > bound + EPS:
            raise Failure(f"(2) no ending by {bound} (now {self.world.now})\n{self._story(reply)}")

    def _released(self, reply: Reply) -> None:
        """(3) Once a response is over, everything of its request is let go."""
        over_at = reply.ended_at if reply.ended_at is not None else reply.hung_up_at
        if reply.dropped:
            return
        if over_at is None or self.world.now < over_at + AFTER_TERMINAL_GRACE + EPS:
            return
        if self.world.socket is not None and reply.hung_up_at is not None:
            if not self.world.socket.finished.is_set():
                raise Failure(
                    f"(3) the socket still served after the client left\n{self._story(reply)}"
                )
            for n, play in enumerate(reply.plays):
                if not play.exchange.finished:
                    raise Failure(
                        f"(3) upstream attempt {n} still open after the client left its "
                        f"socket\n{self._story(reply)}"
                    )
            return
        if reply.finished_at is None:
            raise Failure(
                f"(3) request still running {self.world.now - over_at} s after its end\n"
                f"{self._story(reply)}"
            )
        for n, play in enumerate(reply.plays):
            if not play.exchange.finished:
                raise Failure(
                    f"(3) upstream attempt {n} still open after the response\n{self._story(reply)}"
                )
        if all(r.finished_at is not None or r.dropped for r in self.world.replies):
            world = self.world
            if world.proxy.app.in_flight:
                raise Failure(
                    f"(3) {world.proxy.app.in_flight} slot(s) still taken\n{self._story(reply)}"
                )
            stats = world.upstream.pool_statistics()
            if stats.open != stats.idle or stats.listed != stats.open:
                raise Failure(f"(3) upstream pool not clean: {stats}\n{self._story(reply)}")
            if world.proxy.app._pipeline.relays:
                raise Failure(f"(3) relays left: {world.proxy.app._pipeline.relays}")
            if not world.socket_closed or world.socket is None:
                tasks = self.world.call(self.world.tasks)
                # a socket's drain watcher ends with the drain: fewer is fine, never more
                if tasks > world.baseline_tasks + world.drain_running:
                    raise Failure(
                        f"(3) {tasks - world.baseline_tasks} task(s) of the request alive\n"
                        f"{self._story(reply)}"
                    )

    # -- the end of an example -------------------------------------------------------------

    def _finish(self) -> None:
        """Every response must end: the client reads what is there, time runs past every
        deadline, and then nothing of any request may be left."""
        world = self.world
        for _ in range(12):
            world.call(world.read, True)
            self.the_five_invariants()
            if all(r.dropped or (r.over and r.finished_at is not None) for r in world.replies):
                break
            world.call(world.advance, 30.0)
            self.the_five_invariants()
        for reply in world.replies:
            if not reply.dropped and (not reply.over or reply.finished_at is None):
                raise Failure(f"a response that never ended\n{self._story(reply)}")
        world.call(world.advance, 2.0)
        self.the_five_invariants()
        if world.socket is not None and not world.socket_closed:
            world.call(world.hang_up)
            world.call(world.advance, 2.0)
            if not world.socket.finished.is_set():
                raise Failure("the socket's handler did not end after the client left")
        if world.proxy.app.in_flight:
            raise Failure("a slot still taken at the end")
