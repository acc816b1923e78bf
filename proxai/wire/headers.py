"""Which headers cross proxai, in each direction.

Hop-by-hop headers (RFC 9110 section 7.6.1, plus those named by ``Connection``)
belong to one connection and never cross. Upstream credentials are proxai's:
the client's credential headers (``Authorization``, ``x-api-key`` and the other
headers APIs take keys in: the protocol table's ``CLIENT_KEY_HEADERS``, which the
caller passes) never go up, whether or not proxai has a key of its own; proxai's
key goes in the header the upstream's protocol expects, and an upstream's
configured ``headers`` carry any other credential it wants. The upstream
is asked for an identity encoding, because proxai frames SSE on the bytes as
they arrive (an upstream that compresses anyway is decoded: :mod:`proxai.wire.coding`).
A compressed request body goes up decoded, so without its ``Content-Encoding``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "is_token",
    "request_headers_for_upstream",
    "response_headers_for_client",
    "value_problem",
]

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)

#: A header name: RFC 9110's token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def is_token(name: str) -> bool:
    """Whether ``name`` can be a header name."""
    return _TOKEN.fullmatch(name) is not None


def value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a header value as proxai sends it, if it cannot (never
    quoting it: the value may be a key)."""
    if any(c in value for c in "\r\n\0"):
        return "contains a line break or NUL"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "has characters outside latin-1"
    return None


# Request headers proxai sets itself or that only describe the client's connection; and
# the body's codings, which proxai has undone (proxai.wire.request_coding).
_NOT_FORWARDED_UP = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"accept-encoding",
    b"expect",
    b"content-encoding",
}

# Response headers the ASGI server writes itself (date) or that describe the upstream host.
_NOT_FORWARDED_DOWN = HOP_BY_HOP | {b"content-length", b"alt-svc", b"date"}
# CORS answers are proxai's (server.allowed_origins), never the upstream's: an upstream's
# "Access-Control-Allow-Origin: *" must not open proxai to every web page.
_CORS_PREFIX = b"access-control-"


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def request_headers_for_upstream(
    client_headers: Iterable[tuple[bytes, bytes]],
    own: Iterable[tuple[bytes, bytes]] = (),
    *,
    credentials: frozenset[bytes],
) -> Headers:
    """The client's headers minus hop-by-hop and ``credentials`` (lowercase names of the
    headers a client's key comes in), plus proxai's ``own`` (the upstream's credential
    and configured headers, which replace the client's headers of the same name).
    Names in ``own`` must be lowercase."""
    client_headers = list(client_headers)
    own = list(own)
    drop = _NOT_FORWARDED_UP | credentials | _connection_tokens(client_headers)
    drop |= {n for n, _ in own}
    out = [(n, v) for n, v in client_headers if n.lower() not in drop]
    out.append((b"accept-encoding", b"identity"))
    out.extend(own)
    return out


def response_headers_for_client(
    upstream_headers: Iterable[tuple[bytes, bytes]], *, keep_content_length: bool
) -> Headers:
    """The upstream's response headers minus hop-by-hop and CORS ones.

    ``content-length`` is kept only for a body relayed unchanged in full (the
    server then frames it the same way); a stream proxai may end early goes out
    chunked.
    """
    upstream_headers = list(upstream_headers)
    drop = set(_NOT_FORWARDED_DOWN | _connection_tokens(upstream_headers))
    if keep_content_length:
        drop.discard(b"content-length")
    return [
        (n.lower(), v)
        for n, v in upstream_headers
        if n.lower() not in drop and not n.lower().startswith(_CORS_PREFIX)
    ]
