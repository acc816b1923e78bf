"""The configuration file: TOML in, a checked :class:`~proxai.config.Config` out.

Loading goes through cattrs with ``forbid_extra_keys`` so an unknown key stops
start-up; types are checked strictly (a string is not a number, a float is not
an int) and timeouts must be positive. Errors are collected and reported as one
:class:`~proxai.config.ConfigError` whose message names each offending key as
``table.key``. The checks that need more of proxai than the records (route
patterns, origins and hosts, header grammar) and the start-up warnings about routes
live here, above :mod:`proxai.policy`, so that :mod:`proxai.config` stays the ground.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from .config import (
    DEFAULT_NAME,
    DEFAULT_UPSTREAM,
    Config,
    ConfigError,
    LogFormat,
    MaxTokensField,
    RouteConfig,
    StateBackend,
    TelemetryProtocol,
    UpstreamConfig,
    UpstreamKind,
)
from .converters import error_paths, strict_converter
from .policy.auth import ClientKeys
from .policy.browser import normalize_allowed_host, normalize_origin
from .policy.limits import limits_problems
from .policy.model_patterns import compile_pattern, is_exact
from .protocols.names import WireApi
from .protocols.table import APIS, UPSTREAM_PROTOCOLS
from .protocols.tracking import ITEM_BYTES
from .state.backends import BACKENDS, backend_problems
from .wire.headers import is_token, value_problem

__all__ = [
    "limits_warnings",
    "load_config",
    "route_warnings",
    "server_warnings",
    "state_warnings",
]


_converter = strict_converter(forbid_extra_keys=True)


def _enum_hook(kind: type[enum.StrEnum]) -> Callable[[Any, Any], Any]:
    """A strict structure hook for a string enum: its values only, all named in the error."""

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, str) and value in kind._value2member_map_:
            return kind(value)
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"must be one of {choices}, got {value!r}")

    return structure


for _kind in (UpstreamKind, LogFormat, MaxTokensField, StateBackend, TelemetryProtocol):
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
    _renamed(data)
    config = _structure(data)
    if path is not None:
        config = _resolve_files(config, Path(path).parent)
    problems = _check_upstreams(config, os.environ if environ is None else environ)
    problems += _check_routes(config) + _check_files(config) + _check_observability(config)
    problems += _check_browser(config) + _check_state(config)
    if not problems:  # the keys file is read only once it is known to be there
        problems += _check_limits(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


#: Keys whose meaning changed, under a new name: an old config stops with what to write
#: instead of meaning something else silently.
_RENAMED = {
    ("retries", "budget_min"): (
        "retries.budget_min (a count of retries per budget_window) is now "
        "retries.budget_min_per_second: retries a second (default 10, Finagle's floor); "
        "for the old budget_min = N write budget_min_per_second = N / budget_window"
    ),
    ("limits", "max_concurrent_streams"): (
        "limits.max_concurrent_streams (every key's requests together, across the fleet) "
        "is now limits.fleet_max_concurrent_streams; a key's own limit stays "
        "max_concurrent_streams in its [[limits.keys]] entry"
    ),
}


def _renamed(data: Mapping[str, Any]) -> None:
    problems = [
        message
        for (table, key), message in _RENAMED.items()
        if isinstance(data.get(table), Mapping) and key in data[table]
    ]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


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
    for name, value in config.telemetry.headers.items():
        if not is_token(name):
            problems.append(f"telemetry.headers: {name!r} is not a valid header name")
        elif (why := value_problem(value)) is not None:
            problems.append(f"telemetry.headers.{name}: the value {why}")
    return problems


def _check_state(config: Config) -> list[str]:
    return backend_problems(config.state)


def _check_limits(config: Config) -> list[str]:
    """``[[limits.keys]]`` names keys of ``[auth]`` (by key or digest), each once."""
    if not config.limits.keys:
        return []
    try:
        keys = ClientKeys.from_config(config.auth)
    except ConfigError as exc:
        return [str(exc)]
    return limits_problems(config.limits, keys)


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


def _check_header_values(
    table: str, upstream: UpstreamConfig, environ: Mapping[str, str]
) -> list[str]:
    problems: list[str] = []
    for name, value in upstream.headers.items():
        if not is_token(name):
            problems.append(f"{table}.headers: {name!r} is not a valid header name")
        elif (why := value_problem(value)) is not None:
            problems.append(f"{table}.headers.{name}: the value {why}")
    key = upstream.resolved_api_key(environ)
    if key is not None and (why := value_problem(key)) is not None:
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
        if upstream.websocket and not UPSTREAM_PROTOCOLS[upstream.protocol].websocket:
            problems.append(
                f"{table}.websocket: a {upstream.protocol.value} upstream has no Responses "
                "WebSocket (only openai and openai_responses upstreams may)"
            )
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


def server_warnings(config: Config) -> list[str]:
    """What start-up tells the operator about ``[server]``: a ``max_open_items`` that
    ``max_event_bytes`` cannot hold, since a translated stream holds every item's
    record (``ITEM_BYTES`` counted each) and ends once they are past it."""
    server = config.server
    fits = server.max_event_bytes // ITEM_BYTES
    if server.max_open_items <= fits:
        return []
    return [
        f"[server] max_open_items = {server.max_open_items}, but a translated stream holds "
        f"at most {fits} items within max_event_bytes = {server.max_event_bytes} "
        f"({ITEM_BYTES} bytes counted per item) and ends past it (upstream_over_limit); "
        f"max_event_bytes = {server.max_open_items * ITEM_BYTES} holds that many"
    ]


def state_warnings(config: Config) -> list[str]:
    """What start-up tells the operator about ``[state]``: an in-process store under
    several workers is one store per worker, so a conversation continued on another
    worker finds nothing (``previous_response_not_found``)."""
    if config.server.workers > 1 and not BACKENDS[config.state.backend].shared:
        return [
            f'[state] backend = "{config.state.backend}" with {config.server.workers} workers: '
            "each worker keeps its own stored responses, and a request that names one stored "
            'by another worker gets previous_response_not_found; use backend = "redis" to '
            "share them"
        ]
    return []


def limits_warnings(config: Config) -> list[str]:
    """What start-up tells the operator about ``[limits]``: with the memory backend
    each worker keeps its own windows and slots, so N workers let N times through."""
    workers = config.server.workers
    shared = BACKENDS[config.state.backend].shared
    if workers > 1 and config.limits.enabled and not shared:
        return [
            f'[limits] with [state] backend = "{config.state.backend}" and {workers} workers: '
            f"each worker counts its own requests, tokens and streams, so up to {workers} "
            'times each limit gets through; use backend = "redis" for limits exact across '
            "workers and instances"
        ]
    return []


def route_warnings(config: Config) -> list[str]:
    """What start-up tells the operator about the routes (logged as warnings).

    A route that can never match, because an earlier one takes all its models (the
    same pattern, an exact name an earlier pattern matches, anything after ``"*"``):
    what a glob or regex takes from another one is not decidable in general, so only
    those are reported. And a later route that matches a model an earlier exact route
    names, with upstreams that speak an API the exact route's do not: requests of
    that API for the model are translated for the exact route, never sent to the
    later one (before the first match won whatever its protocol, they were).
    """
    warnings: list[str] = []
    shadowed: set[int] = set()
    for i, entry in enumerate(config.routes):
        for j, earlier in enumerate(config.routes[:i]):
            if _takes_all(earlier, entry):
                shadowed.add(i)
                warnings.append(
                    f"routes[{i}] (model = {entry.model!r}) never matches: routes[{j}] "
                    f"(model = {earlier.model!r}) comes first and takes all its models"
                )
                break
    for i, exact in enumerate(config.routes):
        if i in shadowed or not is_exact(exact.model):
            continue
        for j in range(i + 1, len(config.routes)):
            later = config.routes[j]
            if j in shadowed or not _matches(later.model, exact.model):
                continue
            translated = _apis(config, later) - _apis(config, exact)
            if translated:
                names = ", ".join(api.title for api in APIS if api.wire in translated)
                upstreams = ", ".join(exact.upstreams)
                warnings.append(
                    f"routes[{j}] (model = {later.model!r}) also matches {exact.model!r}, "
                    f"which routes[{i}] names: every request for it goes to routes[{i}] "
                    f"({upstreams}), whatever its API, translated where {upstreams} does "
                    f"not speak it ({names}); routes[{j}] never gets it"
                )
    return warnings


def _matches(pattern: str, model: str) -> bool:
    try:
        return compile_pattern(pattern)(model)
    except ValueError:  # reported by load_config
        return False


def _takes_all(earlier: RouteConfig, route: RouteConfig) -> bool:
    """Whether ``earlier`` matches every model ``route`` can."""
    if earlier.model in (route.model, "*"):
        return True
    return is_exact(route.model) and _matches(earlier.model, route.model)


def _apis(config: Config, route: RouteConfig) -> frozenset[WireApi]:
    """The APIs some upstream of ``route`` speaks natively."""
    apis: frozenset[WireApi] = frozenset()
    for name in route.upstreams:
        upstream = config.upstream_named(name)
        if upstream is not None:
            apis |= UPSTREAM_PROTOCOLS[upstream.protocol].apis
    return apis
