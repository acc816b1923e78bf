"""One pipelined trio connection to Redis for the hot calls (the limiter's and the
store's ``EVALSHA``/``GET``/``MGET``), on :mod:`proxai.state.resp`.

Why not coredis for these: one ``GET`` through coredis on trio makes about 880 Python
calls (its pool checkout, command objects, anyio's wrappers, retries, telemetry),
a raw RESP round trip about 130 (``bench/redis_calls.py``), and no coredis setting
takes the difference off (``COREDIS_OPTIMIZED`` skips argument checks only). coredis
keeps everything else (the admin and test calls).

Every task's commands share the one connection: each is written as it comes (one
``send_all`` a batch: whoever finds nobody writing writes what is queued) and its
reply is matched in order by the one reader task. The connection is made by the
first call that needs it (``AUTH`` and ``SELECT`` pipelined with it). When the oldest
unanswered command has waited ``timeout``, or the connection fails, every waiter gets
:class:`~proxai.state.store.StateUnavailable` and the connection is dropped: the next
call makes a new one, so a Redis that was away is served again as soon as it is back.
A caller that gives up (cancelled) leaves its place in the queue: its reply is read
and dropped.
"""

from __future__ import annotations

import math
import ssl
from collections import deque
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

import attrs
import trio

from .resp import ErrorReply, ProtocolError, Reply, ReplyParser, encode
from .store import StateUnavailable

__all__ = ["Wire", "WireTarget"]


@attrs.frozen
class WireTarget:
    """Where the connection goes, from a ``redis://`` or ``rediss://`` URL."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @classmethod
    def from_url(cls, url: str) -> WireTarget | None:
        """The target of ``url``, or ``None`` for one this connection does not speak
        (a unix socket, query options): coredis serves those calls instead."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss") or parts.query or not parts.hostname:
            return None
        path = parts.path.strip("/")
        try:
            db = int(path) if path else 0
            port = parts.port or 6379
        except ValueError:
            return None
        return cls(
            parts.hostname,
            port,
            db,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password is not None else None,
            parts.scheme == "rediss",
        )

    def handshake(self, scripts: Sequence[str | bytes] = ()) -> list[list[bytes | str | int]]:
        """The commands that open a connection (none may answer an error): the login,
        the database, and ``SCRIPT LOAD`` of every script the calls will run, so no
        ``EVALSHA`` meets ``NOSCRIPT`` and has to be sent again behind later commands."""
        commands: list[list[bytes | str | int]] = []
        if self.password is not None:
            auth: list[bytes | str | int] = ["AUTH"]
            if self.username:
                auth.append(self.username)
            commands.append([*auth, self.password])
        if self.db:
            commands.append(["SELECT", self.db])
        commands += [["SCRIPT", "LOAD", script] for script in scripts]
        return commands


@attrs.define(eq=False)
class _Waiter:
    deadline: float
    done: trio.Event = attrs.field(factory=trio.Event)
    reply: Reply = None
    failure: StateUnavailable | None = None


class _Link:
    """One open connection: its stream, what is queued to write, who waits."""

    def __init__(self, stream: trio.abc.Stream, max_bytes: int) -> None:
        self.stream = stream
        self.parser = ReplyParser(max_bytes=max_bytes)
        self.waiters: deque[_Waiter] = deque()
        self.out = bytearray()
        self.writing = False
        self.failure: StateUnavailable | None = None
        self.reader_scope = trio.CancelScope()

    def fail(self, failure: StateUnavailable) -> None:
        if self.failure is None:
            self.failure = failure
        while self.waiters:
            waiter = self.waiters.popleft()
            waiter.failure = self.failure
            waiter.done.set()
        self.reader_scope.cancel()


class Wire:
    """The pipelined connection (see the module's docstring); its tasks run in
    :meth:`run`'s nursery (``await nursery.start(wire.run)``)."""

    def __init__(
        self,
        target: WireTarget,
        *,
        timeout: float,
        scripts: Sequence[str | bytes] = (),
        max_bytes: int = 1 << 29,
    ) -> None:
        self._target = target
        #: The scripts every connection loads first (read at each connect).
        self._scripts = scripts
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._link: _Link | None = None
        self._connecting: trio.Event | None = None
        self._connect_failure: StateUnavailable | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the reader tasks until cancelled (then every waiter fails)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._closed = True
            self._nursery = None
            if self._link is not None:
                self._link.fail(StateUnavailable("the store is closed"))
                self._link = None

    def close(self) -> None:
        """Fail every waiter and every later call (idempotent)."""
        self._closed = True
        if self._link is not None:
            self._link.fail(StateUnavailable("the store is closed"))

    async def call(self, args: Sequence[bytes | str | int]) -> Reply:
        """One command's reply (an :class:`ErrorReply` is a value); raises
        StateUnavailable within the timeout."""
        link = self._link
        if link is None or link.failure is not None or self._closed:
            link = await self._connected()
        waiter = _Waiter(trio.current_time() + self._timeout)
        if not link.waiters:
            link.reader_scope.deadline = waiter.deadline
        link.waiters.append(waiter)
        link.out += encode(args)
        if not link.writing:
            await self._write(link)
        await waiter.done.wait()
        if waiter.failure is not None:
            raise waiter.failure
        return waiter.reply

    async def _write(self, link: _Link) -> None:
        """Write what is queued, and what is queued meanwhile (shielded: a send cut in
        the middle would leave half a command; a stuck one is ended by the reader's
        deadline, which closes the stream)."""
        link.writing = True
        try:
            with trio.CancelScope(shield=True):
                while link.out and link.failure is None:
                    data = bytes(link.out)
                    link.out.clear()
                    await link.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            link.fail(StateUnavailable(f"Redis: {type(exc).__name__}"))
        finally:
            link.writing = False

    async def _connected(self) -> _Link:
        """The open link, made now if there is none (one attempt for all who wait)."""
        while True:
            if self._closed or self._nursery is None:
                raise StateUnavailable("the store is closed")
            link = self._link
            if link is not None and link.failure is None:
                return link
            if self._connecting is None:
                self._connecting = trio.Event()
                self._nursery.start_soon(self._connect, self._connecting)
            connecting = self._connecting
            await connecting.wait()
            if self._connect_failure is not None and self._link is None:
                raise self._connect_failure

    async def _connect(self, connecting: trio.Event) -> None:
        self._connect_failure = None
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(self._timeout):
                target = self._target
                stream = await trio.open_tcp_stream(target.host, target.port)
                if target.tls:
                    context = ssl.create_default_context()
                    stream = trio.SSLStream(stream, context, server_hostname=target.host)
                    await stream.do_handshake()
                link = _Link(stream, self._max_bytes)
                await _handshake(link, target.handshake(self._scripts))
        except StateUnavailable as exc:
            self._connect_failure = exc
        except trio.TooSlowError:
            self._connect_failure = StateUnavailable(
                f"Redis did not answer within {self._timeout:g} s"
            )
        except (OSError, trio.BrokenResourceError, ProtocolError, ssl.SSLError) as exc:
            self._connect_failure = StateUnavailable(f"Redis: {type(exc).__name__}")
        else:
            assert self._nursery is not None
            self._link = link
            self._nursery.start_soon(self._read, link)
            stream = None
        finally:
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(stream)
            self._connecting = None
            connecting.set()

    async def _read(self, link: _Link) -> None:
        """Match replies to waiters in order until the link fails or the oldest waiter
        passes its deadline."""
        failure = StateUnavailable("Redis closed the connection")
        try:
            with link.reader_scope:
                while True:
                    data = await link.stream.receive_some(65536)
                    if not data:
                        break
                    _deliver(link, link.parser.feed(data))
                    link.reader_scope.deadline = (
                        link.waiters[0].deadline if link.waiters else math.inf
                    )
            if link.reader_scope.cancelled_caught and link.failure is None:
                failure = StateUnavailable(f"Redis did not answer within {self._timeout:g} s")
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            failure = StateUnavailable(f"Redis: {type(exc).__name__}")
        except ProtocolError:
            failure = StateUnavailable("Redis: ProtocolError")
        finally:
            link.fail(failure)
            if self._link is link:
                self._link = None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(link.stream)


async def _handshake(link: _Link, commands: list[list[bytes | str | int]]) -> None:
    """Send the opening commands and check their replies (before any waiter)."""
    if not commands:
        return
    await link.stream.send_all(b"".join(encode(command) for command in commands))
    replies: list[Reply] = []
    while len(replies) < len(commands):
        data = await link.stream.receive_some(65536)
        if not data:
            raise trio.BrokenResourceError
        replies += link.parser.feed(data)
    for reply in replies:
        if isinstance(reply, ErrorReply):
            raise StateUnavailable(f"Redis: {reply.kind}")


def _deliver(link: _Link, replies: list[Reply]) -> None:
    """Each reply to the oldest waiter, in order."""
    for reply in replies:
        if not link.waiters:
            raise ProtocolError("a reply nobody asked for")
        waiter = link.waiters.popleft()
        waiter.reply = reply
        waiter.done.set()
