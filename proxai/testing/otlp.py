"""A real OTLP/HTTP receiver on loopback, for tests of what proxai (or code behind it)
exports: spans and metrics as an OpenTelemetry Collector would receive them.

It serves ``POST /v1/traces`` and ``POST /v1/metrics`` (protobuf bodies, gzip or
not), decodes them with the official ``opentelemetry-proto`` messages and keeps them
as plain records (:class:`ReceivedSpan`, :class:`ReceivedMetric`), plus every
payload's bytes, so a test can check that something never left proxai at all. It
speaks HTTP/1.1 with h11 over trio sockets, like :class:`~proxai.testing.ScriptedUpstream`.
It needs the ``opentelemetry-proto`` package (proxai's telemetry brings it).
"""

from __future__ import annotations

import gzip
from typing import Any

import attrs
import h11
import trio
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from .upstream import loopback_listeners, receive_request

__all__ = ["OtlpReceiver", "ReceivedEvent", "ReceivedMetric", "ReceivedPoint", "ReceivedSpan"]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which) if which is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        attributes[pair.key] = _value(pair.value)
    return attributes


@attrs.frozen
class ReceivedEvent:
    """A span event: its name, time (ns since the epoch) and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, Any]


@attrs.frozen
class ReceivedSpan:
    """One span as the receiver decoded it (ids in hex; ``parent_span_id`` ``None`` for
    a root span)."""

    name: str
    kind: str  # SERVER, CLIENT, INTERNAL, PRODUCER, CONSUMER
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    status: str  # UNSET, OK, ERROR
    resource: dict[str, Any]
    scope: str

    def event(self, name: str) -> ReceivedEvent | None:
        return next((e for e in self.events if e.name == name), None)


@attrs.frozen
class ReceivedPoint:
    """One data point: a sum's ``value``, or a histogram's ``count`` and ``sum``."""

    attributes: dict[str, Any]
    value: float | None = None
    count: int | None = None
    sum: float | None = None


@attrs.frozen
class ReceivedMetric:
    name: str
    unit: str
    points: list[ReceivedPoint]


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        events=[
                            ReceivedEvent(e.name, e.time_unix_nano, _attributes(e.attributes))
                            for e in span.events
                        ],
                        status=Status.StatusCode.Name(span.status.code).removeprefix(
                            "STATUS_CODE_"
                        ),
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return spans


def _metrics(request: ExportMetricsServiceRequest) -> list[ReceivedMetric]:
    metrics = []
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points: list[ReceivedPoint] = []
                which = metric.WhichOneof("data")
                if which == "histogram":
                    points = [
                        ReceivedPoint(_attributes(p.attributes), count=p.count, sum=p.sum)
                        for p in metric.histogram.data_points
                    ]
                elif which in ("sum", "gauge"):
                    data = metric.sum if which == "sum" else metric.gauge
                    points = [
                        ReceivedPoint(
                            _attributes(p.attributes),
                            value=p.as_int if p.WhichOneof("value") == "as_int" else p.as_double,
                        )
                        for p in data.data_points
                    ]
                metrics.append(ReceivedMetric(metric.name, metric.unit, points))
    return metrics


class OtlpReceiver:
    """Receive OTLP/HTTP exports on a loopback port chosen by the OS. Start it with
    ``endpoint = await nursery.start(receiver.serve)`` and give ``endpoint`` to the
    exporter (``[telemetry] endpoint``)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metrics: list[ReceivedMetric] = []
        #: Every export's body, decompressed, in the order received.
        self.payloads: list[bytes] = []
        self.port = 0
        self._received = trio.Condition()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (port 0) and receive until cancelled."""
        self.port, listeners = await loopback_listeners(None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.endpoint)

    async def wait_for_spans(self, count: int) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans have been received."""
        async with self._received:
            while len(self.spans) < count:
                await self._received.wait()
        return list(self.spans)

    def metric(self, name: str) -> ReceivedMetric | None:
        """The last export of the metric ``name``, if any came."""
        return next((m for m in reversed(self.metrics) if m.name == name), None)

    def _take(self, path: str, body: bytes) -> bytes | None:
        """Decode one export; its response's body, or ``None`` for a path not OTLP's."""
        if path == "/v1/traces":
            traces = ExportTraceServiceRequest()
            traces.ParseFromString(body)
            self.spans.extend(_spans(traces))
            answer: bytes = ExportTraceServiceResponse().SerializeToString()
            return answer
        if path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest()
            metrics.ParseFromString(body)
            self.metrics.extend(_metrics(metrics))
            answer = ExportMetricsServiceResponse().SerializeToString()
            return answer
        return None

    async def _handle(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await receive_request(stream, conn)
                if request is None:
                    return
                body = request.body
                if (request.header("content-encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                self.payloads.append(body)
                answer = self._take(request.target.partition("?")[0], body)
                status = 200 if answer is not None else 404
                answer = answer or b""
                headers = [
                    ("content-type", "application/x-protobuf"),
                    ("content-length", str(len(answer))),
                ]
                data = conn.send(h11.Response(status_code=status, headers=headers))
                data = (data or b"") + (conn.send(h11.Data(data=answer)) or b"")
                data += conn.send(h11.EndOfMessage()) or b""
                await stream.send_all(data)
                async with self._received:
                    self._received.notify_all()
                if conn.our_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
