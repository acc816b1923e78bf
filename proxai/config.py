"""Configuration: TOML in, frozen attrs classes out, every mistake named by its key.

Loading goes through cattrs with ``forbid_extra_keys`` so an unknown key stops
start-up; types are checked strictly (a string is not a number, a float is not
an int) and timeouts must be positive. Errors are collected and reported as one
:class:`ConfigError` whose message names each offending key as ``table.key``.
"""

from __future__ import annotations

import enum
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .converters import InvalidValue, error_paths, strict_converter

__all__ = [
    "Config",
    "ConfigError",
    "NormalizeConfig",
    "Protocol",
    "ServerConfig",
    "TimeoutsConfig",
    "UpstreamConfig",
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


def _port(inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= 65535:
        raise InvalidValue(attribute, f"must be a port number from 0 to 65535, got {value!r}")


def _http_url(inst: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise InvalidValue(attribute, f"must be an http:// or https:// URL, got {value!r}")


@attrs.frozen
class ServerConfig:
    """Where proxai listens and what it accepts from clients."""

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8080, validator=_port)
    max_request_body_bytes: int = attrs.field(default=50 * 1024 * 1024, validator=_positive_int)
    #: The largest single SSE event proxai holds while waiting for its end.
    max_event_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive_int)


class Protocol(enum.StrEnum):
    """The API an upstream speaks."""

    OPENAI = "openai"  # Responses, Chat Completions and the rest of /v1
    ANTHROPIC_MESSAGES = "anthropic_messages"  # /v1/messages


@attrs.frozen
class NormalizeConfig:
    """Opt-in rewrites of requests to this upstream (see docs/configuration.md)."""

    #: Move ``role: "system"`` input items of a Responses request into ``instructions``.
    system_to_instructions: bool = False
    #: With ``system_to_instructions``, move ``role: "developer"`` items too.
    developer_to_instructions: bool = False


@attrs.frozen
class UpstreamConfig:
    """A server requests are forwarded to."""

    base_url: str | None = attrs.field(default=None, validator=_http_url)
    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_env: str | None = None
    protocol: Protocol = Protocol.OPENAI
    normalize: NormalizeConfig = NormalizeConfig()

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
            return environ.get(self.api_key_env)
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
class Config:
    """The whole configuration, as loaded from TOML and command-line overrides."""

    server: ServerConfig = ServerConfig()
    upstream: UpstreamConfig = UpstreamConfig()  # the default upstream
    upstreams: dict[str, UpstreamConfig] = attrs.field(factory=dict)  # named ones
    timeouts: TimeoutsConfig = TimeoutsConfig()

    def all_upstreams(self) -> list[tuple[str, UpstreamConfig]]:
        """Every configured upstream by name: ``default`` (``[upstream]``) first."""
        named = list(self.upstreams.items())
        if self.upstream.base_url is not None:
            return [(DEFAULT_NAME, self.upstream), *named]
        return named

    def upstream_for(self, protocol: Protocol) -> tuple[str, UpstreamConfig] | None:
        """The first upstream that speaks ``protocol`` (until routes choose one)."""
        return next(((n, u) for n, u in self.all_upstreams() if u.protocol is protocol), None)


_converter = strict_converter(forbid_extra_keys=True)


def _structure_protocol(value: Any, _: Any) -> Protocol:
    if isinstance(value, str) and value in Protocol._value2member_map_:
        return Protocol(value)
    choices = ", ".join(repr(p.value) for p in Protocol)
    raise ValueError(f"must be one of {choices}, got {value!r}")


_converter.register_structure_hook(Protocol, _structure_protocol)
_TABLES = frozenset(a.name for a in attrs.fields(Config))


def _structure(data: Mapping[str, Any]) -> Config:
    not_tables = [k for k, v in data.items() if k in _TABLES and not isinstance(v, dict)]
    if not_tables:
        raise ConfigError(
            "invalid configuration:\n  "
            + "\n  ".join(
                f"{k}: must be a table ([{k}]), got {type(data[k]).__name__}" for k in not_tables
            )
        )
    try:
        return _converter.structure(dict(data), Config)
    except Exception as exc:
        lines = [f"{path}: {reason}" for path, reason in error_paths(exc)]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
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
        merged = dict(data.get(table, {})) if isinstance(data.get(table), dict) else {}
        merged.update({k: v for k, v in values.items() if v is not None})
        if merged:
            data[table] = merged
    config = _structure(data)
    _check_upstreams(config, os.environ if environ is None else environ)
    return config


def _check_upstreams(config: Config, environ: Mapping[str, str]) -> None:
    problems: list[str] = []
    if DEFAULT_NAME in config.upstreams:
        problems.append(f"upstreams.{DEFAULT_NAME}: the name is taken by [upstream]")
    tables = [("upstream", config.upstream)]
    tables += [(f"upstreams.{name}", u) for name, u in config.upstreams.items()]
    for table, upstream in tables:
        configured = upstream != UpstreamConfig()  # [upstream] may be left out entirely
        if upstream.base_url is None and (table != "upstream" or configured):
            problems.append(f"{table}.base_url: required key is missing")
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
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
