"""Who may call proxai from a web page: methods, ``Host``, ``Origin`` and CORS.

A proxai on loopback without ``[auth]`` spends its upstream key for whoever can
reach it, and a web page can: a cross-site ``POST`` with ``Content-Type:
text/plain`` needs no CORS preflight, and DNS rebinding makes a page's own
name resolve to 127.0.0.1. So, decided here from the request's headers before
anything is read or sent upstream:

- **Methods**: only :data:`ALLOWED_METHODS`; ``TRACE`` (which would echo
  proxai's upstream key back), ``CONNECT`` and the rest get ``405``.
- **Host** (DNS rebinding): when proxai listens on loopback (or
  ``allowed_hosts`` is set), the ``Host`` must be ``localhost``, a
  ``*.localhost`` name, an IP address, or a name in ``allowed_hosts``; else
  ``403``, as Jupyter and Ollama answer. A rebinding page can only reach proxai
  under its own name, never under an IP literal or ``localhost``; the port is
  not compared, so SSH tunnels and port mappings keep working.
- **Origin** (cross-site requests): a request that carries an ``Origin`` must
  name one of ``allowed_origins``; one without an ``Origin`` but with
  ``Sec-Fetch-Site: cross-site`` or ``same-site`` is refused too, except a
  top-level ``GET`` navigation (a link clicked; the page that linked cannot
  read the answer). SDKs, curl and other clients that are not browsers send
  neither header and are not affected.
- **CORS**: an allowed origin gets ``Access-Control-Allow-Origin`` (its own
  origin echoed), ``Vary: Origin`` and the headers SDKs read exposed, on every
  response; ``OPTIONS`` is answered by proxai itself (a preflight with the
  allowed methods, the requested headers and a max age), never upstream.
  Credentials (cookies) are never allowed: proxai's clients send keys in
  headers.

Everything here is pure: headers and settings in, a :class:`Verdict` out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

import attrs

from ..errors import ProxyError

__all__ = [
    "ALLOWED_METHODS",
    "ANY",
    "PREFLIGHT_MAX_AGE",
    "BrowserPolicy",
    "BrowserRequest",
    "Verdict",
    "host_of",
    "is_loopback",
    "normalize_allowed_host",
    "normalize_origin",
]

Headers = Sequence[tuple[bytes, bytes]]

#: What OpenAI's and Anthropic's APIs use (``GET /v1/models``, ``POST`` generations,
#: ``DELETE /v1/responses/{id}``...), ``HEAD``, and ``OPTIONS`` (answered by proxai).
ALLOWED_METHODS = ("GET", "HEAD", "POST", "DELETE", "OPTIONS")
_ALLOW = ", ".join(ALLOWED_METHODS).encode()
_CORS_METHODS = b"GET, HEAD, POST, DELETE"

#: In ``allowed_origins`` or ``allowed_hosts``: every origin, or no Host check.
ANY = "*"

#: Response headers a page may read: what the OpenAI and Anthropic SDKs look at (request
#: ids, retry hints) by name, and ``*`` for the rest (rate limits...), which browsers
#: honour for requests without credentials, which proxai's always are.
_EXPOSED = (
    b"*, x-request-id, request-id, x-proxai-request-id, retry-after, retry-after-ms, x-should-retry"
)
#: How long a browser may reuse a preflight's answer (Chromium caps it at 7200).
PREFLIGHT_MAX_AGE = 600

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_HEADER_LIST = re.compile(rf"\s*{_TOKEN}(\s*,\s*{_TOKEN})*\s*")
_ORIGIN = re.compile(r"([a-z][a-z0-9+.\-]*)://([^/?#\s@]+)")
_HOST_NAME = re.compile(r"[a-z0-9_\-]+(\.[a-z0-9_\-]+)*")
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_SHOWN = 100  # characters of a client's header value quoted back in an error


def ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 one as IPv4), or ``None``."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name to listen on) is a loopback one."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    address = ip_address(host)
    return address is not None and address.is_loopback


def host_of(value: str) -> str:
    """The host of a ``Host`` header value, lowercase, without port, brackets or a
    trailing dot: ``"[::1]:8080"`` is ``"::1"``, ``"LocalHost.:80"`` is ``"localhost"``."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        value = name
    return value[:-1] if value.endswith(".") else value


def normalize_origin(entry: str) -> str:
    """An ``allowed_origins`` entry as browsers serialize origins (lowercase, no
    default port, no trailing slash); raises ``ValueError`` saying what is wrong."""
    origin = entry.strip().lower()
    if origin in (ANY, "null"):
        return origin
    origin = origin[:-1] if origin.endswith("/") else origin
    match = _ORIGIN.fullmatch(origin)
    if match is None:
        raise ValueError(
            f"must be an origin such as 'http://localhost:3000' (scheme://host[:port], "
            f"no path), '*' or 'null', got {entry!r}"
        )
    default = _DEFAULT_PORTS.get(match.group(1))
    if default is not None and origin.endswith(default):
        origin = origin[: -len(default)]
    return origin


def normalize_allowed_host(entry: str) -> str:
    """An ``allowed_hosts`` entry: a host name or IP address without port, or ``*``;
    raises ``ValueError`` saying what is wrong."""
    host = entry.strip().lower()
    if host == ANY:
        return host
    bare = host.strip("[]")
    if ip_address(bare) is not None:
        return bare
    host = host[:-1] if host.endswith(".") else host
    if not _HOST_NAME.fullmatch(host):
        raise ValueError(
            f"must be a host name or IP address without scheme or port "
            f"(e.g. 'proxai.internal'), or '*', got {entry!r}"
        )
    return host


def _shown(value: bytes) -> str:
    text = value.decode("latin-1")
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _forbidden(message: str, code: str) -> ProxyError:
    return ProxyError(403, message, "invalid_request_error", code=code)


def _values(headers: Headers, name: bytes) -> list[bytes]:
    return [value for n, value in headers if n == name]


@attrs.frozen
class BrowserRequest:
    """What the policy reads of a request."""

    method: str
    headers: Headers  # lowercase names, as ASGI gives them
    #: The address the connection arrived on (ASGI's ``scope["server"]``), if known.
    local_address: str | None = None


@attrs.frozen
class Verdict:
    """What to do with a request before reading it."""

    #: Why it is refused (403, 405), if it is.
    refusal: ProxyError | None = None
    #: Headers every response to it carries (CORS, for an allowed origin).
    response_headers: tuple[tuple[bytes, bytes], ...] = ()
    #: For an ``OPTIONS`` proxai answers itself: the ``204``'s own headers.
    options_answer: tuple[tuple[bytes, bytes], ...] | None = None


class BrowserPolicy:
    """``[server] allowed_origins`` and ``allowed_hosts`` applied to requests.

    ``bound_to_loopback`` says whether proxai listens on a loopback address
    (``server.host``); the Host check is on for connections that arrive on one,
    and everywhere when ``allowed_hosts`` names hosts.
    """

    def __init__(
        self,
        *,
        allowed_origins: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        bound_to_loopback: bool = True,
    ) -> None:
        self._origins = frozenset(normalize_origin(o) for o in allowed_origins)
        self._hosts = frozenset(normalize_allowed_host(h) for h in allowed_hosts)
        self._bound_to_loopback = bound_to_loopback

    def check(self, request: BrowserRequest, *, exempt: bool = False) -> Verdict:
        """The verdict on ``request``; ``exempt`` ones (health checks, which hold
        nothing and spend nothing) skip the Host and Origin checks."""
        origins = _values(request.headers, b"origin")
        allowed = len(origins) == 1 and self._allows_origin(origins[0])
        cors = _cors_headers(origins[0]) if allowed else ()
        refusal = _method_refusal(request.method)
        if refusal is None and not exempt:
            refusal = self._host_refusal(request) or self._origin_refusal(request, origins)
        if refusal is not None:
            return Verdict(refusal, cors)  # an allowed page may read why, too
        if request.method == "OPTIONS":
            answer = ((b"allow", _ALLOW), *(_preflight(request.headers) if allowed else ()))
            return Verdict(response_headers=cors, options_answer=answer)
        return Verdict(response_headers=cors)

    def _allows_origin(self, origin: bytes) -> bool:
        return ANY in self._origins or origin.decode("latin-1").lower() in self._origins

    def host_check_applies(self, local_address: str | None) -> bool:
        """Whether ``Host`` is checked on a connection that arrived on ``local_address``
        (``None``: unknown, the configured address decides)."""
        if ANY in self._hosts:
            return False
        if self._hosts:
            return True
        return self._bound_to_loopback and (local_address is None or is_loopback(local_address))

    def allows_host(self, value: bytes) -> bool:
        """Whether a ``Host`` header value names proxai where the check applies."""
        host = host_of(value.decode("latin-1"))
        return (
            host in ("", "localhost")
            or host.endswith(".localhost")
            or ip_address(host) is not None
            or host in self._hosts
        )

    def _host_refusal(self, request: BrowserRequest) -> ProxyError | None:
        if not self.host_check_applies(request.local_address):
            return None
        for value in _values(request.headers, b"host"):
            if not self.allows_host(value):
                return _forbidden(
                    f"proxai does not answer requests for host {_shown(value)}: it answers "
                    "localhost and IP addresses; add the name to server.allowed_hosts if "
                    "clients reach proxai by it",
                    "host_not_allowed",
                )
        return None

    def _origin_refusal(self, request: BrowserRequest, origins: list[bytes]) -> ProxyError | None:
        if len(origins) > 1:
            return _forbidden("a request may carry one Origin header", "origin_not_allowed")
        if origins:
            if self._allows_origin(origins[0]):
                return None
            return _forbidden(
                f"requests from web pages of origin {_shown(origins[0])} are refused: add "
                "the origin to server.allowed_origins to let its pages use proxai",
                "origin_not_allowed",
            )
        site = (_values(request.headers, b"sec-fetch-site") or [b""])[-1].lower()
        if site not in (b"cross-site", b"same-site"):
            return None
        mode = (_values(request.headers, b"sec-fetch-mode") or [b""])[-1].lower()
        if mode == b"navigate" and request.method in ("GET", "HEAD"):
            return None  # a link followed: the page that linked cannot read the answer
        return _forbidden(
            f"a request from another site's web page (Sec-Fetch-Site: {site.decode()}) "
            "is refused: add the page's origin to server.allowed_origins to let it use proxai",
            "origin_not_allowed",
        )


def _method_refusal(method: str) -> ProxyError | None:
    if method in ALLOWED_METHODS:
        return None
    return ProxyError(
        405,
        f"method {_shown(method.encode('latin-1', 'replace'))} is not allowed: proxai "
        f"serves {', '.join(ALLOWED_METHODS)}",
        "invalid_request_error",
        code="method_not_allowed",
        headers=((b"allow", _ALLOW),),
    )


def _cors_headers(origin: bytes) -> tuple[tuple[bytes, bytes], ...]:
    return (
        (b"access-control-allow-origin", origin),
        (b"vary", b"Origin"),
        (b"access-control-expose-headers", _EXPOSED),
    )


def _preflight(headers: Headers) -> tuple[tuple[bytes, bytes], ...]:
    """A CORS preflight's answer for an allowed origin (empty if it is no preflight)."""
    if not _values(headers, b"access-control-request-method"):
        return ()
    answer = [
        (b"access-control-allow-methods", _CORS_METHODS),
        (b"access-control-max-age", str(PREFLIGHT_MAX_AGE).encode()),
        (b"vary", b"Access-Control-Request-Method, Access-Control-Request-Headers"),
    ]
    # The headers asked for are echoed: SDKs send many of their own (x-stainless-*,
    # anthropic-version...), and a "*" would not cover Authorization.
    requested = b", ".join(_values(headers, b"access-control-request-headers"))
    if requested and _HEADER_LIST.fullmatch(requested.decode("latin-1")):
        answer.append((b"access-control-allow-headers", requested.lower()))
    # Chromium's Private Network Access: a public page may reach a local proxai only
    # when the preflight says so.
    if _values(headers, b"access-control-request-private-network") == [b"true"]:
        answer.append((b"access-control-allow-private-network", b"true"))
    return tuple(answer)
