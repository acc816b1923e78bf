"""Which upstreams a request goes to: ``[[routes]]`` matched against its model.

A route applies to requests of its upstreams' protocol (OpenAI-compatible or
Anthropic Messages); the first route whose pattern matches the request's model
wins. Requests that carry no model (``GET /v1/models``, ``GET
/v1/responses/{id}``) and every request when no route is configured go to the
first upstream of their protocol, in declaration order.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..config import Config, Protocol
from ..errors import ProxyError
from ..protocols.table import UPSTREAM_PROTOCOLS
from .model_patterns import compile_pattern, is_exact

__all__ = ["Route", "Router"]


@attrs.frozen
class Route:
    """Where a request goes: upstream names in the order they are tried."""

    upstreams: tuple[str, ...]
    upstream_model: str | None = None
    #: ``routes[i] model="gpt-*"`` for a configured route, ``None`` for the default one.
    name: str | None = None


@attrs.frozen
class _Compiled:
    route: Route
    protocol: Protocol
    matches: Callable[[str], bool]


class Router:
    """Matches models to routes; built once from a validated :class:`Config`."""

    def __init__(self, config: Config) -> None:
        self._routes: list[_Compiled] = []
        #: The models a route names exactly (no glob, no regex): the operator's own.
        self.exact_models = frozenset(e.model for e in config.routes if is_exact(e.model))
        for i, entry in enumerate(config.routes):
            first = config.upstream_named(entry.upstreams[0])
            assert first is not None  # checked when the configuration was loaded
            route = Route(
                tuple(entry.upstreams), entry.upstream_model, f"routes[{i}] model={entry.model!r}"
            )
            self._routes.append(_Compiled(route, first.protocol, compile_pattern(entry.model)))
        self._defaults = {
            protocol: Route((found[0],))
            for protocol in Protocol
            if (found := config.upstream_for(protocol)) is not None
        }

    @property
    def has_routes(self) -> bool:
        return bool(self._routes)

    def has_protocol(self, protocol: Protocol) -> bool:
        return protocol in self._defaults

    def route_for(self, protocol: Protocol, model: str | None) -> Route:
        """The route of a request; raises :class:`ProxyError` (404) when there is none."""
        if model is not None and self._routes:
            for compiled in self._routes:
                if compiled.protocol is protocol and compiled.matches(model):
                    return compiled.route
            raise ProxyError(
                404,
                f"The model `{model}` does not exist or you do not have access to it "
                "(no proxai route matches it)",
                "invalid_request_error",
                param="model",
                code="model_not_found",
            )
        default = self._defaults.get(protocol)
        if default is None:
            raise ProxyError(
                404,
                UPSTREAM_PROTOCOLS[protocol].missing,
                "invalid_request_error",
                code="no_upstream",
            )
        return default
