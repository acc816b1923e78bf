"""What the client gets of the upstream's body: its own bytes, or their translation.

The relay's observer task drives one :class:`Forwarding` per response and never asks
which: :class:`PassThrough` forwards the upstream's bytes as they came (byte for byte);
:class:`Translated` hands each read, as the observer's reader read it, to a
:class:`~proxai.translate.stream.ResponseTranslator` and forwards the client's bytes
instead, or makes the client's response whole at the upstream's end. Both say how the
response ends in the client's words (:meth:`Forwarding.ending`) and what
:func:`proxai.relay.ending.decide` must know of it, and the usage a whole (non-streamed)
answer reported (:attr:`Forwarding.whole_usage`: no observer reads those). No I/O, no trio.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import ProxyError
from ..outcome import ENDED_WELL, Outcome, OutcomeKind, listed
from ..protocols.observer import Read, StreamObserver, Verdict
from ..protocols.tracking import TrackingObserver
from ..protocols.whole_usage import WholeUsage, is_json_body
from ..translate.stream import ENDED_AT_END_OF_STREAM, ResponseTranslator
from ..wire.sse import Frames
from . import ending
from .messages import NOTHING, Body, Chunk, Head, out_of
from .reader import translated_headers

__all__ = ["Forwarding", "PassThrough", "Translated"]

log = logging.getLogger("proxai")


class Forwarding:
    """The interface, and pass-through's answers to it."""

    #: The relay hands :meth:`client_bytes` each read as the observer's reader read it.
    wants_reads = False

    def start(self, head: Head) -> Head:
        """The upstream's head: the one the client gets."""
        return head

    def stopped(self) -> Verdict | None:
        """How the response ends now, before the upstream's own end (``None``: it goes
        on). The relay then lets go of the upstream."""
        return None

    def client_bytes(self, message: Body, reads: Sequence[Read]) -> Chunk:
        """What the client gets for one upstream read now, framed (``reads``: its frames
        as the reader read them, when :attr:`wants_reads`)."""
        return message

    def tail(self, tail: bytes, verdict: Verdict) -> bytes:
        """What the client gets of an unfinished last event at the upstream's end: it is
        forwarded when proxai adds nothing after it (the client's parser drops it, as it
        would have without proxai), dropped when proxai appends an event, which must
        start at a boundary."""
        if tail and (not verdict.closing or not tail.strip(b"\r\n")):
            return tail
        return b""

    @property
    def client_finished(self) -> bool:
        """The client's stream has its terminal event, ahead of the upstream's."""
        return False

    @property
    def client_ended(self) -> bool:
        """The client's stream has ended by the upstream's own events, ahead of the
        upstream's end (a Chat upstream's at its usage chunk): the upstream has nothing
        left to say but its own end, as after a terminal event."""
        return False

    @property
    def failed_in_band(self) -> bool:
        """The upstream said in-band that it failed, and the client was told so."""
        return False

    def ending(self, verdict: Verdict) -> tuple[Verdict, bytes | Frames | ProxyError | None]:
        """The observer's verdict in the client's words (its closing bytes the client's
        API's), and the client's whole response when it is made at the end (see
        :func:`~proxai.relay.ending.decide`'s ``whole``)."""
        return verdict, None

    @property
    def whole_usage(self) -> dict[str, Any] | None:
        """The top-level ``usage`` of a whole JSON answer (an event stream's is its
        observer's): what its tokens are charged and counted from."""
        return None


class PassThrough(Forwarding):
    """The upstream speaks the client's API: its bytes pass unchanged (a whole JSON
    answer's ``usage`` read as they pass)."""

    def __init__(self, usage_key: str | None = None) -> None:
        """``usage_key``: the top-level field of a whole answer holding its usage (the
        answer's API row's ``UsageReader.key``; ``None``: none is read)."""
        self._usage_key = usage_key
        self._usage: WholeUsage | None = None

    def start(self, head: Head) -> Head:
        key = self._usage_key
        if key is not None and not head.sse and is_json_body(head.status, head.headers):
            self._usage = WholeUsage(key)
        return head

    def client_bytes(self, message: Body, reads: Sequence[Read]) -> Chunk:
        if self._usage is not None:
            self._usage.feed(message.data)
        return message

    @property
    def whole_usage(self) -> dict[str, Any] | None:
        return None if self._usage is None else self._usage.usage


class Translated(Forwarding):
    """The upstream speaks another API: a translator makes the client's response."""

    wants_reads = True

    def __init__(
        self,
        translator: ResponseTranslator,
        outcome: Outcome,
        observer: StreamObserver,
        *,
        max_body_bytes: int,
        let_go: Callable[[], None],
        usage_key: str | None = None,
    ) -> None:
        """``observer``: the upstream's, whose reader's items the translator reads;
        ``let_go``: closes the upstream (the relay's reader), when translating fails."""
        if isinstance(observer, TrackingObserver):
            translator.follow(observer)
        self._translator = translator
        self._outcome = outcome
        self._max_body_bytes = max_body_bytes
        self._let_go = let_go
        self._usage_key = usage_key

    def start(self, head: Head) -> Head:
        translator = self._translator
        translator.start(
            head.status,
            head.headers,
            sse=head.sse,
            max_body_bytes=self._max_body_bytes,
            usage_key=self._usage_key,
        )
        self._outcome.translation = translator.pair
        self._outcome.dropped = listed(translator.context.dropped)
        return attrs.evolve(head, headers=translated_headers(head.headers, sse=translator.streams))

    def stopped(self) -> Verdict | None:
        translator = self._translator
        if translator.broken is not None:
            return self._translation_failed()
        refusal = translator.refusal
        if refusal is not None:
            # A body proxai will not translate: nothing more of it is needed.
            return Verdict(refusal.kind or OutcomeKind.PROXY_ERROR, refusal.message)
        return None

    def client_bytes(self, message: Body, reads: Sequence[Read]) -> Chunk:
        frames = self._translator.feed(message.data, reads)
        return out_of(frames) if frames else NOTHING

    def tail(self, tail: bytes, verdict: Verdict) -> bytes:
        # A translated body goes out whole or as the client's events: an unfinished
        # upstream frame has no meaning in the client's API.
        return b""

    @property
    def client_finished(self) -> bool:
        return self._translator.client_finished

    @property
    def client_ended(self) -> bool:
        return self._translator.client_end is not None

    @property
    def failed_in_band(self) -> bool:
        return self._translator.failed

    def ending(self, verdict: Verdict) -> tuple[Verdict, bytes | Frames | ProxyError | None]:
        verdict = self._verdict(verdict)
        return verdict, self._whole(verdict)

    def _verdict(self, verdict: Verdict) -> Verdict:
        """The observer's verdict with its closing bytes in the client's API (a client
        whose stream already ended loses nothing to the upstream's end after it)."""
        translator = self._translator
        broken = translator.broken
        ended: Frames = []
        if verdict.kind is OutcomeKind.UPSTREAM_EOF and translator.client_end is None:
            # A clean end of the body is the decoder's too (Chat: after finish_reason).
            ended = translator.end_of_stream()
            if translator.client_end is not None:
                self._outcome.anomalies.append(ENDED_AT_END_OF_STREAM)
                verdict = Verdict(translator.client_end)
        verdict = self._after_client_end(verdict)
        if not translator.passes_frames:
            if broken is None and translator.broken is not None:
                verdict = self._translation_failed()
            return attrs.evolve(verdict, closing=())
        closing = translator.closing(verdict)
        if broken is None and translator.broken is not None:  # failed at the stream's end
            verdict = self._after_client_end(self._translation_failed())
        return attrs.evolve(verdict, closing=ended + closing)

    def _whole(self, verdict: Verdict) -> bytes | Frames | ProxyError | None:
        """A translated response made at the upstream's end (the client asked for no stream,
        or the upstream answered whole): its body (or events), or proxai's error; ``None`` when
        its events passed as they came, or when the body did not end well (the verdict then
        says the error)."""
        translator = self._translator
        if translator.passes_frames:
            return None
        if translator.refusal is None and verdict.kind not in ENDED_WELL:
            return None
        broken = translator.broken
        whole = translator.whole()  # 502 translation_failed if it fails
        if broken is None and translator.broken is not None:
            self._log_failure()
        return whole

    @property
    def whole_usage(self) -> dict[str, Any] | None:
        return self._translator.whole_usage

    def _after_client_end(self, verdict: Verdict) -> Verdict:
        client_end = self._translator.client_end
        verdict, anomaly = ending.after_client_end(verdict, client_end=client_end)
        if anomaly is not None:
            self._outcome.anomalies.append(anomaly)
        return verdict

    def _translation_failed(self) -> Verdict:
        """The translator failed: let go of the upstream; the client gets its API's error."""
        broken = self._translator.broken
        assert broken is not None
        self._let_go()
        self._log_failure()
        return Verdict(OutcomeKind.TRANSLATION_FAILED, broken)

    def _log_failure(self) -> None:
        """A contained translator failure is a proxai defect: log it, with its traceback."""
        translator = self._translator
        log.warning(
            "request %s: %s",
            self._outcome.request_id,
            translator.broken,
            exc_info=translator.exception,
        )
