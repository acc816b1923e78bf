"""How a relayed response ends: pure decisions, carried out by the relay.

Given how the stream ended (the observer's :class:`~proxai.protocols.observer.Verdict`),
the upstream's status, whether any byte reached the client and whether the
observer saw the protocol's terminal event, :func:`decide` says what the client
gets: an HTTP error instead of the response (nothing was forwarded yet), bytes
appended at a frame boundary (the protocol's synthesized error), or a body
broken off (no observer can say it in the protocol's shape); :func:`after_client_end`
says what the upstream's end means once a translated client's stream has already
ended; :func:`client_gone` says how a request whose client went away is recorded.
No I/O, no trio.
"""

from __future__ import annotations

import attrs

from ..errors import ProxyError, ending_code, shutdown_error
from ..outcome import CUT_SHORT, STREAM_DEADLINES, UPSTREAM_CUT_SHORT, OutcomeKind
from ..protocols.observer import Verdict
from ..wire.sse import Frames
from .messages import NOTHING, Out, out_of

__all__ = [
    "Ending",
    "after_client_end",
    "client_gone",
    "decide",
    "error_before_first_byte",
    "head_timeout",
]

#: How an upstream's body can end short of its own terminal event without the client
#: losing anything, once the client's translated stream has ended: proxai's own stream
#: ends (shutdown, a translator that fails on what follows) are not the client's to see
#: after its terminal event.
_UPSTREAM_ENDS = (
    UPSTREAM_CUT_SHORT | STREAM_DEADLINES | {OutcomeKind.SHUTDOWN, OutcomeKind.TRANSLATION_FAILED}
)
#: Ends a ``502`` says before the first byte: the upstream's body (or its translation)
#: could not be relayed.
_BAD_GATEWAY = UPSTREAM_CUT_SHORT | {OutcomeKind.TRANSLATION_FAILED}


@attrs.frozen
class Ending:
    """What the client gets at the end, and how the outcome records it."""

    kind: OutcomeKind
    detail: str | None
    #: Answer this HTTP error instead of the response (nothing reached the client).
    error: ProxyError | None = None
    #: What to append to the body (the protocol's synthesized terminal; or the whole
    #: response, made at the end).
    closing: Out = NOTHING
    #: End the body without its final message, so the client sees it broken.
    abort: bool = False


def decide(
    verdict: Verdict,
    *,
    status: int,
    forwarded: bool,
    finished: bool,
    can_abort: bool,
    whole: bytes | Frames | ProxyError | None = None,
    failed_in_band: bool = False,
) -> Ending:
    """The end of a response whose upstream answered ``status``.

    ``forwarded``: some body byte reached the client. ``finished``: the observer saw
    the protocol's terminal event. ``can_abort``: the server breaks the connection of
    a body ended without its final message (HTTP/1.1, not hypercorn's HTTP/2).
    ``whole``: a translated response made all at once at the upstream's end (nothing of
    it was forwarded): the client's bytes, or proxai's error to answer instead.
    ``failed_in_band``: the translator read the upstream's own in-band error (and said
    it in the client's API): the response is recorded as ``failed``, however it ended.
    """
    end = _decide(verdict, status, forwarded, finished, can_abort, whole)
    if failed_in_band and end.kind is not OutcomeKind.FAILED:
        return attrs.evolve(end, kind=OutcomeKind.FAILED)
    return end


def _decide(
    verdict: Verdict,
    status: int,
    forwarded: bool,
    finished: bool,
    can_abort: bool,
    whole: bytes | Frames | ProxyError | None,
) -> Ending:
    if isinstance(whole, ProxyError):
        return Ending(whole.kind or OutcomeKind.PROXY_ERROR, whole.message, error=whole)
    if not 200 <= status < 300 and verdict.kind is OutcomeKind.COMPLETED:
        verdict = Verdict(OutcomeKind.UPSTREAM_ERROR, f"upstream answered {status}")
    if whole is not None:
        closing = Out(whole) if isinstance(whole, bytes) else out_of(whole)
        return Ending(verdict.kind, verdict.detail, closing=closing)
    if not forwarded and (verdict.closing or verdict.kind in CUT_SHORT):
        return Ending(verdict.kind, verdict.detail, error=error_before_first_byte(verdict))
    # Nothing in the protocol's shape to say it (no observer knows this body): end the
    # response as broken, as the upstream's was, so the client cannot take a cut-short
    # body for a whole one.
    abort = not verdict.closing and verdict.kind in CUT_SHORT and not finished and can_abort
    closing = out_of(verdict.closing) if verdict.closing else NOTHING
    return Ending(verdict.kind, verdict.detail, closing=closing, abort=abort)


def after_client_end(
    verdict: Verdict, *, client_end: OutcomeKind | None
) -> tuple[Verdict, str | None]:
    """The verdict on a translated stream whose client's stream may have ended first, and
    an anomaly to record.

    ``client_end``: how the client's stream ended, from the upstream's own events
    (``completed``, ``incomplete``, ``failed``), or ``None`` while it has not. A Chat
    upstream's stream ends for the client at its usage chunk, before its ``[DONE]``.
    When the upstream's body then ends without that marker (cleanly, by a reset, by going
    silent), the client has lost nothing: its response is whole and is ended as such,
    never broken off (a retrying client would run the turn again). How the upstream
    ended is kept as an anomaly.
    """
    if client_end is not None and verdict.kind is OutcomeKind.CLIENT_STALLED:
        # The client's terminal event is already on its way (held for it, or queued): a
        # client that reads it has the whole response and is recorded so, as a
        # pass-through observer records it; one that never does is recorded stalled
        # when its connection ends (client_gone). Not broken off.
        return Verdict(client_end), None
    if client_end is None or verdict.kind not in _UPSTREAM_ENDS:
        return verdict, None
    if verdict.kind is OutcomeKind.UPSTREAM_EOF:
        what = "the upstream's stream ended without its terminal event"
    elif verdict.kind is OutcomeKind.TRANSLATION_FAILED and verdict.detail:
        what = verdict.detail
    else:
        what = f"the upstream's stream ended as {verdict.kind.value}"
        what += f" ({verdict.detail})" if verdict.detail else ""
    return Verdict(client_end), f"{what} after the client's response had ended"


def client_gone(
    *, judged: OutcomeKind | None, blocked_s: float | None, client_write: float
) -> tuple[OutcomeKind, str | None] | None:
    """How a request whose client's connection ended before the response did is recorded;
    ``None`` keeps what the relay already judged.

    ``judged``: the outcome kind so far. ``blocked_s``: how long the write to the client
    in progress had waited (``None`` between writes). A client already judged stalled
    stays so. A connection that ends while a write has waited half of ``client_write``
    is a stalled client too: the kernel closes a connection ``client_write`` after the
    client's last acknowledgement (``TCP_USER_TIMEOUT``), which can come before proxai's
    own count, which starts only once the socket's send buffer is full and a write
    waits; a client that merely hangs up leaves no write waiting that long.
    """
    if judged is OutcomeKind.CLIENT_STALLED:
        return None
    if blocked_s is not None and blocked_s >= client_write / 2:
        return (
            OutcomeKind.CLIENT_STALLED,
            f"the client's connection ended while a write to it had waited {blocked_s:.1f} s"
            " (it stopped reading; proxai client_write timeout)",
        )
    return OutcomeKind.CLIENT_DISCONNECTED, None


def error_before_first_byte(verdict: Verdict) -> ProxyError:
    """A stream that ended before any byte reached the client, as an HTTP error.

    Clients retry 5xx before a stream starts, which is what a stall or an
    early close before the first event deserves.
    """
    message = verdict.detail or "the upstream stream ended before its first event"
    if verdict.kind is OutcomeKind.SHUTDOWN:
        return shutdown_error(message)
    if verdict.kind in _BAD_GATEWAY:
        code = ending_code(verdict.kind)
        return ProxyError(502, message, "server_error", code=code, kind=verdict.kind)
    code = ending_code(verdict.kind)
    return ProxyError(504, message, "server_error", code=code, kind=verdict.kind)


def head_timeout(*, first_byte: bool, seconds: float) -> ProxyError:
    """No response headers in time: ``first_byte`` passed (or else ``total``), after
    ``seconds``."""
    if first_byte:
        kind = OutcomeKind.STALLED_FIRST_BYTE
        limit = f"{seconds} s (proxai first_byte timeout)"
    else:
        kind = OutcomeKind.TOTAL_TIMEOUT
        limit = f"{seconds} s (proxai total timeout)"
    return ProxyError(
        504,
        f"the upstream sent no response headers within {limit}",
        "server_error",
        code=ending_code(kind),
        kind=kind,
    )
