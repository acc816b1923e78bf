"""OpenTelemetry: a SERVER span per request, a CLIENT span per upstream attempt, and the
GenAI metrics, exported over OTLP/HTTP (``[telemetry]``, off by default).

Only the app imports this module, and only when ``[telemetry] enabled``: with it off
no ``opentelemetry`` module is loaded and no thread is started. Nothing here runs per
event: the relay counts events, and a request's spans get their attributes, events
and metrics once, when its outcome is reported (:meth:`RequestTrace.finish`), from
:mod:`proxai.ops.genai`'s pure mapping. The SDK's batch processor and periodic
metric reader export from threads of their own; the trio side only ends spans and
records values (no I/O), and :meth:`Telemetry.shutdown` (which flushes, blocking) is
run in a worker thread. The spans are encoded to OTLP protobuf by proxai's own
encoder (:mod:`proxai.ops.otlp_spans`, the same bytes as the SDK's, at a fifth of its
cost) and sent by the SDK's exporter.

Spans are not made current (no context is attached): trio's tasks share a request,
so each span's parent is passed explicitly: the client's ``traceparent`` for the
SERVER span, the SERVER span for each attempt's CLIENT span, whose context goes
upstream in the attempt's ``traceparent`` / ``tracestate`` (the client's own are
replaced, as the propagators of ``OTEL_PROPAGATORS`` write them).

A span costs little until it ends (issue 34): at its start only its context is made
(the provider's sampler and id generator decide it, as the SDK's tracer would), and
when the request is reported a sampled span is handed to the batch processor whole,
as one :class:`~opentelemetry.sdk.trace.ReadableSpan` with its attributes in one
dict, instead of through a live SDK span's per-attribute setters and locks. An
unsampled span is never built. Its attributes are not checked one by one (genai.py
gives only the conventions' types, ids cut at :data:`~proxai.ops.genai.MAX_ID`, fewer
than 50 a span); the SDK's span limits (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, the value
length limits) still apply when they are set low enough to bind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from functools import partial

import attrs
import httpx
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.propagate import get_global_textmap
from opentelemetry.sdk.environment_variables import OTEL_SDK_DISABLED, OTEL_TRACES_SAMPLER
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import Attributes

from ..config import Config, TelemetryConfig
from ..outcome import CLIENT_ENDED, AttemptRecord, Outcome
from ..protocols.table import UPSTREAM_PROTOCOLS
from ..wire.headers import Headers
from .genai import (
    CACHE_READ_TOKENS,
    CACHE_WRITE_TOKENS,
    DURATION_BUCKETS,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    REASONING_TOKENS,
    AttributeValue,
    RequestFacts,
    UpstreamFacts,
    attempt_attributes,
    attempt_error_type,
    error_type,
    is_server_fault,
    server_attributes,
    span_name,
    stall_attributes,
    usage_attributes,
)
from .labels import ModelLabels
from .otlp_spans import SpanExporter

__all__ = ["DEFAULT_SERVICE_NAME", "RequestTrace", "Telemetry", "signal_url"]

DEFAULT_SERVICE_NAME = "proxai"
_SCOPE = "proxai"
_INSTRUMENTATION_SCOPE = InstrumentationScope(_SCOPE)
_UNSET = Status(StatusCode.UNSET)
_W3C_FIELDS = frozenset((b"traceparent", b"tracestate", b"baggage"))
_ERROR = Status(StatusCode.ERROR)


def signal_url(endpoint: str | None, signal: str) -> str | None:
    """The URL one signal goes to: ``{endpoint}/v1/{signal}``, as the SDK builds it from
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``None`` leaves it to the SDK's variables."""
    if endpoint is None:
        return None
    return f"{endpoint.rstrip('/')}/v1/{signal}"


def _resource(config: TelemetryConfig) -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` as the SDK reads them; the
    configured service name over both, and "proxai" where neither names one."""
    resource = Resource.create()
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if config.service_name is not None:
        named = config.service_name
    elif not named or named.startswith("unknown_service"):
        named = DEFAULT_SERVICE_NAME
    return resource.merge(Resource({SERVICE_NAME: named}))


def _upstream_facts(config: Config) -> dict[str, UpstreamFacts]:
    facts = {}
    for name, upstream in config.all_upstreams():
        url = httpx.URL(upstream.base_url or "")
        facts[name] = UpstreamFacts(
            UPSTREAM_PROTOCOLS[upstream.protocol].genai_provider, url.host or None, url.port
        )
        if url.port is None and url.scheme in ("http", "https"):
            facts[name] = attrs.evolve(facts[name], port=443 if url.scheme == "https" else 80)
    return facts


class Telemetry:
    """The process's tracer and meter providers and their OTLP exporters, from
    lifespan startup to :meth:`shutdown`."""

    def __init__(self, config: Config, route_models: Iterable[str] = ()) -> None:
        settings = config.telemetry
        resource = _resource(settings)
        sampler: Sampler | None = None  # the SDK's, from OTEL_TRACES_SAMPLER
        if settings.sampling_ratio is not None:
            sampler = ParentBased(TraceIdRatioBased(settings.sampling_ratio))
        headers = dict(settings.headers) or None  # None: OTEL_EXPORTER_OTLP_*HEADERS
        self._tracer_provider = TracerProvider(
            sampler=sampler, resource=resource, shutdown_on_exit=False
        )
        exporter = SpanExporter(endpoint=signal_url(settings.endpoint, "traces"), headers=headers)
        self._processor = BatchSpanProcessor(exporter)
        self._tracer_provider.add_span_processor(self._processor)
        self.resource = self._tracer_provider.resource
        self._sampler = self._tracer_provider.sampler
        self._ids = self._tracer_provider.id_generator
        #: ``OTEL_SDK_DISABLED``, as the SDK's tracer reads it: no span is recorded.
        disabled = os.environ.get(OTEL_SDK_DISABLED, "")
        self._disabled = disabled.lower().strip() == "true"
        #: ``OTEL_SPAN_ATTRIBUTE_*_LIMIT`` (``OTEL_ATTRIBUTE_*``), applied when they bind.
        self._limits = SpanLimits()
        #: Whether the sampler is parent-based with its default delegates, which decide a
        #: span with a local parent as the parent was decided: an attempt's span then
        #: takes its request's decision without asking the sampler again.
        named = os.environ.get(OTEL_TRACES_SAMPLER) or "parentbased_always_on"
        self._follows_parent = settings.sampling_ratio is not None or named.lower() in (
            "parentbased_always_on",
            "parentbased_always_off",
            "parentbased_traceidratio",
        )
        self.propagator = get_global_textmap()
        #: The headers the propagators write: a client's are not forwarded as they are.
        self.fields = frozenset(name.lower().encode("latin-1") for name in self.propagator.fields)
        #: W3C trace context (and baggage, of which a span's context here has none: no
        #: context is ever attached), the default: an attempt's headers are written from
        #: its span's context directly instead of through the propagators.
        self._w3c = b"traceparent" in self.fields and self.fields <= _W3C_FIELDS
        self.upstreams = _upstream_facts(config)
        self._meter_provider: MeterProvider | None = None
        self.instruments: _Instruments | None = None
        if settings.metrics:
            reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(
                    endpoint=signal_url(settings.endpoint, "metrics"), headers=headers
                )
            )
            # No exemplars: the trace-based filter looks each measurement's current span
            # up, and no span is ever current here (see the module's docstring).
            self._meter_provider = MeterProvider(
                metric_readers=[reader],
                resource=resource,
                shutdown_on_exit=False,
                exemplar_filter=AlwaysOffExemplarFilter(),
            )
            self.instruments = _Instruments(self._meter_provider)
        #: The model label of the metrics, bounded as Prometheus' is (``[metrics]``).
        self.model_label = ModelLabels(
            [*route_models, *config.metrics.models], config.metrics.max_models
        )

    def request(self, headers: Headers, outcome: Outcome) -> RequestTrace:
        """A request's trace: its SERVER span starts now, the client's context its parent."""
        return RequestTrace(self, headers, outcome)

    def start(self, name: str, kind: SpanKind, parent: Context | None, start_ns: int) -> _Started:
        """A span's context, decided as the SDK's tracer decides it (the parent's trace,
        or a new one; the sampler's decision and trace state; a new span id)."""
        parent_span = trace.get_current_span(parent).get_span_context()
        if self._disabled:  # the SDK's tracer gives the parent's context back
            return _Started(parent_span, None, start_ns, {}, recorded=False)
        if parent_span.is_valid:
            trace_id = parent_span.trace_id
            random_id = parent_span.trace_flags.random_trace_id
            of: SpanContext | None = parent_span
        else:
            trace_id = self._ids.generate_trace_id()
            random_id = self._ids.is_trace_id_random()
            of = None
        decided = self._sampler.should_sample(parent, trace_id, name, kind)
        sampled = decided.decision is Decision.RECORD_AND_SAMPLE
        flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
        if random_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        context = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=TraceFlags(flags),
            trace_state=decided.trace_state,
        )
        return _Started(context, of, start_ns, dict(decided.attributes or {}))

    def child(self, parent: _Started, name: str, start_ns: int) -> _Started:
        """The context of a span whose parent is ``parent`` (a span of this process)."""
        if self._disabled:
            return _Started(parent.context, None, start_ns, {}, recorded=False)
        if not self._follows_parent:
            within = trace.set_span_in_context(NonRecordingSpan(parent.context))
            return self.start(name, SpanKind.CLIENT, within, start_ns)
        of = parent.context
        context = SpanContext(
            of.trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=of.trace_flags,
            trace_state=of.trace_state,
        )
        return _Started(context, of, start_ns, {})

    def propagated(self, started: _Started) -> list[tuple[bytes, bytes]]:
        """The headers that carry ``started``'s context upstream, as the propagators of
        ``OTEL_PROPAGATORS`` write them."""
        context = started.context
        if self._w3c:
            if not context.is_valid:  # as the propagator: no context, no header
                return []
            parent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
            sent = [(b"traceparent", parent.encode("latin-1"))]
            if context.trace_state:
                sent.append((b"tracestate", context.trace_state.to_header().encode("latin-1")))
            return sent
        carrier: dict[str, str] = {}
        self.propagator.inject(
            carrier, context=trace.set_span_in_context(NonRecordingSpan(context))
        )
        return [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in carrier.items()]

    def end(
        self,
        started: _Started,
        name: str,
        kind: SpanKind,
        attributes: dict[str, AttributeValue],
        events: list[Event],
        status: Status,
        end_ns: int,
    ) -> None:
        """Hand a sampled span to the batch processor, whole (the only processor here;
        it would drop one the sampler records but does not sample)."""
        if not started.sampled:
            return
        if started.sampler_attributes:
            attributes = {**started.sampler_attributes, **attributes}
        limits = self._limits
        bounded: Attributes = attributes
        if limits.max_span_attribute_length is not None or (
            limits.max_span_attributes is not None and len(attributes) > limits.max_span_attributes
        ):
            bounded = BoundedAttributes(
                limits.max_span_attributes,
                attributes,
                immutable=True,
                max_value_len=limits.max_span_attribute_length,
            )
        self._processor.on_end(
            ReadableSpan(
                name=name,
                context=started.context,
                parent=started.parent,
                resource=self.resource,
                attributes=bounded,
                events=events,
                kind=kind,
                status=status,
                start_time=started.start_ns,
                end_time=end_ns,
                instrumentation_scope=_INSTRUMENTATION_SCOPE,
            )
        )

    def shutdown(self) -> None:
        """Export what is pending and stop the exporters' threads (blocking: run it in a
        worker thread)."""
        self._tracer_provider.shutdown()
        if self._meter_provider is not None:
            self._meter_provider.shutdown()


class _Instruments:
    """The GenAI client inference metrics (``gen_ai.client.inference.*``)."""

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(_SCOPE)
        self.duration = meter.create_histogram(
            "gen_ai.client.inference.duration",
            unit="s",
            description="GenAI client inference operation duration (one per upstream attempt).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.time_to_first_chunk = meter.create_histogram(
            "gen_ai.client.inference.time_to_first_chunk",
            unit="s",
            description="Time from the attempt's request to the first event of its stream.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.time_per_output_chunk = meter.create_histogram(
            "gen_ai.client.inference.time_per_output_chunk",
            unit="s",
            description="Mean time between a stream's events after the first (one per stream).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        #: Tokens by usage name, then by the metric attributes (as sorted items): summed
        #: here and read by the SDK at each collection, so a request adds to a dict
        #: instead of paying the SDK's per-measurement work once per token kind.
        self.tokens: dict[str, dict[tuple[tuple[str, AttributeValue], ...], int]] = {}
        for name in (
            INPUT_TOKENS,
            OUTPUT_TOKENS,
            CACHE_READ_TOKENS,
            CACHE_WRITE_TOKENS,
            REASONING_TOKENS,
        ):
            totals = self.tokens[name] = {}
            meter.create_observable_counter(
                f"gen_ai.client.inference.usage.{name.removeprefix('gen_ai.usage.')}",
                callbacks=[partial(_observe_totals, totals)],
                unit="{token}",
                description=f"Tokens the upstreams reported ({name}).",
            )

    def add_tokens(self, counts: Mapping[str, int], labels: Mapping[str, AttributeValue]) -> None:
        key = tuple(sorted({**labels, "gen_ai.token.modality": "unknown"}.items()))
        for name, count in counts.items():
            totals = self.tokens[name]
            totals[key] = totals.get(key, 0) + count


def _observe_totals(
    totals: dict[tuple[tuple[str, AttributeValue], ...], int], options: CallbackOptions
) -> Iterable[Observation]:
    # list() copies in one step: the trio thread may add a key meanwhile.
    return [Observation(count, dict(key)) for key, count in list(totals.items())]


@attrs.frozen
class _Started:
    """A span from its start: its context, its parent's, when it began."""

    context: SpanContext
    parent: SpanContext | None
    start_ns: int
    sampler_attributes: dict[str, AttributeValue]
    #: False with ``OTEL_SDK_DISABLED``: the context is only passed on.
    recorded: bool = True

    @property
    def sampled(self) -> bool:
        """Whether the span is exported (its attributes are worth building)."""
        return self.recorded and self.context.trace_flags.sampled


@attrs.define
class _Attempt:
    span: _Started
    name: str  # the CLIENT span's, as it started
    record: AttemptRecord
    index: int
    started_ns: int
    ended_ns: int | None = None


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class RequestTrace:
    """The spans of one request (its SERVER span, a CLIENT span per attempt), ended
    with the request's outcome in :meth:`finish`."""

    def __init__(self, telemetry: Telemetry, headers: Headers, outcome: Outcome) -> None:
        self._telemetry = telemetry
        self._outcome = outcome
        fields = telemetry.fields
        propagated = {n.decode("latin-1"): v.decode("latin-1") for n, v in headers if n in fields}
        parent = telemetry.propagator.extract(propagated) if propagated else None
        self._started_ns = time.time_ns()
        self.span = telemetry.start(outcome.method, SpanKind.SERVER, parent, self._started_ns)
        #: What the request's body says (set once it is read and parsed).
        self.facts = RequestFacts(outcome.method)
        self._attempts: list[_Attempt] = []
        #: The relay's start, the zero of the outcome's times (known at the first attempt).
        self._relay_ns: int | None = None
        self._finished = False

    def attempt_started(self, attempt: AttemptRecord, index: int, headers: Headers) -> Headers:
        """An attempt goes upstream now: its CLIENT span starts, and ``headers`` are what
        it sends, with its span's context instead of the client's."""
        now = time.time_ns()
        if self._relay_ns is None:
            self._relay_ns = now - _ns(attempt.started_s)
        name = span_name(self.facts, self._outcome.model)
        span = self._telemetry.child(self.span, name, now)
        self._attempts.append(_Attempt(span, name, attempt, index, now))
        fields = self._telemetry.fields
        sent = [(n, v) for n, v in headers if n not in fields]
        sent += self._telemetry.propagated(span)
        return sent

    def attempt_done(self, attempt: AttemptRecord) -> None:
        """An attempt was decided (its answer, or how it failed): a retried one ends here."""
        for entry in reversed(self._attempts):
            if entry.record is attempt:
                entry.ended_ns = time.time_ns()
                return

    def finish(self, outcome: Outcome) -> None:
        """End every span with the outcome's attributes (built only for a sampled span),
        and record the metrics (once)."""
        if self._finished:
            return
        self._finished = True
        now = time.time_ns()
        telemetry = self._telemetry
        facts = telemetry.upstreams
        upstream = facts.get(outcome.upstream) if outcome.upstream else None
        last = len(self._attempts) - 1
        name = span_name(self.facts, outcome.model)
        for position, entry in enumerate(self._attempts):
            answered = position == last
            end = now if answered or entry.ended_ns is None else entry.ended_ns
            attempt_upstream = facts.get(entry.record.upstream) or UpstreamFacts(
                "openai", None, None
            )
            if entry.span.sampled:
                attributes = attempt_attributes(
                    self.facts,
                    outcome,
                    entry.record,
                    entry.index,
                    attempt_upstream,
                    answered=answered,
                )
                failed = "error.type" in attributes
                failed = failed and not (answered and outcome.kind in CLIENT_ENDED)
                events = self._events(outcome, now) if answered else []
                telemetry.end(
                    entry.span,
                    entry.name,
                    SpanKind.CLIENT,
                    attributes,
                    events,
                    _ERROR if failed else _UNSET,
                    end,
                )
            self._record_metrics(outcome, entry, attempt_upstream, end, answered=answered)
        if self.span.sampled:
            telemetry.end(
                self.span,
                name,
                SpanKind.SERVER,
                server_attributes(self.facts, outcome, upstream),
                self._events(outcome, now),
                _ERROR if is_server_fault(outcome) else _UNSET,
                now,
            )

    def _events(self, outcome: Outcome, now: int) -> list[Event]:
        relay = self._relay_ns
        if relay is None:
            return []
        events = []
        if outcome.first_event_s is not None:
            at = min(relay + _ns(outcome.first_event_s), now)
            events.append(Event("proxai.first_event", timestamp=at))
        stall = stall_attributes(outcome)
        if stall is not None:
            at = relay + _ns(outcome.total_s) if outcome.total_s is not None else now
            events.append(Event("proxai.stall", _plain(stall), timestamp=min(at, now)))
        return events

    def _record_metrics(
        self,
        outcome: Outcome,
        entry: _Attempt,
        upstream: UpstreamFacts,
        end: int,
        *,
        answered: bool,
    ) -> None:
        instruments = self._telemetry.instruments
        if instruments is None or self.facts.operation is None:
            return
        labels: dict[str, AttributeValue] = {
            "gen_ai.operation.name": self.facts.operation,
            "gen_ai.provider.name": upstream.provider,
            "gen_ai.request.model": self._telemetry.model_label(outcome),
        }
        if upstream.address is not None:
            labels["server.address"] = upstream.address
            if upstream.port is not None:
                labels["server.port"] = upstream.port
        error = error_type(outcome) if answered else attempt_error_type(entry.record)
        plain = _plain(labels)
        if error is not None:
            plain = {**plain, "error.type": error}
        instruments.duration.record(max(end - entry.started_ns, 0) / 1e9, plain)
        if not answered:
            return
        first = outcome.first_event_s
        if outcome.streaming and first is not None:
            instruments.time_to_first_chunk.record(max(first - entry.record.started_s, 0.0), plain)
            if outcome.events > 1 and outcome.total_s is not None:
                gap = (outcome.total_s - first) / (outcome.events - 1)
                instruments.time_per_output_chunk.record(max(gap, 0.0), plain)
        tokens = usage_attributes(outcome.tokens)
        if tokens:
            instruments.add_tokens(tokens, plain)


def _plain(
    attributes: Mapping[str, AttributeValue],
) -> dict[str, str | bool | int | float | list[str]]:
    return dict(attributes)
