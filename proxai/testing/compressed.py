"""Compressed request bodies for tests: each coding proxai decodes, and bombs.

:func:`compress` applies codings the way a client does (the first named, first);
:func:`zeros_bomb` makes a body that inflates to a given size of zeros without ever
holding that size in memory, as an attacker's bomb would.
"""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Callable

import brotli

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = ["ENCODERS", "MIB", "compress", "header_name", "zeros_bomb", "zstd_with_window"]

MIB = 1 << 20


def _raw_deflate(body: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()


def _brotli(body: bytes) -> bytes:
    compressed: bytes = brotli.compress(body)
    return compressed


#: Each coding's encoder by the name ``Content-Encoding`` gives it; ``deflate-raw`` is a
#: deflate stream without the zlib header some clients send as ``deflate``.
ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate-raw": _raw_deflate,
    "zstd": zstd.compress,
    "br": _brotli,
}


def header_name(coding: str) -> str:
    """The ``Content-Encoding`` token of one of :data:`ENCODERS`."""
    return "deflate" if coding == "deflate-raw" else coding


def compress(body: bytes, *codings: str) -> tuple[bytes, bytes]:
    """``body`` with ``codings`` applied in order, and the ``Content-Encoding`` value."""
    for coding in codings:
        body = ENCODERS[coding](body)
    return body, ", ".join(header_name(c) for c in codings).encode()


def zstd_with_window(body: bytes, window_log: int) -> bytes:
    """``body`` as one zstd frame that asks for a window of ``2**window_log`` bytes (its
    size left out of the header, as a streaming encoder does)."""
    options: dict[int, int] = {
        zstd.CompressionParameter.window_log: window_log,
        zstd.CompressionParameter.compression_level: 1,
    }
    compressor = zstd.ZstdCompressor(options=options)
    return compressor.compress(body) + compressor.flush()


def zeros_bomb(coding: str, mib: int) -> bytes:
    """``mib`` MiB of zeros in ``coding`` (gzip, deflate, zstd or br), made one MiB at a
    time. zlib's formats repeat one fully flushed block (each starts from an empty
    window, so all are the same bytes), which is much faster than deflating the zeros."""
    zeros = bytes(MIB)
    if coding == "zstd":
        zc = zstd.ZstdCompressor(level=1)
        return b"".join([zc.compress(zeros) for _ in range(mib)] + [zc.flush()])
    if coding == "br":
        bc = brotli.Compressor(quality=1)
        return b"".join([bc.process(zeros) for _ in range(mib)] + [bc.finish()])
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    raw = block * mib + deflater.flush()
    size = mib * MIB
    if coding == "deflate":
        # zlib's header, then Adler-32 of the zeros: a = 1, b = the count (mod 65521).
        return b"\x78\xda" + raw + (((size % 65521) << 16) | 1).to_bytes(4, "big")
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + raw + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")
