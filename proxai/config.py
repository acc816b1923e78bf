"""Configuration: TOML in, frozen attrs classes out, every mistake named by its key.

Loading goes through cattrs with ``forbid_extra_keys`` so an unknown key stops
start-up; types are checked strictly (a string is not a number, a float is not
an int) and timeouts must be positive. Errors are collected and reported as one
:class:`ConfigError` whose message names each offending key as ``table.key``.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from .converters import InvalidValue, error_paths, strict_converter
from .policy.browser import normalize_allowed_host, normalize_origin
from .policy.model_patterns import compile_pattern
from .translate.options import MaxTokensField, TranslationOptions

__all__ = [
    "AuthConfig",
    "Config",
    "ConfigError",
    "NormalizeConfig",
    "Protocol",
    "RetriesConfig",
    "RouteConfig",
    "ServerConfig",
    "TimeoutsConfig",
    "UpstreamConfig",
    "UpstreamTimeouts",
    "load_config",
]

DEFAULT_UPSTREAM = "https://api.openai.com/v1"
DEFAULT_NAME = "default"  # the name of the [upstream] table among all upstreams


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key(s) at fault."""


def _positive(inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise InvalidValue(attribute, f"must be a positive number of seconds, got {value!r}")


def _positive_int(inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value <= 0:
        raise InvalidValue(attribute, f"must be a positive integer, got {value!r}")


def _non_negative_int(inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise InvalidValue(attribute, f"must be 0 or a positive integer, got {value!r}")


def _optional_positive(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        _positive(inst, attribute, value)


def _optional_positive_int(
    inst: object, attribute: attrs.Attribute[Any], value: int | None
) -> None:
    if value is not None:
        _positive_int(inst, attribute, value)


def _budget_percent(inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= 1000:
        raise InvalidValue(attribute, f"must be a percentage from 0 to 1000, got {value!r}")


def _port(inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= 65535:
        raise InvalidValue(attribute, f"must be a port number from 0 to 65535, got {value!r}")


def _http_url(inst: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """An http(s) URL without credentials: proxai sends ``api_key`` or ``headers``, never
    a URL's ``user:password@``, and it logs its upstreams' URLs at start-up."""
    if value is None:
        return
    scheme, _, rest = value.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:  # never quoted: the part before the @ is a secret
        raise InvalidValue(
            attribute,
            "must not hold credentials (user:password@): proxai would not send them; "
            "set api_key, api_key_env or headers (e.g. Authorization) instead",
        )
    if scheme not in ("http", "https") or not rest:
        raise InvalidValue(attribute, f"must be an http:// or https:// URL, got {value!r}")


@attrs.frozen
class ServerConfig:
    """Where proxai listens and what it accepts from clients."""

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8080, validator=_port)
    max_request_body_bytes: int = attrs.field(default=50 * 1024 * 1024, validator=_positive_int)
    #: The largest single SSE event proxai holds while waiting for its end.
    max_event_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive_int)
    #: The largest upstream body proxai holds to translate it whole (over it: 502).
    max_translated_body_bytes: int = attrs.field(default=32 * 1024 * 1024, validator=_positive_int)
    #: Items (tool calls, messages, content blocks) one stream may have open at once.
    max_open_items: int = attrs.field(default=1024, validator=_positive_int)
    #: Proxied requests in flight at once, per process; over it: 503. 0: no limit.
    max_concurrent_streams: int = attrs.field(default=0, validator=_non_negative_int)
    #: Request line and headers, per request (hypercorn's h11 and h2 limits).
    max_header_bytes: int = attrs.field(default=64 * 1024, validator=_positive_int)
    #: On SIGTERM/SIGINT, how long in-flight streams may run before proxai ends them.
    drain_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Worker processes sharing the listening socket (``--workers``).
    workers: int = attrs.field(default=1, validator=_positive_int)
    certfile: str | None = None  # TLS: serve https (and HTTP/2 through ALPN)
    keyfile: str | None = None
    ca_certs: str | None = None  # TLS: require client certificates signed by these CAs
    #: Origins of web pages that may call proxai (CORS); "*" for any. Empty: none.
    allowed_origins: list[str] = attrs.field(factory=list)
    #: Host names accepted besides localhost and IP addresses (DNS rebinding); "*": any.
    allowed_hosts: list[str] = attrs.field(factory=list)


class Protocol(enum.StrEnum):
    """The API an upstream speaks."""

    OPENAI = "openai"  # Responses, Chat Completions and the rest of /v1
    OPENAI_CHAT = "openai_chat"  # Chat Completions only (vLLM, llama.cpp, Ollama...)
    OPENAI_RESPONSES = "openai_responses"  # Responses only
    ANTHROPIC_MESSAGES = "anthropic_messages"  # /v1/messages


@attrs.frozen
class NormalizeConfig:
    """Opt-in rewrites of requests to this upstream (see docs/configuration.md)."""

    #: Move ``role: "system"`` input items of a Responses request into ``instructions``.
    system_to_instructions: bool = False
    #: With ``system_to_instructions``, move ``role: "developer"`` items too.
    developer_to_instructions: bool = False


@attrs.frozen
class UpstreamTimeouts:
    """Per-upstream overrides of the ``[timeouts]`` that concern the upstream alone."""

    connect: float | None = attrs.field(default=None, validator=_optional_positive)
    first_byte: float | None = attrs.field(default=None, validator=_optional_positive)
    idle: float | None = attrs.field(default=None, validator=_optional_positive)
    tool_arguments: float | None = attrs.field(default=None, validator=_optional_positive)


@attrs.frozen
class UpstreamConfig:
    """A server requests are forwarded to."""

    base_url: str | None = attrs.field(default=None, validator=_http_url)
    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_env: str | None = None
    protocol: Protocol = Protocol.OPENAI
    normalize: NormalizeConfig = NormalizeConfig()
    #: Extra headers sent with every request to this upstream (e.g. an organization).
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    timeouts: UpstreamTimeouts = UpstreamTimeouts()
    #: How requests translated for this upstream are written (see docs/translation.md).
    translation: TranslationOptions = attrs.field(factory=TranslationOptions)
    #: Verify the upstream's TLS certificate (against ``ca_bundle`` if set).
    verify: bool = True
    ca_bundle: str | None = None
    #: Seconds an idle pooled connection to this upstream stays open, traffic or not.
    keepalive_expiry: float = attrs.field(default=5.0, validator=_positive)
    #: Idle connections to this upstream kept open at most (0: none are reused).
    max_idle_connections: int = attrs.field(default=256, validator=_non_negative_int)

    @property
    def url(self) -> str:
        """The base URL without a trailing slash (validated to be set)."""
        assert self.base_url is not None
        return self.base_url.rstrip("/")

    def resolved_api_key(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """The key to send upstream: ``api_key`` if set, else ``$api_key_env``."""
        if self.api_key is not None:
            return self.api_key
        if self.api_key_env is not None:
            value = environ.get(self.api_key_env)
            # A key read from a file (a Kubernetes secret, $(cat key)) often ends in a newline.
            return value.strip() if value is not None else None
        return None


@attrs.frozen
class TimeoutsConfig:
    """Deadlines in seconds; see docs/configuration.md for what each one bounds."""

    connect: float = attrs.field(default=10.0, validator=_positive)
    first_byte: float = attrs.field(default=60.0, validator=_positive)
    idle: float = attrs.field(default=120.0, validator=_positive)
    tool_arguments: float = attrs.field(default=120.0, validator=_positive)
    total: float = attrs.field(default=3600.0, validator=_positive)
    request_body: float = attrs.field(default=30.0, validator=_positive)
    client_write: float = attrs.field(default=300.0, validator=_positive)


@attrs.frozen
class RouteConfig:
    """A ``[[routes]]`` entry: requests for matching models go to these upstreams."""

    model: str  # exact, glob ("gpt-*"), or regex ("re:^o[0-9]")
    upstreams: list[str]  # tried in order
    upstream_model: str | None = None  # replaces the request's model upstream


@attrs.frozen
class RetriesConfig:
    """Retries and fallback before the client has seen a byte (see docs/configuration.md)."""

    #: Attempts per request in all; unset: one per upstream of the route (no revisits).
    max_attempts: int | None = attrs.field(default=None, validator=_optional_positive_int)
    backoff_initial: float = attrs.field(default=0.25, validator=_positive)
    backoff_max: float = attrs.field(default=4.0, validator=_positive)
    retry_after_max: float = attrs.field(default=10.0, validator=_positive)
    #: Retries over the last ``budget_window``: at most this share of its requests...
    budget_percent: float = attrs.field(default=20.0, validator=_budget_percent)
    #: ...plus this many per window, whatever the traffic.
    budget_min: int = attrs.field(default=3, validator=_non_negative_int)
    #: The seconds over which retries are counted against requests.
    budget_window: float = attrs.field(default=10.0, validator=_positive)


@attrs.frozen
class AuthConfig:
    """Client keys; with none configured, proxai lets every client through."""

    keys: list[str] = attrs.field(factory=list, repr=False)
    keys_file: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.keys) or self.keys_file is not None


class LogFormat(enum.StrEnum):
    JSON = "json"  # one JSON object per line, for log pipelines
    HUMAN = "human"  # key=value, for a terminal


def _level(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise InvalidValue(
            attribute, f"must be one of debug, info, warning, error, critical, got {value!r}"
        )


@attrs.frozen
class LoggingConfig:
    """The request log: one line per request, from its outcome record."""

    format: LogFormat = LogFormat.HUMAN
    level: str = attrs.field(default="info", validator=_level)
    #: Requests that take longer than this (milliseconds) are logged at warning.
    warn_ms: float = attrs.field(default=60_000.0, validator=_positive)


@attrs.frozen
class MetricsConfig:
    enabled: bool = True
    path: str = "/metrics"
    #: Models that always have their own label, besides those routes name exactly.
    models: list[str] = attrs.field(factory=list)
    #: Other models given a label once served, per process; the rest count as "other".
    max_models: int = attrs.field(default=100, validator=_non_negative_int)


@attrs.frozen
class CaptureConfig:
    """Raw bytes of each request, for reproducing an upstream bug (off by default)."""

    enabled: bool = False
    dir: str = "proxai-captures"
    max_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_int)
    keep: int = attrs.field(default=100, validator=_positive_int)


@attrs.frozen
class LiveViewConfig:
    """``/_proxai/``: the open streams, live (off by default)."""

    enabled: bool = False
    #: Client networks allowed besides loopback, e.g. ["10.0.0.0/8"].
    allow: list[str] = attrs.field(factory=list)
    #: ``/_proxai/events`` streams open at once, per process; past it: 503.
    max_viewers: int = attrs.field(default=4, validator=_positive_int)


@attrs.frozen
class Config:
    """The whole configuration, as loaded from TOML and command-line overrides."""

    server: ServerConfig = ServerConfig()
    upstream: UpstreamConfig = UpstreamConfig()  # the default upstream
    upstreams: dict[str, UpstreamConfig] = attrs.field(factory=dict)  # named ones
    timeouts: TimeoutsConfig = TimeoutsConfig()
    routes: list[RouteConfig] = attrs.field(factory=list)
    retries: RetriesConfig = RetriesConfig()
    auth: AuthConfig = AuthConfig()
    logging: LoggingConfig = LoggingConfig()
    metrics: MetricsConfig = MetricsConfig()
    capture: CaptureConfig = CaptureConfig()
    live_view: LiveViewConfig = LiveViewConfig()

    def upstream_named(self, name: str) -> UpstreamConfig | None:
        if name == DEFAULT_NAME and self.upstream.base_url is not None:
            return self.upstream
        return self.upstreams.get(name)

    def timeouts_for(self, name: str) -> TimeoutsConfig:
        """``[timeouts]`` with the upstream's own overrides applied."""
        upstream = self.upstream_named(name)
        if upstream is None:
            return self.timeouts
        overrides = {k: v for k, v in attrs.asdict(upstream.timeouts).items() if v is not None}
        return attrs.evolve(self.timeouts, **overrides) if overrides else self.timeouts

    def all_upstreams(self) -> list[tuple[str, UpstreamConfig]]:
        """Every configured upstream by name: ``default`` (``[upstream]``) first."""
        named = list(self.upstreams.items())
        if self.upstream.base_url is not None:
            return [(DEFAULT_NAME, self.upstream), *named]
        return named


_converter = strict_converter(forbid_extra_keys=True)


def _enum_hook(kind: type[enum.StrEnum]) -> Callable[[Any, Any], Any]:
    """A strict structure hook for a string enum: its values only, all named in the error."""

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, str) and value in kind._value2member_map_:
            return kind(value)
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"must be one of {choices}, got {value!r}")

    return structure


for _kind in (Protocol, LogFormat, MaxTokensField):
    _converter.register_structure_hook(_kind, _enum_hook(_kind))
_ARRAYS = frozenset({"routes"})  # arrays of tables: [[routes]]
_TABLES = frozenset(a.name for a in attrs.fields(Config)) - _ARRAYS


def _structure(data: Mapping[str, Any]) -> Config:
    problems = [
        f"{k}: must be a table ([{k}]), got {type(v).__name__}"
        for k, v in data.items()
        if k in _TABLES and not isinstance(v, dict)
    ]
    problems += [
        f"{k}: must be an array of tables ([[{k}]]), got {type(v).__name__}"
        for k, v in data.items()
        if k in _ARRAYS and not isinstance(v, list)
    ]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    try:
        return _converter.structure(dict(data), Config)
    except Exception as exc:
        lines = [f"{path}: {reason}" for path, reason in error_paths(exc)]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Mapping[str, Any] | list[Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read a TOML file (or only defaults), apply overrides table by table, validate.

    ``overrides`` maps a table to the keys set on the command line, e.g.
    ``{"upstream": {"base_url": "http://..."}}``; they win over the file.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with Path(path).open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {os.fspath(path)!r}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {os.fspath(path)!r} is not valid TOML: {exc}") from None
    for table, values in (overrides or {}).items():
        if isinstance(values, list):  # an array of tables ([[routes]]) is replaced whole
            data[table] = values
            continue
        merged = dict(data.get(table, {})) if isinstance(data.get(table), dict) else {}
        merged.update({k: v for k, v in values.items() if v is not None})
        if merged:
            data[table] = merged
    config = _structure(data)
    if path is not None:
        config = _resolve_files(config, Path(path).parent)
    problems = _check_upstreams(config, os.environ if environ is None else environ)
    problems += _check_routes(config) + _check_files(config) + _check_observability(config)
    problems += _check_browser(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


def _resolve(base: Path, name: str | None) -> str | None:
    return None if name is None else os.fspath(base / Path(name).expanduser())


def _resolve_files(config: Config, base: Path) -> Config:
    """File names in the config are relative to the config file's folder."""
    server = attrs.evolve(
        config.server,
        certfile=_resolve(base, config.server.certfile),
        keyfile=_resolve(base, config.server.keyfile),
        ca_certs=_resolve(base, config.server.ca_certs),
    )
    auth = attrs.evolve(config.auth, keys_file=_resolve(base, config.auth.keys_file))
    capture = attrs.evolve(config.capture, dir=_resolve(base, config.capture.dir) or "")
    upstream = attrs.evolve(config.upstream, ca_bundle=_resolve(base, config.upstream.ca_bundle))
    upstreams = {
        name: attrs.evolve(u, ca_bundle=_resolve(base, u.ca_bundle))
        for name, u in config.upstreams.items()
    }
    return attrs.evolve(
        config, server=server, auth=auth, upstream=upstream, upstreams=upstreams, capture=capture
    )


def _check_files(config: Config) -> list[str]:
    problems: list[str] = []
    server = config.server
    if (server.certfile is None) != (server.keyfile is None):
        problems.append("server.certfile and server.keyfile: set both to serve TLS, or neither")
    if server.ca_certs is not None and server.certfile is None:
        problems.append("server.ca_certs: client certificates need TLS (server.certfile)")
    files = [
        ("server.certfile", server.certfile),
        ("server.keyfile", server.keyfile),
        ("server.ca_certs", server.ca_certs),
        ("auth.keys_file", config.auth.keys_file),
        ("upstream.ca_bundle", config.upstream.ca_bundle),
    ]
    files += [(f"upstreams.{n}.ca_bundle", u.ca_bundle) for n, u in config.upstreams.items()]
    for key, name in files:
        if name is not None and not Path(name).is_file():
            problems.append(f"{key}: no such file: {name}")
    return problems


def _check_observability(config: Config) -> list[str]:
    problems: list[str] = []
    if not config.metrics.path.startswith("/") or config.metrics.path.startswith("/v1"):
        problems.append(
            f"metrics.path: must start with / and not be under /v1, got {config.metrics.path!r}"
        )
    for i, network in enumerate(config.live_view.allow):
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            problems.append(f"live_view.allow[{i}]: not an IP network: {network!r}")
    return problems


def _check_browser(config: Config) -> list[str]:
    problems: list[str] = []
    for key, entries, check in (
        ("allowed_origins", config.server.allowed_origins, normalize_origin),
        ("allowed_hosts", config.server.allowed_hosts, normalize_allowed_host),
    ):
        for i, entry in enumerate(entries):
            try:
                check(entry)
            except ValueError as exc:
                problems.append(f"server.{key}[{i}]: {exc}")
    return problems


def _check_routes(config: Config) -> list[str]:
    problems: list[str] = []
    for i, route in enumerate(config.routes):
        where = f"routes[{i}]"
        try:
            compile_pattern(route.model)
        except ValueError as exc:
            problems.append(f"{where}.model: {exc}")
        if not route.upstreams:
            problems.append(f"{where}.upstreams: name at least one upstream")
        for name in route.upstreams:
            upstream = config.upstream_named(name)
            if upstream is None:
                declared = ", ".join(n for n, _ in config.all_upstreams())
                problems.append(
                    f"{where}.upstreams: no upstream named {name!r} (declared: {declared})"
                )
    return problems


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _bad_value(value: str) -> str | None:
    """Why ``value`` cannot be an HTTP header value, if it cannot (never quoting it)."""
    if any(c in value for c in "\r\n\0"):
        return "contains a line break or NUL"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "has characters outside latin-1"
    return None


def _check_header_values(
    table: str, upstream: UpstreamConfig, environ: Mapping[str, str]
) -> list[str]:
    problems: list[str] = []
    for name, value in upstream.headers.items():
        if not _TOKEN.fullmatch(name):
            problems.append(f"{table}.headers: {name!r} is not a valid header name")
        elif (why := _bad_value(value)) is not None:
            problems.append(f"{table}.headers.{name}: the value {why}")
    key = upstream.resolved_api_key(environ)
    if key is not None and (why := _bad_value(key)) is not None:
        source = (
            "api_key" if upstream.api_key is not None else f"api_key_env ({upstream.api_key_env})"
        )
        problems.append(f"{table}.{source}: the key {why}")
    return problems


def _check_upstreams(config: Config, environ: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    if DEFAULT_NAME in config.upstreams:
        problems.append(f"upstreams.{DEFAULT_NAME}: the name is taken by [upstream]")
    tables = [("upstream", config.upstream)]
    tables += [(f"upstreams.{name}", u) for name, u in config.upstreams.items()]
    for table, upstream in tables:
        configured = upstream != UpstreamConfig()  # [upstream] may be left out entirely
        if upstream.base_url is None and (table != "upstream" or configured):
            problems.append(f"{table}.base_url: required key is missing")
        problems += _check_header_values(table, upstream, environ)
        if upstream.api_key is not None and upstream.api_key_env is not None:
            problems.append(f"{table}.api_key and {table}.api_key_env: set one, not both")
        elif upstream.api_key_env is not None and upstream.api_key_env not in environ:
            problems.append(
                f"{table}.api_key_env: the environment variable {upstream.api_key_env} is not set"
            )
    if not config.all_upstreams():
        problems.append(
            "upstream.base_url: no upstream configured; set [upstream] base_url in the "
            f"config file or pass --upstream (for OpenAI: {DEFAULT_UPSTREAM})"
        )
    return problems
