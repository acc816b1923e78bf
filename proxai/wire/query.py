"""Which query parameters cross proxai, and which ones hold a credential.

Upstream credentials are proxai's: a client's key in the query string (Gemini's
``?key=``, ``?api_key=``) is dropped like its ``Authorization`` header is, and
proxai's own key goes in the header the upstream's protocol expects. Everything
else in the query goes out byte for byte, in its order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

__all__ = [
    "CLIENT_CREDENTIAL_PARAMS",
    "looks_like_credential",
    "param_name",
    "query_for_upstream",
    "redact_query",
]

#: Query parameters that carry a client's key (compared lowercased, percent-decoded).
CLIENT_CREDENTIAL_PARAMS = frozenset(
    {b"key", b"api_key", b"api-key", b"apikey", b"x-api-key", b"access_token"}
)

#: Header and parameter names that look like they carry a secret. ``tokens`` (plural) is a
#: count (``x-ratelimit-remaining-tokens``), not a secret.
_CREDENTIAL_NAME = re.compile(
    rb"key|token(?!s)|secret|auth|passw|pwd|cookie|signature|credential|session|^sig$"
)


def looks_like_credential(name: bytes) -> bool:
    """Whether a header or query parameter name suggests its value is a secret
    (``x-goog-api-key``, ``x-auth-token``, ``ocp-apim-subscription-key``, ``?sig=``...)."""
    return _CREDENTIAL_NAME.search(name.lower()) is not None


def param_name(pair: bytes) -> bytes:
    """The name of one ``name=value`` pair, percent-decoded and lowercased (``%6Bey``
    reaches a server as ``key``)."""
    name = pair.partition(b"=")[0]
    return (unquote_to_bytes(name) if b"%" in name else name).lower()


def query_for_upstream(query: bytes) -> bytes:
    """The client's query minus its credentials (:data:`CLIENT_CREDENTIAL_PARAMS`)."""
    if not query:
        return query
    pairs = query.split(b"&")
    kept = [p for p in pairs if param_name(p) not in CLIENT_CREDENTIAL_PARAMS]
    return query if len(kept) == len(pairs) else b"&".join(kept)


def redact_query(query: bytes, secret: Callable[[bytes], bool], mask: bytes) -> bytes:
    """``query`` with the value of each parameter whose name is ``secret`` replaced by
    ``mask``."""
    if not query:
        return query
    return b"&".join(
        pair.partition(b"=")[0] + b"=" + mask if secret(param_name(pair)) else pair
        for pair in query.split(b"&")
    )
