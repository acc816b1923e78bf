"""The usage of a whole (non-streamed) JSON answer, read as its bytes pass.

A body proxai passes through unchanged is not parsed: it goes to the client read by
read, and holding it whole for one small field would cost a copy of every body. Yet
the three APIs' whole answers all report their tokens in one top-level ``usage``
object (Responses, Chat and Messages alike), which ``[limits] tokens_per_minute``,
the metrics and the request log need. :class:`WholeUsage` scans the bytes as they
pass, keeping only its place in the JSON (the nesting depth, whether it is inside a
string), and copies out the value of one top-level key alone (the one the answer's API
row names: ``UsageReader.key``), at most :data:`MAX_USAGE_BYTES` of it. Sans-io: bytes
in, a parsed object out.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ..wire.headers import Headers

__all__ = ["MAX_USAGE_BYTES", "WholeUsage", "is_json_body"]

#: The most bytes a ``usage`` value may have (real ones have a few hundred): past it,
#: it is not kept.
MAX_USAGE_BYTES = 16 * 1024
#: What matters outside a string: a string's start, nesting, and a key's end.
_STRUCTURE = re.compile(rb'["{}\[\]:,]')
#: The rest of a string up to its closing quote (or a backslash at the piece's end).
_IN_STRING = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)


def is_json_body(status: int, headers: Headers) -> bool:
    """A 2xx JSON body (``application/json``, or a ``+json`` type): one an API answers
    whole, and the only kind worth scanning."""
    if not 200 <= status < 300:
        return False
    for name, value in headers:
        if name.lower() == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return False


class WholeUsage:
    """Finds the top-level ``key`` object of a JSON body fed in any pieces."""

    def __init__(self, key: str) -> None:
        self._want = key.encode()
        self._depth = 0
        self._in_string = False
        self._escaped = False  # the last piece ended on a backslash inside a string
        #: The top-level string being read (a possible key), while it could be the key.
        self._key: bytearray | None = None
        #: The top-level string just read was the key: a ``:`` next makes it one.
        self._after_key = False
        #: The key's value as it is read (``None``: not reading it).
        self._value: bytearray | None = None
        #: The value read was too large to keep: it is skipped to its end.
        self._too_large = False
        self._usage: dict[str, Any] | None = None

    @property
    def usage(self) -> dict[str, Any] | None:
        """The body's usage object, once read whole (``None``: none yet, or not an
        object, or larger than :data:`MAX_USAGE_BYTES`)."""
        return self._usage

    def feed(self, data: bytes) -> None:
        """The next bytes of the body."""
        at, end = 0, len(data)
        key_from = 0  # where this piece's part of a possible key begins
        value_from = 0  # where this piece's part of the usage value begins
        while at < end:
            if self._in_string:
                if self._escaped:  # the last piece ended on a backslash
                    self._escaped = False
                    at += 1
                    continue
                rest = _IN_STRING.match(data, at)
                assert rest is not None  # it matches the empty string
                stop = rest.end()
                if stop == end:  # the string goes on in the next piece
                    self._key_part(data, key_from, end)
                    break
                if data[stop] == 0x5C:  # a backslash ends the piece: the next byte is escaped
                    self._key = None
                    self._escaped = True
                    break
                self._in_string = False
                self._key_part(data, key_from, stop)
                if self._key is not None:
                    self._after_key = self._key == self._want
                    self._key = None
                at = stop + 1
                continue
            found = _STRUCTURE.search(data, at)
            if found is None:
                break
            at = found.start()
            byte = data[at]
            after_key, self._after_key = self._after_key, False
            if byte == 0x22:  # '"'
                self._in_string = True
                if self._depth == 1 and self._value is None:
                    self._key, key_from = bytearray(), at + 1
            elif byte in (0x7B, 0x5B):  # '{', '['
                self._depth += 1
            elif byte in (0x7D, 0x5D):  # '}', ']'
                self._depth -= 1
                if self._depth == 0 and self._value is not None:  # the body's end
                    self._value_part(data, value_from, at)
                    self._value_done()
            elif self._depth == 1:
                if byte == 0x3A and after_key:  # ':' after "usage": its value follows
                    self._value, self._too_large = bytearray(), False
                    value_from = at + 1
                elif byte == 0x2C and self._value is not None:  # ',' ends the value
                    self._value_part(data, value_from, at)
                    self._value_done()
            at += 1
        if self._value is not None:
            self._value_part(data, value_from, end)

    def _key_part(self, data: bytes, begin: int, stop: int) -> None:
        """Part of a top-level string: kept while it can still be ``usage``."""
        key = self._key
        if key is None:
            return
        key += data[begin:stop]
        if len(key) > len(self._want):
            self._key = None

    def _value_part(self, data: bytes, begin: int, stop: int) -> None:
        value = self._value
        assert value is not None
        if self._too_large:
            return
        if len(value) + stop - begin > MAX_USAGE_BYTES:
            self._too_large = True
            value.clear()
            return
        value += data[begin:stop]

    def _value_done(self) -> None:
        value, self._value = self._value, None
        assert value is not None
        if self._too_large:
            self._usage = None
            return
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            parsed = None
        self._usage = parsed if isinstance(parsed, dict) else None
