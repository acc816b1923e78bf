"""A request body's content codings, undone under proxai's body limit (sans-io).

Clients compress request bodies: Codex sends ``Content-Encoding: zstd`` to
OpenAI-compatible endpoints, SDKs and apps gzip, deflate or br. proxai projects
and routes a body by its JSON, so it undoes every coding the ``Content-Encoding``
header lists (in the reverse of the order they were applied) and forwards the plain
body without the header. ``server.max_request_body_bytes`` bounds the body at every
stage of decoding, not only as it arrives: each decoder hands out pieces of at most
:data:`~proxai.wire.coding.PIECE_BYTES` from input fed in slices, and decoding stops
at the first piece past the limit, so a decompression bomb costs the limit and one
piece of memory, never its inflated size. Intermediate stages count too, which keeps a
stack of codings from costing more work than the limit allows per stage.

The decoders are the well-kept libraries': zlib (gzip, deflate), the standard
library's ``compression.zstd`` API (the ``backports.zstd`` package before Python
3.14), and Google's ``brotli``. What stays outside the bound is each decoder's own
state: zlib's 32 KiB window, brotli's window of at most 16 MiB, and zstd's window of
at most 128 MiB (zstd's default ``window_log_max``; a frame asking for more is
refused as invalid), allocated up front but only written as output is made.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import brotli

from ..errors import ProxyError, request_too_large
from .coding import PIECE_BYTES, coding_names, content_codings

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = [
    "ACCEPT_ENCODING",
    "MAX_CODINGS",
    "SLICE_BYTES",
    "decode_body",
    "decode_request_body",
]

#: The ``Accept-Encoding`` a 415 names: the codings proxai undoes (``x-gzip`` is gzip's
#: alias, ``identity`` changes nothing).
ACCEPT_ENCODING = b"gzip, deflate, zstd, br"
#: The most codings one body may stack: real clients apply one; each stage may cost the
#: limit's worth of work, so a long stack must not multiply it without end.
MAX_CODINGS = 4
#: How much compressed input a decoder gets at once: what a decoder copies aside when
#: its output piece is full stays this small.
SLICE_BYTES = 64 * 1024
#: brotli's output buffer grows in blocks, the first of 32 KiB less a few bytes: a
#: limit under that block makes each piece at most one block (``Decompressor.process``'s
#: ``output_buffer_limit``, brotli 1.2).
_BROTLI_OUTPUT_LIMIT = 16 * 1024


class _Failed(Exception):
    """The data is not valid in its coding (the reason, for the 400)."""


class _Stream(Protocol):
    """One coding's decoder: fed slices, it yields pieces of at most PIECE_BYTES."""

    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def finish(self) -> Iterator[bytes]:
        """The rest of the output once all input is in; raises :class:`_Failed` if the
        data ended before its coding's end."""
        ...


_TRUNCATED = "the body ends before the end of the compressed data"


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` starts as the zlib format does (RFC 1950: method 8, and a check
    on the first two bytes). A raw deflate stream's first block never does: only a
    stored block's padding bits could make it look so, and encoders write them 0."""
    return data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


class _Zlib:
    """gzip (its members one after another, as RFC 1952 allows) and deflate (the zlib
    format RFC 9110 asks for, or a raw deflate stream as some clients send)."""

    def __init__(self, coding: bytes) -> None:
        self._gzip = coding != b"deflate"
        self._wbits = zlib.MAX_WBITS | 16 if self._gzip else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(self._wbits)
        #: deflate's first bytes, until there are two to tell the zlib format by.
        self._head: bytes | None = None if self._gzip else b""
        self._pending = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return
            self._head = None
            if not _zlib_header(data):
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        while data or self._pending:
            if self._zlib.eof:
                if not self._gzip:
                    raise _Failed("data after the end of the deflate stream")
                self._zlib = zlib.decompressobj(self._wbits)
            try:
                out = self._zlib.decompress(data, PIECE_BYTES)
            except zlib.error as exc:
                raise _Failed(str(exc)) from None
            if out:
                yield out
            eof = self._zlib.eof
            # A full piece may leave output waiting; the end of a member leaves none.
            self._pending = not eof and len(out) == PIECE_BYTES
            data = self._zlib.unused_data if eof else self._zlib.unconsumed_tail

    def finish(self) -> Iterator[bytes]:
        if not self._zlib.eof:
            raise _Failed(_TRUNCATED)
        return iter(())


class _Zstd:
    """zstd frames one after another (skippable ones included), as RFC 8878 allows."""

    def __init__(self, coding: bytes) -> None:
        self._zstd = zstd.ZstdDecompressor()
        self._pending = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data or self._pending:
            if self._zstd.eof:
                self._zstd = zstd.ZstdDecompressor()
            try:
                out = self._zstd.decompress(data, PIECE_BYTES)
            except zstd.ZstdError as exc:
                raise _Failed(str(exc)) from None
            if out:
                yield out
            eof = self._zstd.eof
            self._pending = not eof and not self._zstd.needs_input
            data = self._zstd.unused_data if eof else b""

    def finish(self) -> Iterator[bytes]:
        if not self._zstd.eof:
            raise _Failed(_TRUNCATED)
        return iter(())


class _BrotliDecompressor(Protocol):
    """What proxai uses of ``brotli.Decompressor`` (the package has no type hints)."""

    def process(self, data: bytes, output_buffer_limit: int = ...) -> bytes: ...
    def can_accept_more_data(self) -> bool: ...
    def is_finished(self) -> bool: ...


class _Brotli:
    """br (RFC 7932): one stream; data after its end is an error of the decoder's."""

    def __init__(self, coding: bytes) -> None:
        self._brotli: _BrotliDecompressor = brotli.Decompressor()

    def _process(self, data: bytes) -> bytes:
        try:
            out: bytes = self._brotli.process(data, output_buffer_limit=_BROTLI_OUTPUT_LIMIT)
        except brotli.error as exc:
            raise _Failed(str(exc)) from None
        return out

    def feed(self, data: bytes) -> Iterator[bytes]:
        out = self._process(data)
        while True:
            if out:
                yield out
            # Past the output limit, the decoder takes no input until it says so.
            if self._brotli.can_accept_more_data():
                return
            out = self._process(b"")

    def finish(self) -> Iterator[bytes]:
        while not self._brotli.is_finished():
            out = self._process(b"")
            if not out:
                raise _Failed(_TRUNCATED)
            yield out


_DECODERS: dict[bytes, Callable[[bytes], _Stream]] = {
    b"gzip": _Zlib,
    b"x-gzip": _Zlib,
    b"deflate": _Zlib,
    b"zstd": _Zstd,
    b"br": _Brotli,
}


def _unsupported(message: str) -> ProxyError:
    """415 with the ``Accept-Encoding`` that says what would do (RFC 9110 section 15.5.16)."""
    return ProxyError(
        415,
        f"{message}; proxai accepts request bodies in {ACCEPT_ENCODING.decode()}",
        "invalid_request_error",
        code="unsupported_content_encoding",
        headers=((b"accept-encoding", ACCEPT_ENCODING),),
    )


def _undo(coding: bytes, data: bytes, limit: int, slice_bytes: int) -> bytes:
    """``data`` with one coding undone; 413 as soon as the output passes ``limit``."""
    stream = _DECODERS[coding](coding)
    pieces: list[bytes] = []
    size = 0

    def take(out: Iterator[bytes]) -> None:
        nonlocal size
        for piece in out:
            size += len(piece)
            if size > limit:
                raise request_too_large(limit, decoded=True)
            pieces.append(piece)

    try:
        for start in range(0, len(data), slice_bytes):
            take(stream.feed(data[start : start + slice_bytes]))
        take(stream.finish())
    except _Failed as exc:
        raise ProxyError.invalid_request(
            f"request body is not valid {coding.decode()} data, as its Content-Encoding "
            f"says: {exc}",
            code="invalid_content_encoding",
        ) from None
    return b"".join(pieces)


def decode_body(
    body: bytes, codings: list[bytes], *, limit: int, slice_bytes: int = SLICE_BYTES
) -> bytes:
    """``body`` with ``codings`` (in the order they were applied) undone, each stage held
    to ``limit`` bytes: 413 past it, 415 for a coding proxai does not know (or more than
    :data:`MAX_CODINGS`), 400 for data not valid in its coding."""
    unknown = [c for c in codings if c not in _DECODERS]
    if unknown:
        which = coding_names(unknown)
        raise _unsupported(f"request body has Content-Encoding {which}, which proxai cannot decode")
    if len(codings) > MAX_CODINGS:
        raise _unsupported(
            f"request body has {len(codings)} content codings; proxai undoes at most {MAX_CODINGS}"
        )
    if not body:  # no content: nothing was coded
        return body
    for coding in reversed(codings):
        body = _undo(coding, body, limit, slice_bytes)
    return body


def decode_request_body(
    headers: Iterable[tuple[bytes, bytes]], body: bytes, *, limit: int
) -> bytes:
    """The request's body as its ``Content-Encoding`` header says to decode it (the body
    itself when it names none); raises the :class:`ProxyError` of :func:`decode_body`.
    The caller forwards the result without the header (:mod:`proxai.wire.headers`)."""
    codings = content_codings(headers)
    return decode_body(body, codings, limit=limit) if codings else body
