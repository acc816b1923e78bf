"""One client socket of the Responses WebSocket mode: its tasks and how it ends.

A socket runs in one nursery of two tasks linked by a bounded channel::

    client ──frames──▶ receiver ──(queue: websocket_max_queued)──▶ runner ──▶ turns

- the **receiver** is the only task that reads the socket: text frames go to the
  queue (a frame that finds it full, in frames or in the characters of one request
  body, is answered with an error frame at once); a
  binary frame closes the socket with 1003, one past ``max_request_body_bytes``
  with 1009; the client going away sets :attr:`ClientSocket.gone`, which the turn in
  flight watches like an HTTP client's disconnect (its relay closes the upstream);
- the **runner** takes one frame at a time and runs it as a turn (``handle``: a
  whole proxied response, in the turn's own relay nursery), so responses never
  overlap; it ends the socket once it has lived ``websocket_max_age`` (with the
  ``websocket_connection_limit_reached`` error frame, after the response in flight),
  when proxai drains (1001, after the response in flight), or when a turn says the
  client cannot be written to.

A third task, the socket's send watch (:meth:`ClientSocket.watch_sends`), cuts a turn's
frame still blocked ``client_write`` + 1 s after it started (the socket then ends).

When either task ends, the nursery is cancelled: nothing of the socket outlives it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from ..errors import ProxyError
from ..protocols.table import SOCKETS
from .socket_io import CLOSE_SECONDS, Binary, ClientSocket, CloseCode, Gone, TooLarge

__all__ = ["SocketLimits", "SocketStats", "run_socket"]

#: Runs one client frame; ``False`` when the socket cannot go on (the client stalled).
TurnHandler = Callable[[str], Awaitable[bool]]


@attrs.frozen
class SocketLimits:
    max_queued: int
    max_age: float
    #: ``timeouts.client_write``: how long proxai's own frames may wait on the client.
    write_timeout: float
    #: The characters the queued frames may hold together (``max_request_body_bytes``:
    #: what one request in flight holds), whatever their count.
    max_queued_chars: int


@attrs.define
class SocketStats:
    """A socket's counts, for its log line and the live view."""

    opened_at: float
    frames_in: int = 0
    queued: int = 0
    #: The characters of the queued frames.
    queued_chars: int = 0
    in_turn: bool = False
    #: Why the socket ended: "client closed (1000)", "websocket_max_age", ...
    ended_by: str | None = None


def _queue_full(limit: int, chars: int | None = None) -> bytes:
    waiting = (
        f"more than {limit} response.create frames are waiting on this socket "
        "(server.websocket_max_queued)"
        if chars is None
        else f"the response.create frames waiting on this socket would hold more than "
        f"{chars} characters (server.max_request_body_bytes)"
    )
    error = ProxyError(
        400,
        f"{waiting}: this one was dropped; a socket runs its responses one at a time",
        "invalid_request_error",
        code="websocket_queue_full",
    )
    return SOCKETS.error_frame(error.status, error.body(), ())


async def run_socket(
    socket: ClientSocket,
    handle: TurnHandler,
    limits: SocketLimits,
    stats: SocketStats,
    *,
    draining: Callable[[], bool],
    wait_for_drain: Callable[[], Awaitable[None]],
) -> None:
    """Serve an accepted socket until it ends."""
    expires = stats.opened_at + limits.max_age
    send, receive = trio.open_memory_channel[str](limits.max_queued)
    #: The runner's wait for the next frame (a new scope each time): a drain ends it.
    waiting = [trio.CancelScope()]

    async def receiver() -> None:
        async with send:
            while True:
                frame = await socket.receive()
                if isinstance(frame, Gone):
                    stats.ended_by = stats.ended_by or f"client closed ({frame.code})"
                    return
                if isinstance(frame, Binary):
                    stats.ended_by = "binary frame"
                    await _close(
                        socket, CloseCode.UNSUPPORTED_DATA, "binary frames are not supported"
                    )
                    return
                if isinstance(frame, TooLarge):
                    stats.ended_by = f"frame of {frame.size} bytes"
                    await _close(
                        socket,
                        CloseCode.MESSAGE_TOO_BIG,
                        "frame larger than server.max_request_body_bytes",
                    )
                    return
                stats.frames_in += 1
                refusal = None
                if stats.queued and stats.queued_chars + len(frame) > limits.max_queued_chars:
                    # Frames behind a turn that runs (or a client that reads nothing)
                    # hold at most one request body, however many the count allows.
                    refusal = _queue_full(limits.max_queued, limits.max_queued_chars)
                else:
                    try:
                        send.send_nowait(frame)
                    except trio.BrokenResourceError:
                        # The runner has ended (a drain, the age limit) and is closing
                        # the socket: a frame that comes meanwhile is dropped with it.
                        return
                    except trio.WouldBlock:
                        refusal = _queue_full(limits.max_queued)
                    else:
                        stats.queued += 1
                        stats.queued_chars += len(frame)
                del frame  # a refused frame is not held while its error frame waits
                if refusal is not None and not await socket.send_within(
                    refusal, limits.write_timeout
                ):
                    stats.ended_by = "client stopped reading"
                    return

    async def runner() -> None:
        async with receive:
            while not draining() and not socket.gone.is_set():
                scope = waiting[0] = trio.CancelScope(deadline=expires)
                with scope:
                    try:
                        text = await receive.receive()
                    except trio.EndOfChannel:
                        return
                if scope.cancelled_caught:
                    break
                stats.queued -= 1
                stats.queued_chars -= len(text)
                stats.in_turn = True
                try:
                    if not await handle(text):
                        stats.ended_by = stats.ended_by or "client stopped reading"
                        await _close(socket, CloseCode.POLICY_VIOLATION, "client stopped reading")
                        return
                finally:
                    stats.in_turn = False
                if (
                    socket.gone.is_set()
                    or socket.broken
                    or draining()
                    or trio.current_time() >= expires
                ):
                    break
        if socket.gone.is_set() or socket.broken:
            return
        if draining():
            stats.ended_by = "proxai draining"
            await _close(socket, CloseCode.GOING_AWAY, "proxai is shutting down")
            return
        stats.ended_by = "websocket_max_age"
        error = SOCKETS.limit_reached_error(limits.max_age)
        await socket.send_within(
            SOCKETS.error_frame(error.status, error.body(), ()), limits.write_timeout
        )
        await _close(socket, CloseCode.NORMAL, "websocket_connection_limit_reached")

    async def drain_watch() -> None:
        await wait_for_drain()
        if not stats.in_turn:
            waiting[0].cancel()

    async with trio.open_nursery() as nursery:

        async def run_then_end() -> None:
            # The receiver's end (the client gone) closes the queue: the runner ends
            # after the turn in flight, which sees the client gone itself.
            await runner()
            nursery.cancel_scope.cancel()

        nursery.start_soon(drain_watch)
        # The relay judges a client that reads nothing for ``client_write`` stalled and
        # lets go of the upstream, then holds its last bytes for the client; a socket
        # cannot hold a turn for later (the next turns wait behind it), so a frame
        # still blocked a moment after that is cut and the socket ends.
        nursery.start_soon(socket.watch_sends, limits.write_timeout + CLOSE_SECONDS)
        nursery.start_soon(receiver)
        nursery.start_soon(run_then_end)


async def _close(socket: ClientSocket, code: int, reason: str) -> None:
    """Close the socket; the turn in flight sees the client gone and lets go of its
    upstream."""
    await socket.close(code, reason)
    socket.gone.set()
