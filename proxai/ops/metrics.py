"""Prometheus metrics, counted from each request's outcome record.

With ``--workers N`` every worker counts into files under
``$PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode, which
the workers' parent sets up), and ``/metrics`` on any worker reports the sum
over all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics import MetricWrapperBase

from ..config import MetricsConfig
from ..outcome import STALLS, AttemptRecord, Outcome
from .labels import MAX_MODELS, ModelLabels

M = TypeVar("M", bound=MetricWrapperBase)

__all__ = ["CONTENT_TYPE_LATEST", "MULTIPROCESS_ENV", "Metrics"]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """The metrics of one proxai process (one ProxaiApp).

    ``route_models`` (the models ``[[routes]]`` name exactly, and those
    ``metrics.models`` names) always keep their label; ``max_models`` others may get one
    (:class:`~proxai.ops.labels.ModelLabels`).
    """

    def __init__(self, route_models: Iterable[str] = (), max_models: int = MAX_MODELS) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_ENV))
        registry = self.registry = CollectorRegistry(auto_describe=True)
        self._model = ModelLabels(route_models, max_models)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self.requests = Counter(
            "proxai_requests",
            "Requests by route, upstream, model, outcome and transport (http, or "
            "websocket: one per response of a socket).",
            ["route", "upstream", "model", "outcome", "transport"],
            registry=registry,
        )
        self.websockets_open = Gauge(
            "proxai_websockets_open",
            "Client WebSockets open (the Responses WebSocket mode).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.websocket_connections = Counter(
            "proxai_websocket_connections",
            "Client WebSocket upgrades, by result: accepted, or the HTTP status refusing it.",
            ["result"],
            registry=registry,
        )
        self.stalls = Counter(
            "proxai_stalls", "Streams ended by a deadline, by kind.", ["kind"], registry=registry
        )
        self.in_flight = Gauge(
            "proxai_in_flight_requests",
            "Proxied requests in flight (streams open).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.attempts = Counter(
            "proxai_upstream_attempts",
            "Requests sent upstream, by upstream and result (status, or failure kind).",
            ["upstream", "result"],
            registry=registry,
        )
        self.retries = Counter(
            "proxai_upstream_retries",
            "Attempts after a request's first one, by the upstream retried on.",
            ["upstream"],
            registry=registry,
        )
        self.retries_refused = Counter(
            "proxai_retries_refused",
            "Retries not made because the retry budget was spent: the failure went to the client.",
            registry=registry,
        )
        self.first_byte = Histogram(
            "proxai_time_to_first_byte_seconds",
            "From the request's start to the upstream's response headers.",
            ["upstream"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.first_event = Histogram(
            "proxai_time_to_first_event_seconds",
            "From the request's start to the first complete SSE event.",
            ["upstream"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "proxai_request_duration_seconds",
            "From the request's start to its end.",
            ["upstream"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.events = Counter(
            "proxai_relayed_events", "SSE events relayed.", ["upstream"], registry=registry
        )
        self.bytes = Counter(
            "proxai_relayed_bytes",
            "Body bytes relayed, by direction (in: from upstreams, out: to clients).",
            ["direction"],
            registry=registry,
        )
        self.background_failures = Counter(
            "proxai_background_failures",
            "Failures of proxai's background tasks (the idle-connection sweep, the drain), "
            "by task: each is logged and the task goes on.",
            ["task"],
            registry=registry,
        )
        self.pool_connections = Gauge(
            "proxai_upstream_connections",
            "Connections in an upstream's pools, by state: busy (serving a request), "
            "idle (kept for reuse), closed (closed but still listed by a pool: always 0 "
            "unless connections leak).",
            ["upstream", "state"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.tokens = Counter(
            "proxai_usage_tokens",
            "Tokens the upstreams reported in usage, by model and kind.",
            ["model", "kind"],
            registry=registry,
        )

        self.limited = Counter(
            "proxai_limited",
            "Requests refused by [limits], by key (its configured name or a digest "
            "prefix, never the key) and limit.",
            ["key", "limit"],
            registry=registry,
        )
        self.limits_unavailable = Counter(
            "proxai_limits_unavailable",
            "Limit decisions the [state] backend did not answer (served unlimited, or "
            "refused with fail_closed).",
            registry=registry,
        )

    @classmethod
    def from_config(cls, config: MetricsConfig, route_models: Iterable[str]) -> Metrics:
        """The metrics of a process whose routes name ``route_models`` exactly."""
        return cls([*route_models, *config.models], config.max_models)

    def _child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, looked up once per label set: prometheus_client
        checks the values and takes a lock on every call, a dozen times a request.
        Bounded as the labels are (the models by ``max_models``, the rest by the
        configuration and the outcome kinds)."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child  # type: ignore[return-value]  # the labels of the same metric

    def observe(self, outcome: Outcome) -> None:
        upstream = outcome.upstream or ""
        model = self._model(outcome)
        kind = outcome.kind.value if outcome.kind else "unknown"
        self._child(
            self.requests, outcome.route or "", upstream, model, kind, outcome.transport
        ).inc()
        if outcome.retry_refused:
            self.retries_refused.inc()
        if outcome.kind in STALLS:
            self._child(self.stalls, kind).inc()
        if outcome.first_byte_s is not None:
            self._child(self.first_byte, upstream).observe(outcome.first_byte_s)
        if outcome.first_event_s is not None:
            self._child(self.first_event, upstream).observe(outcome.first_event_s)
        if outcome.total_s is not None:
            self._child(self.duration, upstream).observe(outcome.total_s)
        if outcome.events:
            self._child(self.events, upstream).inc(outcome.events)
        if outcome.bytes_in:
            self._child(self.bytes, "in").inc(outcome.bytes_in)
        if outcome.bytes_out:
            self._child(self.bytes, "out").inc(outcome.bytes_out)
        if outcome.tokens is not None:
            for token_kind, count in outcome.tokens.counts().items():
                self._child(self.tokens, model, token_kind).inc(count)

    def pools(self, upstream: str, open: int, idle: int, listed: int) -> None:
        """An upstream's pools now (set after each idle sweep, and before each scrape)."""
        gauge = self.pool_connections
        gauge.labels(upstream, "busy").set(open - idle)
        gauge.labels(upstream, "idle").set(idle)
        gauge.labels(upstream, "closed").set(listed - open)

    def attempt(self, attempt: AttemptRecord, index: int) -> None:
        """An upstream attempt was decided (counted at once, not when the request ends)."""
        self._child(self.attempts, attempt.upstream, attempt.result or "unknown").inc()
        if index:
            self._child(self.retries, attempt.upstream).inc()

    def exposition(self) -> bytes:
        """The text format ``/metrics`` answers with (summed over workers if several)."""
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)
