"""Checks of a request's target and head, made before its body is read.

A target no URL can carry upstream (a fragment, bytes outside visible ASCII), a
path with dot segments or outside the paths the upstreams serve (``/v1``: the protocol
table's ``SERVED_PREFIXES``), and a header block over
``server.max_header_bytes`` are refused here, in the request's API's error shape,
before anything is read or sent upstream.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

from ..errors import ProxyError
from ..protocols.table import SERVED_PREFIXES

__all__ = ["check_head_size", "check_path", "check_target"]

#: The bytes a request target may hold as proxai forwards it (RFC 3986's characters,
#: percent-escapes included): visible ASCII.
_TARGET_BYTES = frozenset(range(0x21, 0x7F))


def check_target(raw_path: bytes, query: bytes) -> None:
    """Refuse a target no URL can carry upstream: a fragment (``#`` is never sent in a
    request, RFC 9112 section 3.2) or bytes outside visible ASCII (HTTP/2 lets them through)."""
    if b"#" in raw_path or b"#" in query:
        raise ProxyError.invalid_request(
            "invalid request target: '#' (a fragment) is not allowed in a request; "
            "percent-encode it as %23 if it is data",
            code="invalid_request_target",
        )
    if not _TARGET_BYTES.issuperset(raw_path) or not _TARGET_BYTES.issuperset(query):
        raise ProxyError.invalid_request(
            "invalid request target: only visible ASCII is allowed (percent-encode the rest)",
            code="invalid_request_target",
        )


def check_path(
    method: str, path: str, raw_path: bytes, prefixes: tuple[str, ...] = SERVED_PREFIXES
) -> None:
    """Refuse dot segments (forwarded as sent, they could reach outside the upstream's
    ``/v1``) and paths outside ``prefixes`` (404)."""
    decoded = unquote(raw_path.decode("latin-1"))
    if any(segment in (".", "..") for segment in decoded.split("/")):
        raise ProxyError.invalid_request(
            f"invalid path {decoded!r}: '.' and '..' segments are not allowed",
            code="invalid_path",
        )
    if not any(_under(path, raw_path, prefix) for prefix in prefixes):
        served = ", ".join(f"{prefix}/..." for prefix in prefixes)
        raise ProxyError(
            404,
            f"no route for {method} {path}: proxai serves {served}, /healthz and /readyz",
            "invalid_request_error",
            code="not_found",
        )


def _under(path: str, raw_path: bytes, prefix: str) -> bool:
    """Whether the path is ``prefix`` or below it, decoded and as sent."""
    return (path == prefix or path.startswith(prefix + "/")) and raw_path.startswith(
        prefix.encode()
    )


def check_head_size(headers: Iterable[tuple[bytes, bytes]], raw_path: bytes, limit: int) -> None:
    """Refuse a request line and headers over ``limit`` bytes (431): hypercorn bounds a
    header block only while it is incomplete; this bounds it whole."""
    size = sum(len(n) + len(v) + 4 for n, v in headers) + len(raw_path)
    if size > limit:
        raise ProxyError(
            431,
            f"request headers are larger than the limit of {limit} bytes (server.max_header_bytes)",
            "invalid_request_error",
            code="request_headers_too_large",
        )
