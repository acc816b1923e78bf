"""RESP2, sans-io: commands to bytes, bytes to replies (the lean Redis path's codec).

Only what the hot calls need (:mod:`proxai.state.redis_wire`): a command is an array
of bulk strings; a reply is a simple string or bulk (``bytes``), an integer, a null
(``None``), an error (:class:`ErrorReply`, a value: the caller decides) or an array of
replies. The parser holds at most ``max_bytes`` unparsed (a reply larger than that is
a :class:`ProtocolError`, never a buffer that grows without end), nests at most
``max_depth`` arrays and takes at most ``max_elements`` in one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import attrs

__all__ = ["ErrorReply", "ProtocolError", "Reply", "ReplyParser", "encode"]

#: Redis's own bound on a bulk string (``proto-max-bulk-len``).
MAX_BYTES = 512 * 1024 * 1024


@attrs.frozen
class ErrorReply:
    """An error Redis answered (``-NOSCRIPT ...``): its first word is its kind."""

    message: str

    @property
    def kind(self) -> str:
        return self.message.split(" ", 1)[0]


Reply: TypeAlias = bytes | int | ErrorReply | list["Reply"] | None


class ProtocolError(Exception):
    """Bytes that are not RESP2, or a reply past the parser's bounds."""


def encode(args: Sequence[bytes | str | int]) -> bytes:
    """One command as RESP2 (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    """More bytes are needed: at least ``need`` buffered in all."""

    def __init__(self, need: int) -> None:
        self.need = need


class ReplyParser:
    """Replies from bytes as they come, in order (see the module's docstring)."""

    def __init__(
        self, *, max_bytes: int = MAX_BYTES, max_depth: int = 8, max_elements: int = 1 << 20
    ) -> None:
        self._buffer = bytearray()
        self._need = 1  # bytes buffered before parsing is worth another try
        self._max_bytes = max_bytes
        self._max_depth = max_depth
        self._max_elements = max_elements

    def feed(self, data: bytes | bytearray) -> list[Reply]:
        """Take ``data``; every reply it completes, in order."""
        buffer = self._buffer
        buffer += data
        if len(buffer) < self._need:
            if len(buffer) > self._max_bytes:
                raise ProtocolError("a reply larger than the parser's bound")
            return []
        replies: list[Reply] = []
        pos = 0
        try:
            while pos < len(buffer):
                reply, pos = self._parse(buffer, pos, 0)
                replies.append(reply)
            self._need = 1
        except _Incomplete as incomplete:
            self._need = incomplete.need - pos
        del buffer[:pos]
        if len(buffer) > self._max_bytes:
            raise ProtocolError("a reply larger than the parser's bound")
        return replies

    def _line(self, buffer: bytearray, pos: int) -> tuple[bytes, int]:
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            if len(buffer) - pos > 64 * 1024:  # no header line is this long
                raise ProtocolError("a reply line past 64 KiB")
            raise _Incomplete(len(buffer) + 1)
        return bytes(buffer[pos + 1 : end]), end + 2

    def _int(self, text: bytes) -> int:
        try:
            return int(text)
        except ValueError:
            raise ProtocolError("a malformed length or integer") from None

    def _parse(self, buffer: bytearray, pos: int, depth: int) -> tuple[Reply, int]:
        if pos >= len(buffer):
            raise _Incomplete(pos + 1)
        kind = buffer[pos]
        line, after = self._line(buffer, pos)
        if kind == 0x2B:  # +
            return line, after
        if kind == 0x3A:  # :
            return self._int(line), after
        if kind == 0x2D:  # -
            return ErrorReply(line.decode("utf-8", "replace")), after
        if kind == 0x24:  # $
            n = self._int(line)
            if n < 0:
                return None, after
            if n > self._max_bytes:
                raise ProtocolError("a bulk string past the parser's bound")
            end = after + n
            if len(buffer) < end + 2:
                raise _Incomplete(end + 2)
            if buffer[end : end + 2] != b"\r\n":
                raise ProtocolError("a bulk string without its CRLF")
            return bytes(buffer[after:end]), end + 2
        if kind == 0x2A:  # *
            n = self._int(line)
            if n < 0:
                return None, after
            if n > self._max_elements:
                raise ProtocolError("an array past the parser's bound")
            if depth >= self._max_depth:
                raise ProtocolError("arrays nested past the parser's bound")
            items: list[Reply] = []
            for _ in range(n):
                item, after = self._parse(buffer, after, depth + 1)
                items.append(item)
            return items, after
        raise ProtocolError(f"an unknown reply type {kind:#x}")
