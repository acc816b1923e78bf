"""One translated response: an upstream's frames or body in, the client's bytes out.

The relay drives a :class:`ResponseTranslator` beside the upstream's observer:
the observer keeps the deadlines on the upstream's stream (it knows that
protocol), the translator turns what is forwarded into the client's protocol.
How the stream ends is still the observer's verdict; the translator only says
it in the client's words: the client's terminal event after a clean end, the
client's error event after a stall, an early close or a fault, never a
success the upstream did not send.

A translator that fails (any exception from its decoder or encoder: a proxai defect
on input nobody foresaw) is contained as a failing observer is: it records why
(:attr:`ResponseTranslator.broken`), takes nothing more, and the client's stream ends
with its API's error (``translation_failed``), or a ``502`` before the first byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from ..errors import ending_code
from ..outcome import TRY_AGAIN, OutcomeKind
from ..protocols.observer import Verdict
from ..wire.sse import SSEFrame
from .ir import Decoder, Encoder, Event, Failed, Finished, FinishReason, TranslationContext
from .requests import translate_error_body

__all__ = ["ResponseTranslator", "TranslatorFactory"]

#: Finish reasons whose answer is cut short: the stream ends ``incomplete``.
_INCOMPLETE = frozenset({FinishReason.LENGTH, FinishReason.CONTENT_FILTER})


class ResponseTranslator:
    """Translates one response for the client (sans-io)."""

    def __init__(
        self,
        context: TranslationContext,
        decoder: Decoder,
        encoder: Encoder,
    ) -> None:
        self.context = context
        self._decoder = decoder
        self._encoder = encoder
        self._status = 200
        self._body: list[bytes] = []
        #: The upstream reported an error in-band (the encoder said it in the client's terms).
        self.failed = False
        #: How the client's stream ended, from the upstream's own events (``None``: not yet,
        #: or proxai ended it with an error of its own).
        self.client_end: OutcomeKind | None = None
        #: Why translating failed (``None``: it has not); the relay then ends the response.
        self.broken: str | None = None
        #: The exception it failed with, for the log's traceback.
        self.exception: Exception | None = None

    @property
    def pair(self) -> str:
        """``responses→chat``: the client's API, then the upstream's."""
        return f"{self.context.client}→{self.context.upstream}"

    @property
    def client_finished(self) -> bool:
        """The client's stream has its terminal event; the upstream's may still follow."""
        return self._encoder.finished

    def start(self, status: int) -> None:
        self._status = status

    # -- streams ---------------------------------------------------------------------------

    def frames(self, frames: Sequence[SSEFrame]) -> bytes:
        """The client's bytes for a batch of the upstream's frames (those of the frames
        before a failure, which are whole events, when translating fails)."""
        out: list[bytes] = []
        if self.broken is not None:
            return b""
        try:
            for frame in frames:
                if frame.data is None:
                    # An upstream keep-alive (``: ping``) stays one for the client: Anthropic
                    # clients get their ``ping`` event, SSE parsers skip a comment.
                    out.append(self._keepalive(frame.raw))
                    continue
                for event in self._decoder.feed(frame):
                    out.append(self._encoder.feed(event))
                    self._ended_by(event)
        except Exception as exc:
            self._break(exc)
        return b"".join(out)

    def _break(self, exc: Exception) -> None:
        """Translating failed: record why; the relay ends the response."""
        self.broken = f"translation failed ({type(exc).__name__}: {exc})"[:500]
        self.exception = exc

    def _broken_closing(self) -> bytes:
        """The client's error after a failure, unless its stream had already ended (then
        nothing may follow); nothing if even that cannot be written (the relay then
        breaks the body off)."""
        if self.client_end is not None or self.broken is None:
            return b""
        try:
            code = ending_code(OutcomeKind.TRANSLATION_FAILED)
            return self._encoder.broken(self.broken, code=code)
        except Exception:
            return b""

    def _ended_by(self, event: Event) -> None:
        """Note how an upstream's terminal event ended the client's stream."""
        if isinstance(event, Failed):
            self.failed = True
            self.client_end = OutcomeKind.FAILED
        elif isinstance(event, Finished) and self.client_end is None:
            incomplete = event.reason in _INCOMPLETE
            self.client_end = OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED

    def _keepalive(self, raw: bytes) -> bytes:
        if self._encoder.finished:
            return b""
        ping = getattr(self._encoder, "ping", None)
        return ping() if ping is not None else raw

    def closing(self, verdict: Verdict) -> bytes:
        """The client's last bytes once the observer has its verdict.

        A clean end flushes what the decoder held (Chat's finish waits for usage);
        if that does not finish the client's stream, or the verdict is a fault,
        the client's own error ends it.
        """
        if self.broken is not None:
            return self._broken_closing()
        encoder = self._encoder
        if encoder.finished:
            return b""
        out: list[bytes] = []
        try:
            if verdict.kind in (OutcomeKind.COMPLETED, OutcomeKind.INCOMPLETE, OutcomeKind.FAILED):
                for event in self._decoder.close():
                    out.append(encoder.feed(event))
                    self._ended_by(event)
                if encoder.finished:
                    return b"".join(out)
            message = verdict.detail or "the upstream stream ended before its terminal event"
            out.append(
                encoder.fail(
                    message, code=ending_code(verdict.kind), try_again=verdict.kind in TRY_AGAIN
                )
            )
        except Exception as exc:
            self._break(exc)
            out.append(self._broken_closing())
        return b"".join(out)

    # -- whole bodies ----------------------------------------------------------------------

    def body_part(self, data: bytes) -> None:
        """Hold a part of a whole (non-streamed) body until it ends."""
        self._body.append(data)

    def whole_body(self) -> bytes:
        """The client's body for the whole upstream body (a response, or an error); empty,
        with :attr:`broken` set, when translating it fails."""
        try:
            return self._whole_body()
        except Exception as exc:
            self._break(exc)
            return b""

    def _whole_body(self) -> bytes:
        raw = b"".join(self._body)
        if not 200 <= self._status < 300:
            return translate_error_body(
                self._status, raw, self.context.upstream, self.context.client
            )
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return translate_error_body(502, raw, self.context.upstream, self.context.client)
        for event in self._decoder.decode_body(data):
            if isinstance(event, Failed):
                self.failed = True
            self._encoder.feed(event)
        return self._encoder.body()


#: Builds a response's translator (one per attempt: each gets a fresh one).
TranslatorFactory = Callable[[], ResponseTranslator]
