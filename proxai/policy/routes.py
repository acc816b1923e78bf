"""Which upstreams a request goes to: ``[[routes]]`` matched against its model.

The first route whose pattern matches the request's model wins, whatever the
protocols of its upstreams: the order of the routes is the operator's word on
where a model's requests may go (a local model's must not reach a cloud
upstream because that one speaks the client's API). Of the route's upstreams,
the request goes to those that can serve it (natively or translated), in the
route's order; when none can, it is refused, never handed to a later route.
Requests that carry no model (``GET /v1/models``, ``GET /v1/responses/{id}``)
and every request when no route is configured go to the first upstream that
speaks their API natively, else the first that can be translated to, in
declaration order.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..config import Config, UpstreamKind
from ..errors import ProxyError
from .model_patterns import compile_pattern, is_exact

__all__ = ["Route", "Router", "Serves"]

#: Whether an upstream of this protocol can take the request.
Serves = Callable[[UpstreamKind], bool]


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
    matches: Callable[[str], bool]


class Router:
    """Matches models to routes; built once from a validated :class:`Config`."""

    def __init__(self, config: Config) -> None:
        self._routes = [
            _Compiled(
                Route(
                    tuple(entry.upstreams),
                    entry.upstream_model,
                    f"routes[{i}] model={entry.model!r}",
                ),
                compile_pattern(entry.model),
            )
            for i, entry in enumerate(config.routes)
        ]
        self._protocols = {name: upstream.protocol for name, upstream in config.all_upstreams()}
        #: The models a route names exactly (no glob, no regex): the operator's own.
        self.exact_models = frozenset(e.model for e in config.routes if is_exact(e.model))

    @property
    def has_routes(self) -> bool:
        return bool(self._routes)

    def has_protocol(self, protocol: UpstreamKind) -> bool:
        return protocol in self._protocols.values()

    def check_served(self, *, native: Serves, serves: Serves, missing: str) -> None:
        """Raise the 404 ``missing`` when no upstream can take the request, whatever its
        model: checked before its body is read, so that none is read in vain. It routes
        nothing (the route needs the model, which is in the body)."""
        if not any(native(p) or serves(p) for p in self._protocols.values()):
            raise ProxyError(404, missing, "invalid_request_error", code="no_upstream")

    def route_for(
        self, model: str | None, *, native: Serves, serves: Serves, missing: str
    ) -> Route:
        """The route of a request; raises :class:`ProxyError` (404) when there is none.

        ``native``: an upstream speaks the request's API itself; ``serves``: it can
        take the request at all (natively or translated). ``missing`` is the 404's
        message when no upstream can.
        """
        if model is not None and self._routes:
            for compiled in self._routes:
                if compiled.matches(model):
                    return self._served_by(compiled.route, model, serves)
            raise ProxyError(
                404,
                f"The model `{model}` does not exist or you do not have access to it "
                "(no proxai route matches it)",
                "invalid_request_error",
                param="model",
                code="model_not_found",
            )
        for accepts in (native, serves):
            for name, protocol in self._protocols.items():
                if accepts(protocol):
                    return Route((name,))
        raise ProxyError(404, missing, "invalid_request_error", code="no_upstream")

    def _served_by(self, route: Route, model: str, serves: Serves) -> Route:
        """``route`` with only the upstreams that can take the request, in its order
        (none: a 404, since a later route must not take what this one names)."""
        usable = tuple(n for n in route.upstreams if serves(self._protocols[n]))
        if not usable:
            raise ProxyError(
                404,
                f"The model `{model}` goes to {route.name}, and none of its upstreams "
                f"({', '.join(route.upstreams)}) can serve this request",
                "invalid_request_error",
                param="model",
                code="no_upstream",
            )
        return attrs.evolve(route, upstreams=usable)
