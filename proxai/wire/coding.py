"""Content codings of an upstream body (sans-io).

proxai asks the upstream for ``accept-encoding: identity``, because it frames
SSE on the bytes as they arrive. An upstream that compresses the stream anyway
would leave the framer nothing to read; the codings zlib undoes (``gzip``,
``x-gzip``, ``deflate``) are decoded read by read instead, so the stream is
observed and the client gets it plain. Anything else cannot be read by proxai.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator

__all__ = ["CorruptCoding", "Decoder", "coding_names", "content_codings", "decodable"]

#: zlib's ``wbits`` for each coding it decodes (RFC 9110 section 8.4.1).
_WBITS = {
    b"gzip": zlib.MAX_WBITS | 16,
    b"x-gzip": zlib.MAX_WBITS | 16,
    b"deflate": zlib.MAX_WBITS,  # the zlib format; a raw deflate stream is tried too
}

#: The most decoded bytes one piece holds: a small compressed read can inflate a
#: thousandfold, and a piece is what the relay holds in memory at once.
PIECE_BYTES = 64 * 1024


class CorruptCoding(Exception):
    """The body is not valid in its declared coding."""


def content_codings(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """The codings applied to a body, in the order they were applied (``identity``,
    which changes nothing, left out)."""
    codings: list[bytes] = []
    for name, value in headers:
        if name.lower() == b"content-encoding":
            codings += [t.strip().lower() for t in value.split(b",") if t.strip()]
    return [c for c in codings if c != b"identity"]


_NAME = re.compile(rb"[a-z0-9._+-]{1,32}")


def coding_names(codings: list[bytes]) -> str:
    """The codings for a log line: the upstream's bytes, so only names that look like
    coding names are quoted (``?`` stands for any other)."""
    return ", ".join(c.decode() if _NAME.fullmatch(c) else "?" for c in codings[:4])


def decodable(codings: list[bytes]) -> bool:
    """Whether :class:`Decoder` undoes these codings: exactly one, of zlib's."""
    return len(codings) == 1 and codings[0] in _WBITS


class Decoder:
    """Undoes one zlib coding, read by read, in pieces of at most :data:`PIECE_BYTES`."""

    def __init__(self, coding: bytes) -> None:
        self.coding = coding.decode("latin-1")
        self._raw_fallback = coding == b"deflate"
        self._zlib = zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``; raises :class:`CorruptCoding`."""
        while True:
            try:
                out = self._zlib.decompress(data, PIECE_BYTES)
            except zlib.error as exc:
                if not self._raw_fallback:
                    raise CorruptCoding(f"{self.coding}: {exc}") from None
                # Some servers send "deflate" without the zlib header (RFC 9110 asks
                # for it): a failure on the first bytes means a raw stream.
                self._raw_fallback = False
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            if data:
                self._raw_fallback = False
            if out:
                yield out
            data = self._zlib.unconsumed_tail
            if not data and len(out) < PIECE_BYTES:
                return

    def close(self) -> bytes:
        """What the decoder still holds once the body has ended."""
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise CorruptCoding(f"{self.coding}: {exc}") from None
