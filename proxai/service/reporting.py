"""Where every request's record goes once it ends, for both carriers: the metrics, the
request log, its trace and the ``on_outcome`` hook, in that order (whoever reads the
log line finds the request in ``/metrics``); and the counts of what is not a request
(upgrades, limits refusals and outages, background failures)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..ops.metrics import Metrics
from ..ops.request_log import RequestLog
from ..outcome import Outcome
from .plan import Incoming

if TYPE_CHECKING:  # imported only when [telemetry] is enabled (see ProxaiApp.startup)
    from ..ops.telemetry import RequestTrace, Telemetry

__all__ = ["OutcomeHook", "Reporter"]

OutcomeHook = Callable[[Outcome], None]


class Reporter:
    """Records outcomes; :attr:`telemetry` is set from startup to shutdown when on."""

    def __init__(
        self, request_log: RequestLog, metrics: Metrics | None, on_outcome: OutcomeHook | None
    ) -> None:
        self._request_log = request_log
        self._metrics = metrics
        self._on_outcome = on_outcome
        self.telemetry: Telemetry | None = None

    def trace(self, incoming: Incoming, outcome: Outcome) -> RequestTrace | None:
        """The request's trace (its SERVER span starts now), when telemetry is on."""
        if self.telemetry is None:
            return None
        return self.telemetry.request(incoming.headers, outcome)

    def report(
        self, outcome: Outcome, *, counted: bool = True, trace: RequestTrace | None = None
    ) -> None:
        """A request ended (``counted``: in the request metrics; an upgrade is not)."""
        if self._metrics is not None and counted:
            self._metrics.observe(outcome)
        self._request_log(outcome)
        if trace is not None:
            trace.finish(outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def count_websocket(self, result: str | None, *, opened: int = 0) -> None:
        """An upgrade's result (``accepted``, a status), and the change in open sockets."""
        if self._metrics is None:
            return
        if result is not None:
            self._metrics.websocket_connections.labels(result).inc()
        if opened:
            self._metrics.websockets_open.inc(opened)

    def count_limited(self, key: str, limit: str) -> None:
        if self._metrics is not None:
            self._metrics.limited.labels(key, limit).inc()

    def count_limits_unavailable(self) -> None:
        if self._metrics is not None:
            self._metrics.limits_unavailable.inc()

    def count_failure(self, task: str) -> None:
        """A background task's failure (the idle sweep, the drain)."""
        if self._metrics is not None:
            self._metrics.background_failures.labels(task).inc()
