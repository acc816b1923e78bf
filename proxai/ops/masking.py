"""Masking secrets in upstream text before proxai records it (log lines, captures).

An upstream's error can quote the request it refused, credential included: "invalid
token: Bearer sk-...". proxai's own keys for its upstreams are known exactly (the
``api_key`` of each upstream and the values of its credential-looking ``headers``)
and always masked; so are strings shaped like a credential, which may be a key proxai
does not know (one the upstream has, one a client sent on another path): a bearer
token, an ``sk-`` key, the value after ``api-key:`` or ``x-api-key=``. Sans-io: text
in, text out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from ..config import Config
from ..wire.query import looks_like_credential

__all__ = ["MASK", "SecretMask"]

MASK = "[redacted]"

#: Shorter known secrets are not masked as substrings: "abc" would mask half a log line.
MIN_SECRET_LENGTH = 8

#: What a credential looks like in text, whoever's it is. Group 1, when it matched, is
#: the label to keep ("Bearer ", "api_key=").
_KEY_LOOKING = (
    r"(?i:(bearer\s+|(?:x-)?api[-_]?key[\"']?\s*[:=]\s*[\"']?|token[\"']?\s*[:=]\s*[\"']?))"
    r"[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-[A-Za-z0-9_-]{16,}"
)


class SecretMask:
    """Replaces the known secrets and key-looking strings of a text by :data:`MASK`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        known = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        # Known secrets first (the longest first, so none is masked half), then the shapes.
        exact = "|".join(f"(?:{re.escape(s)})" for s in known)
        self._pattern = re.compile(f"({exact})|{_KEY_LOOKING}" if known else _KEY_LOOKING)
        self._groups = 2 if known else 1  # the group of the label, in the shapes' part
        self._known = [s.encode("utf-8", "surrogateescape") for s in known]

    @classmethod
    def from_config(cls, config: Config, environ: Mapping[str, str] = os.environ) -> SecretMask:
        """The mask of proxai's keys for every configured upstream."""
        secrets: list[str] = []
        for _, upstream in config.all_upstreams():
            key = upstream.resolved_api_key(environ)
            if key:
                secrets.append(key)
            secrets += [
                value
                for name, value in upstream.headers.items()
                if looks_like_credential(name.encode("latin-1", "replace"))
            ]
        return cls(secrets)

    def __call__(self, text: str) -> str:
        """``text`` with every secret in it replaced (linear in its length)."""
        return self._pattern.sub(self._replace, text)

    def mask_bytes(self, data: bytes) -> bytes:
        """``data`` with proxai's known secrets replaced, every other byte kept (raw
        bytes such as a capture's: shapes are not masked, they may be the payload)."""
        for secret in self._known:
            if secret in data:
                data = data.replace(secret, MASK.encode())
        return data

    def _replace(self, match: re.Match[str]) -> str:
        label = match.group(self._groups)
        return (label or "") + MASK
