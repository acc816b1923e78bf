"""proxai's OTLP span encoding (``proxai.ops.otlp_spans``) against the SDK's own.

For the same :class:`~opentelemetry.sdk.trace.ReadableSpan` s, proxai's bytes must be the
SDK encoder's bytes, and decode with the official generated classes into an equal
``ExportTraceServiceRequest`` (compared field by field: every attribute type, unicode,
empty values, what the SDK drops, many spans, several resources and scopes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.common.http import _ExportResult
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from proxai.config_file import load_config
from proxai.ops import otlp_spans
from proxai.ops.otlp_spans import SpanExporter, encode_spans
from proxai.ops.telemetry import Telemetry

RESOURCE = Resource({"service.name": "proxai", "host.name": "h1", "process.pid": 7})
SCOPE = InstrumentationScope("proxai")


def context(span_id: int = 0x00F067AA0BA902B7, *, remote: bool = False, **kw: Any) -> SpanContext:
    return SpanContext(
        kw.pop("trace_id", 0x4BF92F3577B34DA6A3CE929D0E0E4736),
        span_id,
        is_remote=remote,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        **kw,
    )


def span(attributes: Any = None, **kw: Any) -> ReadableSpan:
    fields: dict[str, Any] = {
        "name": "chat gpt-5.4",
        "context": context(),
        "resource": RESOURCE,
        "attributes": attributes,
        "kind": SpanKind.CLIENT,
        "start_time": 1_765_000_000_123_456_789,
        "end_time": 1_765_000_001_987_654_321,
        "instrumentation_scope": SCOPE,
    }
    return ReadableSpan(**{**fields, **kw})


def assert_same(spans: Sequence[ReadableSpan]) -> None:
    """proxai's encoding of ``spans`` is the SDK's: decoded, then byte for byte."""
    ours = encode_spans(spans)
    theirs = sdk_encode(spans).SerializeToString()
    decoded, expected = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    decoded.ParseFromString(ours)
    expected.ParseFromString(theirs)
    if not _has_nan(expected):  # NaN is no NaN's equal: the bytes say it for those
        assert MessageToDict(decoded) == MessageToDict(expected)
        assert decoded == expected
    assert ours == theirs


def _has_nan(request: ExportTraceServiceRequest) -> bool:
    return "NaN" in str(MessageToDict(request))


EVERY_TYPE: dict[str, Any] = {
    "s": "chat",
    "empty": "",
    "unicode": "résumé 你好 🤖 \u0000 \u2028",
    "long": "x" * 300,  # a length of two varint bytes
    "true": True,
    "false": False,
    "zero": 0,
    "small": 7,
    "int127": 127,
    "int128": 128,
    "negative": -1,
    "int64_min": -(2**63),
    "int64_max": 2**63 - 1,
    "float": 0.209,
    "float_zero": 0.0,
    "negative_zero": -0.0,
    "inf": math.inf,
    "float_int": 5.0,
    "list": ["completed", "length"],
    "empty_list": [],
    "tuple": ("a",),
    "ints": [1, -2, 3],
    "floats": [0.5, 1.5],
    "bools": [True, False],
    "mixed": ["a", 1, 2.5, True],
    "bytes": b"\x00\xff",
    "none": None,
    "mapping": {"k": "v", "n": 1},
    "unicode key é": "v",
    "": "empty key",
}


def test_every_attribute_type_is_encoded_as_the_sdk_does() -> None:
    assert_same([span(EVERY_TYPE)])


@pytest.mark.parametrize(
    "bad",
    [
        "\ud800",  # a lone surrogate (JSON can carry one): no UTF-8
        ["ok", "\udfff"],
        2**63,
        -(2**63) - 1,
        [2**64],
        object(),
    ],
    ids=["surrogate", "surrogate in list", "int64+1", "int64-1", "uint64 in list", "object"],
)
def test_an_attribute_the_sdk_cannot_encode_is_left_out_as_it_does(bad: Any) -> None:
    attributes = {"before": "kept", "bad": bad, "after": 1}
    assert_same([span(attributes)])
    decoded = ExportTraceServiceRequest.FromString(encode_spans([span(attributes)]))
    kept = decoded.resource_spans[0].scope_spans[0].spans[0].attributes
    assert [a.key for a in kept] == ["before", "after"]


def test_nan_is_the_sdks_bits() -> None:
    assert_same([span({"nan": math.nan, "nans": [math.nan]})])


def test_ids_parent_state_kinds_status_events_and_links() -> None:
    parent = context(0x1111111111111111, remote=True)
    spans = [
        span(
            {"a": 1},
            context=context(
                0x0000000000000001, trace_state=TraceState([("vendor", "kept"), ("b", "2")])
            ),
            parent=parent,
            kind=SpanKind.SERVER,
            status=Status(StatusCode.ERROR, "upstream stalled for 120.0 s ✗"),
            events=[
                Event("proxai.first_event", timestamp=1_765_000_000_500_000_000),
                Event("proxai.stall", {"proxai.outcome": "stalled_idle"}, timestamp=5),
                Event("", None, timestamp=1),
            ],
            links=[
                Link(context(0x2222, remote=True), {"link": "x"}),
                Link(context(0x3333, trace_state=TraceState([("k", "v")]))),
            ],
        ),
        span(parent=context(0xFFFFFFFFFFFFFFFF), kind=SpanKind.INTERNAL),
        span(kind=SpanKind.PRODUCER, status=Status(StatusCode.OK)),
        span(kind=SpanKind.CONSUMER, name="", start_time=None, end_time=0),
        span(context=context(2**64 - 1, trace_id=2**128 - 1), status=Status(StatusCode.ERROR)),
    ]
    assert_same(spans)


def test_dropped_counts_from_the_sdks_bounded_attributes() -> None:
    attributes = BoundedAttributes(3, {f"k{i}": i for i in range(10)}, max_value_len=4)
    event = Event("e", BoundedAttributes(1, {"a": 1, "b": 2}), timestamp=3)
    assert_same([span(attributes, events=[event])])


def test_resources_and_scopes_are_grouped_as_the_sdk_groups_them() -> None:
    other = Resource({"service.name": "other"}, schema_url="https://opentelemetry.io/schemas/1")
    equal = Resource({"service.name": "proxai", "host.name": "h1", "process.pid": 7})
    versioned = InstrumentationScope(
        "lib", "1.2", "https://opentelemetry.io/schemas/2", {"scope.attr": "v"}
    )
    spans = [
        span(name="a"),
        span(name="b", resource=other),
        span(name="c", resource=equal),  # equal to RESOURCE: the same group
        span(name="d", instrumentation_scope=versioned),
        span(name="e", instrumentation_scope=None),
        span(name="f", resource=other, instrumentation_scope=versioned),
        span(name="g"),
        span(name="h", resource=Resource({})),
    ]
    assert_same(spans)


def test_a_full_batch_of_proxais_own_spans() -> None:
    """The spans proxai makes, 512 of them (a full batch), as its telemetry hands them over."""
    from bench.telemetry import telemetry_tables, traced_request

    telemetry = Telemetry(
        load_config(None, overrides=telemetry_tables("http://127.0.0.1:9")), ["gpt-5.4"]
    )
    ended: list[ReadableSpan] = []
    processor: Any = telemetry._processor
    processor.on_end = ended.append
    parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for index in range(256):
        headers = [(b"traceparent", parent)] if index % 2 else []
        traced_request(telemetry, headers)
    assert len(ended) == 512
    assert_same(ended)
    assert_same(ended)  # again, from the caches


def test_cached_values_are_bounded_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp_spans, "_MAX_VALUES", 3)
    monkeypatch.setattr(otlp_spans, "_STRS", {})
    monkeypatch.setattr(otlp_spans, "_INTS", {})
    spans = [span({"id": f"resp_{i}", "n": i, "same": "chat"}) for i in range(20)]
    assert_same(spans)
    assert_same(spans)
    assert len(otlp_spans._STRS["id"]) == 3
    # A key's int and bool values are kept apart (True == 1 as a dict key).
    assert_same([span({"v": 1}), span({"v": True}), span({"v": 1.0}), span({"v": True})])


_text = st.text(st.characters(codec="utf-8"), max_size=20)
_scalar = st.one_of(
    st.booleans(),
    _text,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
_values = st.one_of(
    _scalar,
    st.lists(_scalar, max_size=4),
    st.text(max_size=5),  # surrogates too: left out by both
    st.integers(min_value=2**63, max_value=2**70),
    st.none(),
)


@st.composite
def _spans(draw: st.DrawFn) -> list[ReadableSpan]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        out.append(
            span(
                draw(st.dictionaries(_text, _values, max_size=8)),
                name=draw(_text),
                context=context(draw(st.integers(0, 2**64 - 1))),
                parent=draw(st.none() | st.builds(context, st.integers(0, 2**64 - 1))),
                kind=draw(st.sampled_from(list(SpanKind))),
                start_time=draw(st.integers(0, 2**64 - 1)),
                status=Status(draw(st.sampled_from(list(StatusCode)))),
                events=[
                    Event(name, attributes, timestamp=1)
                    for name, attributes in draw(
                        st.lists(
                            st.tuples(_text, st.dictionaries(_text, _scalar, max_size=3)),
                            max_size=2,
                        )
                    )
                ],
                resource=draw(st.sampled_from([RESOURCE, Resource({"service.name": "x"})])),
            )
        )
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_spans())
def test_any_spans_are_encoded_as_the_sdk_does(spans: list[ReadableSpan]) -> None:
    assert_same(spans)


class _Client:
    """The SDK exporter's HTTP client, as a recorder."""

    def __init__(self, status: int = 200) -> None:
        self.sent: list[bytes] = []
        self.status = status

    def export(self, data: bytes) -> _ExportResult:
        self.sent.append(data)
        ok = 200 <= self.status < 300
        return _ExportResult(ok, self.status, None, None if ok else RuntimeError("refused"))

    def shutdown(self) -> None:
        pass


def test_the_exporter_sends_proxais_bytes_through_the_sdks_client() -> None:
    """The SDK's exporter has the client this exporter hands its bytes to: an SDK without
    it would make it fall back to the SDK's whole export, and this test fail."""
    exporter = SpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    client = _Client()
    assert hasattr(exporter, "_client")
    exporter._client = client  # type: ignore[assignment]
    spans = [span({"a": "b"}), span({"c": 1})]
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert client.sent == [encode_spans(spans)]
    client.status = 400
    assert exporter.export(spans) is SpanExportResult.FAILURE
    exporter._max_request_size = 10  # the SDK's size limit still applies
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert len(client.sent) == 2
    exporter.shutdown()
    assert exporter.export(spans) is SpanExportResult.FAILURE
