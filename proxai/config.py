"""The configuration's records: frozen attrs classes, each key's type and its own checks.

This is the ground every layer stands on, so it imports nothing of proxai's but
:mod:`proxai.converters`. Reading the TOML file and the checks that need the rest of
proxai (route patterns, origins, start-up warnings) are :mod:`proxai.config_file`'s.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .converters import InvalidValue

__all__ = [
    "AuthConfig",
    "CompactionConfig",
    "Config",
    "ConfigError",
    "KeyLimitsConfig",
    "LimitsConfig",
    "MaxTokensField",
    "NormalizeConfig",
    "RetriesConfig",
    "RouteConfig",
    "ServerConfig",
    "StateBackend",
    "StateConfig",
    "TelemetryConfig",
    "TelemetryProtocol",
    "TimeoutsConfig",
    "TranslationOptions",
    "UpstreamConfig",
    "UpstreamKind",
    "UpstreamTimeouts",
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


def _retries_per_second(inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= 1_000_000:
        raise InvalidValue(
            attribute, f"must be a number of retries a second from 0 to 1000000, got {value!r}"
        )


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
    #: Proxied requests in flight at once in this process (each worker's own); over it:
    #: 503. 0: no limit. (``[limits]`` has the fleet's and each key's.)
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
    #: Serve the Responses API's WebSocket mode on ``GET /v1/responses`` (off: 426).
    websocket: bool = True
    #: Seconds a client socket lives; then ``websocket_connection_limit_reached``.
    websocket_max_age: float = attrs.field(default=3600.0, validator=_positive)
    #: ``response.create`` frames a socket holds while one response runs.
    websocket_max_queued: int = attrs.field(default=16, validator=_positive_int)
    #: The largest conversation (input and output items, as JSON) a socket keeps
    #: for ``previous_response_id``.
    websocket_max_state_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_positive_int)
    #: Client sockets one key holds open at once, per process (an idle socket counts in
    #: no other limit, yet keeps its conversation); over it the upgrade is a 429. 0: none.
    websocket_max_per_key: int = attrs.field(default=32, validator=_non_negative_int)


class UpstreamKind(enum.StrEnum):
    """What an upstream speaks: the value of its ``protocol`` key (the rows of
    :data:`proxai.protocols.table.UPSTREAM_PROTOCOLS` say what each one means)."""

    OPENAI = "openai"  # Responses, Chat Completions and the rest of /v1
    OPENAI_CHAT = "openai_chat"  # Chat Completions only (vLLM, llama.cpp, Ollama...)
    OPENAI_RESPONSES = "openai_responses"  # Responses only
    ANTHROPIC_MESSAGES = "anthropic_messages"  # /v1/messages


class MaxTokensField(enum.StrEnum):
    """The Chat field the output token limit goes in."""

    MAX_COMPLETION_TOKENS = "max_completion_tokens"  # OpenAI's current name
    MAX_TOKENS = "max_tokens"  # what most OpenAI-compatible servers read


@attrs.frozen
class TranslationOptions:
    """Per-upstream choices a translation cannot infer from the request."""

    max_tokens_field: MaxTokensField = MaxTokensField.MAX_TOKENS
    #: Refuse (400) a request whose hosted tools the upstream cannot run, instead of
    #: dropping them with a warning in the outcome record.
    strict: bool = False


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
    protocol: UpstreamKind = UpstreamKind.OPENAI
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
    #: Carry a client's Responses WebSocket to this upstream's own (``openai`` and
    #: ``openai_responses`` upstreams that serve it); off: each turn is an HTTP request.
    websocket: bool = False

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
    #: ...or this many a second over it, when that is more (Finagle's floor).
    budget_min_per_second: float = attrs.field(default=10.0, validator=_retries_per_second)
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


class StateBackend(enum.StrEnum):
    """Where stored responses live (``[state] backend``)."""

    MEMORY = "memory"  # in process: nothing to run, lost on restart
    REDIS = "redis"  # shared by every worker and instance that names the same Redis


_REDIS_SCHEMES = ("redis", "rediss", "unix")


def _redis_url(inst: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """A Redis URL; never quoted in the error, since its ``user:password@`` is a secret."""
    if value is None:
        return
    scheme, sep, rest = value.partition("://")
    if scheme not in _REDIS_SCHEMES or not sep or not rest:
        raise InvalidValue(
            attribute,
            "must be a redis://, rediss:// (TLS) or unix:// URL, "
            f"got one starting with {scheme[:10]!r}",
        )


@attrs.frozen
class StateConfig:
    """Stored responses (``previous_response_id``, ``item_reference``, retrieve/delete)."""

    backend: StateBackend = StateBackend.MEMORY
    #: ``redis://[user:password@]host:port/db``; ``rediss://`` for TLS (backend redis).
    url: str | None = attrs.field(default=None, validator=_redis_url, repr=False)
    #: The memory backend's bound on the records it holds; least recently used go first.
    max_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=_positive_int)
    #: Seconds a stored response lives (OpenAI keeps them 30 days).
    ttl: float = attrs.field(default=30 * 24 * 3600.0, validator=_positive)
    #: Seconds one call to the backend may take; then 503 (a lookup) or no storing.
    timeout: float = attrs.field(default=1.0, validator=_positive)
    #: Prefix of every Redis key proxai writes (one Redis shared by several deployments).
    key_prefix: str = "proxai:"
    #: With several client keys, an id an upstream that keeps state minted that the
    #: index of whose each is does not know (made outside proxai, before it kept the
    #: index, or forgotten) is refused as unknown; ``true`` forwards it (docs/state.md).
    forward_unknown_upstream_ids: bool = False


#: ``[compaction] prompt`` by default: the last message of the summarizing request.
DEFAULT_COMPACTION_PROMPT = (
    "Compact the conversation above so that the work can go on in a fresh context "
    "window from your summary alone. Write a summary for the model that will carry on: "
    "the user's goal, requests and constraints; the decisions made and why; what has "
    "been done so far (files, commands, tool results, errors) and the state it left "
    "things in; what remains to be done next. Keep names, paths, identifiers, numbers "
    "and quoted text exact. Answer with the summary only: call no tool, ask nothing."
)
#: ``[compaction] summary_prefix`` by default: what precedes the summary when it comes back.
DEFAULT_SUMMARY_PREFIX = (
    "The earlier part of this conversation was compacted. This summary of it replaces it:"
)


def _non_blank(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value.strip():
        raise InvalidValue(attribute, "must not be empty")


@attrs.frozen
class CompactionConfig:
    """How proxai compacts a conversation for an upstream that does not compact
    (``POST /v1/responses/compact``, a ``compaction_trigger`` input item)."""

    #: Appended as the last user message of the request that asks for the summary.
    prompt: str = attrs.field(default=DEFAULT_COMPACTION_PROMPT, validator=_non_blank)
    #: The first line of the user message a compaction item becomes in a later request.
    summary_prefix: str = DEFAULT_SUMMARY_PREFIX


def _limit_key(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    """A client key, its ``sha256:`` digest, or ``"*"``; never quoted (it may be a key)."""
    if not value.strip():
        raise InvalidValue(attribute, 'must be a client key of [auth], its sha256: digest, or "*"')


@attrs.frozen
class KeyLimitsConfig:
    """A ``[[limits.keys]]`` entry: one client key's limits (or ``key = "*"``: those of
    every key without an entry of its own). A limit left out is no limit."""

    key: str = attrs.field(validator=_limit_key, repr=False)
    #: The key's name in metrics, logs and the live view (default: a digest prefix).
    name: str | None = None
    requests_per_minute: int | None = attrs.field(default=None, validator=_optional_positive_int)
    #: Input and output tokens, from the usage the upstream reports.
    tokens_per_minute: int | None = attrs.field(default=None, validator=_optional_positive_int)
    #: Responses of this key in flight at once, across the fleet (``[state]``): the
    #: key's own, beside ``[limits] fleet_max_concurrent_streams`` for every key together.
    max_concurrent_streams: int | None = attrs.field(default=None, validator=_optional_positive_int)


@attrs.frozen
class LimitsConfig:
    """Per-client-key limits and the fleet's concurrency, kept in the ``[state]`` backend
    (exact across processes with Redis; per process with memory)."""

    #: Proxied requests of every key together in flight at once across every process
    #: sharing ``[state]``; over it: 503. 0: no limit. (A key's own is its entry's
    #: ``max_concurrent_streams``; ``server.max_concurrent_streams`` is per process.)
    fleet_max_concurrent_streams: int = attrs.field(default=0, validator=_non_negative_int)
    #: When the backend does not answer: refuse with 503 instead of serving unlimited.
    fail_closed: bool = False
    #: Seconds a concurrency slot lives unless its process renews it (every third of
    #: it, while the response runs): a process that dies frees its slots within this.
    slot_lease: float = attrs.field(default=30.0, validator=_positive)
    keys: list[KeyLimitsConfig] = attrs.field(factory=list)

    @property
    def enabled(self) -> bool:
        return bool(self.keys) or self.fleet_max_concurrent_streams > 0


class TelemetryProtocol(enum.StrEnum):
    """How spans and metrics go to the collector (``[telemetry] protocol``)."""

    HTTP_PROTOBUF = "http/protobuf"  # OTLP over HTTP, protobuf bodies (port 4318)


def _ratio(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise InvalidValue(attribute, f"must be a number from 0 to 1, got {value!r}")


@attrs.frozen
class TelemetryConfig:
    """OpenTelemetry traces and GenAI metrics over OTLP (off by default). A key left
    unset is the SDK's: its ``OTEL_*`` environment variable, else the SDK's default."""

    enabled: bool = False
    #: The collector's base URL (``http://localhost:4318``): ``/v1/traces`` and
    #: ``/v1/metrics`` are appended, as the SDK does to ``OTEL_EXPORTER_OTLP_ENDPOINT``.
    endpoint: str | None = attrs.field(default=None, validator=_http_url)
    protocol: TelemetryProtocol = TelemetryProtocol.HTTP_PROTOBUF
    #: Sent with every export (a vendor's API key, say): never logged.
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    #: ``service.name`` of the resource (else ``OTEL_SERVICE_NAME``, else "proxai").
    service_name: str | None = None
    #: The share of new traces kept, the client's sampled flag deciding for its own
    #: (parent-based); unset: ``OTEL_TRACES_SAMPLER`` (default: every trace).
    sampling_ratio: float | None = attrs.field(default=None, validator=_ratio)
    #: Export the GenAI metrics too (over the same endpoint).
    metrics: bool = True


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
    state: StateConfig = StateConfig()
    compaction: CompactionConfig = CompactionConfig()
    limits: LimitsConfig = LimitsConfig()
    telemetry: TelemetryConfig = TelemetryConfig()

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
