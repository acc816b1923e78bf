"""Client keys (``[auth]``): who may use proxai.

Keys are kept only as SHA-256 digests. A presented key is hashed and compared
with every configured digest using :func:`hmac.compare_digest`, so neither the
comparison nor the number of keys tried leaks how close a guess was. A keys
file holds one key per line, or ``sha256:<hex digest>`` for a key stored hashed
(``printf %s "$KEY" | sha256sum``); blank lines and ``#`` comments are skipped.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from pathlib import Path

from ..config import AuthConfig, ConfigError
from ..errors import ProxyError
from ..outcome import OutcomeKind
from ..protocols.table import ClientSdk

__all__ = [
    "HASH_PREFIX",
    "UNAUTHENTICATED_TENANT",
    "ClientKeys",
    "entry_digest",
    "tenant_of",
]

HASH_PREFIX = "sha256:"
#: Whose stored data a request without ``[auth]`` reads and writes.
UNAUTHENTICATED_TENANT = "unauthenticated"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _tenant(key: str) -> str:
    """Whose stored data a key reads and writes: its digest, never the key."""
    return _digest(key).hex()


def _presented(headers: Iterable[tuple[bytes, bytes]], sdk: ClientSdk) -> list[str]:
    presented: list[str] = []
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                presented.append(token.strip())
        elif name in sdk.key_headers:
            presented.append(value.decode("latin-1").strip())
    return presented


def tenant_of(
    keys: ClientKeys | None, headers: Iterable[tuple[bytes, bytes]], sdk: ClientSdk
) -> str:
    """The tenant of an admitted request: its key's (``[auth]`` on), else the public one."""
    if keys is None:
        return UNAUTHENTICATED_TENANT
    return keys.check(headers, sdk)


def entry_digest(entry: str) -> bytes:
    """The digest of a configured key: plain, or ``sha256:`` and its hex digest; raises
    ValueError (never quoting the entry)."""
    if entry.startswith(HASH_PREFIX):
        hexdigest = entry[len(HASH_PREFIX) :].strip().lower()
        try:
            digest = bytes.fromhex(hexdigest)
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ValueError("a hashed key is sha256: and 64 hex digits")
        return digest
    return _digest(entry)


def _parse(entry: str, where: str) -> bytes:
    try:
        return entry_digest(entry)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


class ClientKeys:
    """The configured client keys, as digests."""

    def __init__(self, digests: Iterable[bytes]) -> None:
        self._digests = tuple(digests)

    @classmethod
    def from_config(cls, auth: AuthConfig) -> ClientKeys | None:
        """The keys of ``[auth]``, or ``None`` when auth is off; raises ConfigError."""
        if not auth.enabled:
            return None
        digests = [_parse(key, f"auth.keys[{i}]") for i, key in enumerate(auth.keys)]
        if auth.keys_file is not None:
            text = Path(auth.keys_file).read_text()
            for number, line in enumerate(text.splitlines(), 1):
                entry = line.strip()
                if entry and not entry.startswith("#"):
                    digests.append(_parse(entry, f"auth.keys_file line {number}"))
        if not digests:
            raise ConfigError("auth: no client keys configured (auth.keys / auth.keys_file)")
        return cls(digests)

    @property
    def tenants(self) -> int:
        """How many tenants the keys make (one per distinct key)."""
        return len(set(self._digests))

    def has_digest(self, digest: bytes) -> bool:
        """Whether ``digest`` is one of the configured keys' (configuration checks)."""
        return digest in self._digests

    def accepts(self, key: str) -> bool:
        presented = _digest(key)
        found = False
        for digest in self._digests:  # no early exit: the time does not depend on which
            found |= hmac.compare_digest(presented, digest)
        return found

    def check(self, headers: Iterable[tuple[bytes, bytes]], sdk: ClientSdk) -> str:
        """Raise 401 unless the request carries an accepted key: ``Authorization:
        Bearer`` always, and the headers the client's SDKs send keys in (Anthropic's
        send ``x-api-key``). Returns the key's tenant (:func:`tenant_of`)."""
        presented = _presented(headers, sdk)
        for key in presented:
            if self.accepts(key):
                return _tenant(key)
        header = sdk.key_header_name
        if presented:
            message = "Incorrect API key provided to proxai"
        else:
            message = f"Missing API key: send the key proxai gave you in the {header} header"
        raise ProxyError(
            401,
            message,
            "invalid_request_error",
            code="invalid_api_key",
            headers=((b"www-authenticate", b"Bearer"),),
            kind=OutcomeKind.UNAUTHORIZED,
        )
