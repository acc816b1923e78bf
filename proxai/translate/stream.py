"""One translated response: an upstream's frames or body in, the client's events out.

The client gets its response in the shape it asked for, whatever the upstream did
with ``stream``: an event stream translated frame by frame; or, held until the
upstream's body has ended (and bounded), one JSON body for a client that asked for no
stream, or the client's events for one that asked for a stream from an upstream that
answered whole. A whole body is decoded first when the upstream compressed it anyway
(``gzip``, ``deflate``); one that is not its API's JSON object, or whose coding proxai
cannot undo, or that reports its own failure, is a ``502`` in the client's error shape
(:attr:`ResponseTranslator.refusal`), never a ``200`` with an error inside.

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
from typing import Any

import orjson

from ..errors import ProxyError, ending_code
from ..outcome import ENDED_WELL, TRY_AGAIN, OutcomeKind
from ..protocols.observer import UNSEEN, Read, Verdict
from ..protocols.tracking import TrackingObserver
from ..wire.coding import CorruptCoding, coding_names, content_codings, decodable
from ..wire.coding import Decoder as Inflater
from ..wire.headers import Headers
from ..wire.sse import Frames, SSEFrame
from .ir import Decoder, Encoder, Event, Failed, Finished, FinishReason, TranslationContext
from .requests import translate_error_body
from .requests.errors import read_error

__all__ = ["ENDED_AT_END_OF_STREAM", "ResponseTranslator", "TranslatorFactory"]

#: Finish reasons whose answer is cut short: the stream ends ``incomplete``.
_INCOMPLETE = frozenset({FinishReason.LENGTH, FinishReason.CONTENT_FILTER})
#: The code of proxai's ``502`` for an upstream body it cannot translate.
INVALID_BODY = "upstream_invalid_body"
#: The code of proxai's ``502`` for a body over ``max_translated_body_bytes``.
BODY_TOO_LARGE = "upstream_body_too_large"
#: The anomaly of a response its decoder ended at the end of the upstream's stream.
ENDED_AT_END_OF_STREAM = (
    "the upstream's stream ended after its finish_reason without its usage chunk or "
    "[DONE]: the response ended there, its usage unknown"
)
#: ``[server] max_translated_body_bytes`` by default.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


def _invalid_body(message: str) -> ProxyError:
    return ProxyError(502, message, "server_error", code=INVALID_BODY, kind=OutcomeKind.PROXY_ERROR)


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
        self._upstream_sse = False
        #: The client gets an event stream (it asked for one, and the upstream answered 2xx).
        self.streams = False
        #: The whole body held so far (decoded): one buffer, grown in place.
        self._body = bytearray()
        self._max_body_bytes = DEFAULT_MAX_BODY_BYTES
        self._usage_key: str | None = None  # the upstream API row's, from start()
        self._held = 0  # bytes held for a response made whole (the upstream's, decoded)
        self._inflater: Inflater | None = None
        self._unreadable = False  # an error body in a coding proxai cannot undo
        #: The upstream reported an error in-band (the encoder said it in the client's terms).
        self.failed = False
        self._failure: Failed | None = None
        #: How the client's stream ended, from the upstream's own events (``None``: not yet,
        #: or proxai ended it with an error of its own).
        self.client_end: OutcomeKind | None = None
        #: Why translating failed (``None``: it has not); the relay then ends the response.
        self.broken: str | None = None
        #: The exception it failed with, for the log's traceback.
        self.exception: Exception | None = None
        #: The top-level ``usage`` of the upstream's whole JSON body, once it is parsed.
        self.whole_usage: dict[str, Any] | None = None
        #: proxai's error instead of the response (a body it cannot translate): once set,
        #: the relay takes nothing more from the upstream and answers it.
        self.refusal: ProxyError | None = None

    @property
    def pair(self) -> str:
        """``responses→chat``: the client's API, then the upstream's."""
        return f"{self.context.client}→{self.context.upstream}"

    @property
    def client_finished(self) -> bool:
        """The client's stream has its terminal event; the upstream's may still follow."""
        return self._encoder.finished

    @property
    def passes_frames(self) -> bool:
        """An event stream translated frame by frame for a client that asked for one; else
        the client's response is made once the upstream's body has ended (:meth:`whole`)."""
        return self.streams and self._upstream_sse

    def start(
        self,
        status: int,
        headers: Headers | None = None,
        *,
        sse: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        usage_key: str | None = None,
    ) -> None:
        """The upstream's head: its status, headers and whether its body is an event stream;
        ``max_body_bytes``: the most of a body held to make the client's response whole;
        ``usage_key``: the top-level field of a whole answer holding its usage (the
        upstream API row's; ``None``: none is read)."""
        self._usage_key = usage_key
        self._status = status
        self._max_body_bytes = max_body_bytes
        self._upstream_sse = sse
        self.streams = self.context.stream and 200 <= status < 300
        codings = [] if sse or headers is None else content_codings(headers)  # a stream: decoded
        if codings and decodable(codings):
            self._inflater = Inflater(codings[0])
        elif codings:
            names = coding_names(codings)
            if 200 <= status < 300:
                self.refusal = _invalid_body(
                    f"the upstream answered {status} in content coding {names}, "
                    "which proxai cannot decode to translate it"
                )
            else:  # its status still says what happened; its words are unreadable
                self._body += f"the upstream answered {status} in content coding {names}".encode()
                self._unreadable = True

    def feed(self, data: bytes, reads: Sequence[Read]) -> Frames:
        """One upstream read (its bytes, and for an event stream its frames as the
        upstream API's reader read them): the client's events for it now (only when
        frames pass translated; else they are held)."""
        if self._upstream_sse:
            if self.streams:
                return self.reads(reads)
            if self._hold(len(data)):  # the events' content is held until the end
                self.reads(reads)
            return []
        self.body_part(data)
        return []

    def _hold(self, size: int) -> bool:
        """Count ``size`` more bytes held; past ``max_body_bytes`` the response is refused."""
        self._held += size
        if self._held <= self._max_body_bytes or self.refusal is not None:
            return self.refusal is None
        self._body = bytearray()
        self.refusal = ProxyError(
            502,
            f"the upstream's answer is over {self._max_body_bytes} bytes "
            "(max_translated_body_bytes), too large to translate whole",
            "server_error",
            code=BODY_TOO_LARGE,
            kind=OutcomeKind.PROXY_ERROR,
        )
        return False

    # -- streams ---------------------------------------------------------------------------

    def follow(self, observer: TrackingObserver) -> None:
        """The upstream's observer reads each frame before :meth:`reads` gets it: the
        decoder reads the items of its reader instead of a reader of its own."""
        self._decoder.follow(observer)

    def frames(self, frames: Sequence[SSEFrame]) -> Frames:
        """:meth:`reads` of frames no reader saw."""
        return self.reads([(frame, UNSEEN) for frame in frames])

    def reads(self, reads: Sequence[Read]) -> Frames:
        """The client's events for a batch of the upstream's frames, with what the
        upstream API's reader parsed of each (those of the frames before a failure,
        which are whole events, when translating fails)."""
        out: Frames = []
        if self.broken is not None:
            return out
        try:
            for frame, payload in reads:
                if frame.data is None:
                    # An upstream keep-alive (``: ping``) stays one for the client: Anthropic
                    # clients get their ``ping`` event, SSE parsers skip a comment.
                    out += self._keepalive(frame)
                    continue
                for event in self._decoder.feed(frame, payload):
                    out += self._encoder.feed(event)
                    self._ended_by(event)
        except Exception as exc:
            self._break(exc)
        return out

    def _ended_by(self, event: Event) -> None:
        """Note how an upstream's terminal event ended the client's stream."""
        if isinstance(event, Failed):
            self.failed = True
            self._failure = event
            self.client_end = OutcomeKind.FAILED
        elif isinstance(event, Finished) and self.client_end is None:
            incomplete = event.reason in _INCOMPLETE
            self.client_end = OutcomeKind.INCOMPLETE if incomplete else OutcomeKind.COMPLETED

    def _break(self, exc: Exception) -> None:
        """Translating failed: record why; the relay ends the response."""
        self.broken = f"translation failed ({type(exc).__name__}: {exc})"[:500]
        self.exception = exc

    def _broken_closing(self) -> Frames:
        """The client's error after a failure, unless its stream had already ended (then
        nothing may follow); nothing if even that cannot be written (the relay then
        breaks the body off)."""
        if self.client_end is not None or self.broken is None:
            return []
        try:
            code = ending_code(OutcomeKind.TRANSLATION_FAILED)
            return self._encoder.broken(self.broken, code=code)
        except Exception:
            return []

    def _keepalive(self, frame: SSEFrame) -> Frames:
        if self._encoder.finished:
            return []
        ping = getattr(self._encoder, "ping", None)
        return ping() if ping is not None else [frame]

    def closing(self, verdict: Verdict) -> Frames:
        """The client's last events once the observer has its verdict.

        A clean end flushes what the decoder held (Chat's finish waits for usage);
        if that does not finish the client's stream, or the verdict is a fault,
        the client's own error ends it.
        """
        if self.broken is not None:
            return self._broken_closing()
        encoder = self._encoder
        if encoder.finished:
            return []
        out: Frames = []
        try:
            if verdict.kind in ENDED_WELL:
                out += self._flush()
                if encoder.finished:
                    return out
            message = verdict.detail or "the upstream stream ended before its terminal event"
            out += encoder.fail(
                message, code=ending_code(verdict.kind), try_again=verdict.kind in TRY_AGAIN
            )
        except Exception as exc:
            self._break(exc)
            out += self._broken_closing()
        return out

    def end_of_stream(self) -> Frames:
        """The upstream's event stream ended cleanly short of its protocol's terminal
        event (an ``upstream_eof`` verdict): the decoder ends what the end of a stream
        ends (a Chat stream after its ``finish_reason``, with no usage chunk or
        ``[DONE]``), and :attr:`client_end` then says how. The client's events for it."""
        if (
            not self._upstream_sse
            or self.client_end is not None
            or self.broken is not None
            or self.refusal is not None
        ):
            return []
        try:
            return self._flush()
        except Exception as exc:
            self._break(exc)
            return []

    def _flush(self) -> Frames:
        """The client's events for what the decoder still held at a clean end."""
        out: Frames = []
        for event in self._decoder.close():
            out += self._encoder.feed(event)
            self._ended_by(event)
        return out

    # -- responses made whole --------------------------------------------------------------

    def body_part(self, data: bytes) -> None:
        """Hold a part of a whole (non-streamed) body until it ends."""
        if self.refusal is not None or self.broken is not None or self._unreadable:
            return
        if self._inflater is None:
            if self._hold(len(data)):
                self._body += data
            return
        try:
            for piece in self._inflater.feed(data):  # pieces of at most 64 KiB
                if not self._hold(len(piece)):
                    return
                self._body += piece
        except CorruptCoding as exc:
            self.refusal = _invalid_body(f"the upstream's body is not valid {exc}")

    def whole(self) -> bytes | Frames | ProxyError:
        """The client's response once the upstream's body ended well (:attr:`passes_frames`
        false): its JSON body, or its events when it asked for a stream; or proxai's error
        instead (:attr:`refusal`; a ``502`` ``translation_failed``, with :attr:`broken`
        set, when translating fails)."""
        try:
            return self._whole()
        except Exception as exc:
            self._break(exc)
            message = self.broken or "translation failed"
            code = ending_code(OutcomeKind.TRANSLATION_FAILED)
            return ProxyError(
                502, message, "server_error", code=code, kind=OutcomeKind.TRANSLATION_FAILED
            )

    def _whole(self) -> bytes | Frames | ProxyError:
        if self.refusal is None and not self._upstream_sse:
            self._decode_body()
        if self.refusal is not None:
            return self.refusal
        if self._upstream_sse:  # its events were fed frame by frame; the rest now
            events = self._flush()
        elif not 200 <= self._status < 300:
            raw, self._body = bytes(self._body), bytearray()
            return translate_error_body(
                self._status, raw, self.context.upstream, self.context.client
            )
        else:
            events = self._body_events()
            if self.refusal is not None:
                return self.refusal
        if self._failure is not None:
            return self._failed_in_band(self._failure)
        return events if self.streams else self._encoder.body()

    def _decode_body(self) -> None:
        """Finish undoing the body's content coding."""
        if self._inflater is not None:
            try:
                rest = self._inflater.close()
            except CorruptCoding as exc:
                self.refusal = _invalid_body(f"the upstream's body is not valid {exc}")
                return
            if self._hold(len(rest)):
                self._body += rest

    def _body_events(self) -> Frames:
        """Feed the events of the whole JSON body to the encoder; the client's events."""
        raw, self._body = self._body, bytearray()
        try:
            data = orjson.loads(raw)  # reads the bytearray in place
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            what = (
                read_error(self._status, bytes(raw[:400]))[0][:200]
                if raw.strip()
                else "an empty body"
            )
            self.refusal = _invalid_body(
                f"the upstream answered {self._status} with a body that is not a JSON "
                f"object: {what}"
            )
            return []
        del raw  # the parsed body is all that is needed now
        usage = data.get(self._usage_key) if self._usage_key is not None else None
        self.whole_usage = usage if isinstance(usage, dict) else None
        out: Frames = []
        for event in self._decoder.decode_body(data):
            out += self._encoder.feed(event)
            self._ended_by(event)
        return out

    def _failed_in_band(self, failure: Failed) -> ProxyError:
        """A whole response that says it failed: an HTTP error with the upstream's words,
        not a ``200`` with an error inside (nothing of it reached the client yet)."""
        return ProxyError(
            502,
            failure.message,
            failure.type or "server_error",
            code=failure.code,
            kind=OutcomeKind.FAILED,
        )


#: Builds a response's translator (one per attempt: each gets a fresh one).
TranslatorFactory = Callable[[], ResponseTranslator]
