"""OTLP span export with proxai's own protobuf encoding (issue 34).

The SDK's OTLP/HTTP span exporter builds an ``ExportTraceServiceRequest`` of generated
protobuf messages and serializes it: a ``KeyValue`` and an ``AnyValue`` per attribute,
each built by copying the one inside it (upb serializes and parses it again), about
eight Python calls per attribute and 1.0 M instructions for a request's two spans, more
than all the rest of a traced request. :func:`encode_spans` writes the same request's
bytes straight from the :class:`~opentelemetry.sdk.trace.ReadableSpan` s (0.21 M), and
keeps the encoded pairs of the attribute values that recur: the schema is
small (resource, scope, spans with their ids, names, kind, times, attributes, events,
links and status), and tests decode its output with the official generated classes and
compare it, field by field and byte for byte, with what the SDK's encoder makes for the
same spans. It encodes what the SDK's encoder does, in the same field order and with
the same defaults left out, and drops an attribute the SDK's would drop (a value that is
no valid UTF-8, an integer outside int64, a type it cannot encode).

:class:`SpanExporter` is the SDK's ``OTLPSpanExporter`` with this encoder: its HTTP
client (headers, compression, timeout, retries with backoff), its size limit and its
own metrics are the SDK's, reached through the attributes its ``export`` uses; where a
version of the SDK lacks them the SDK's whole ``export`` runs instead.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http import _common
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, Status

__all__ = ["SpanExporter", "encode_spans"]

_logger = logging.getLogger(__name__)

#: One byte's varint, for 0..127 (most lengths and counts).
_SMALL = tuple(bytes((n,)) for n in range(128))
_INT64 = 1 << 63
_UINT64 = (1 << 64) - 1
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack

#: Span.kind (field 6), as the SDK's encoder maps it.
_KINDS = {
    SpanKind.INTERNAL: b"\x30\x01",
    SpanKind.SERVER: b"\x30\x02",
    SpanKind.CLIENT: b"\x30\x03",
    SpanKind.PRODUCER: b"\x30\x04",
    SpanKind.CONSUMER: b"\x30\x05",
}
#: SpanFlags: the parent's remoteness is known, and (second) it is remote.
_LOCAL = _fixed32(0x100)
_REMOTE = _fixed32(0x300)


def _varint(n: int) -> bytes:
    """An unsigned varint (``n`` in 0 .. 2**64-1)."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 127:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: its tag, the length, the bytes."""
    n = len(data)
    return tag + (_SMALL[n] if n < 128 else _varint(n)) + data


#: Bounds of the caches below (they hold what repeats: keys, names, common values).
_MAX_KEYS = 4096
_MAX_VALUES = 64

#: A key's ``KeyValue.key`` field and the value field's tag, by key.
_KEYS: dict[str, bytes] = {}


def _key(key: str) -> bytes:
    head = _KEYS.get(key)
    if head is None:
        head = (_field(b"\x0a", key.encode()) if key else b"") + b"\x12"  # "": left out
        if len(_KEYS) < _MAX_KEYS:
            _KEYS[key] = head
    return head


def _value(value: Any) -> bytes:
    """An ``AnyValue`` message, as the SDK's ``_encode_value`` fills it (its order of
    checks: bool before int, str and bytes before sequences)."""
    kind = type(value)
    if kind is list or kind is tuple:  # no other check of the SDK's would take them
        return _field(b"\x2a", b"".join([_field(b"\x0a", _value(v)) for v in value]))
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"Value out of range: {value}")
        return b"\x18" + _varint(value & _UINT64)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _value(v)) for v in value]))
    if isinstance(value, Mapping):
        pairs = [_field(b"\x0a", _key(str(k)) + _field(b"", _value(v))) for k, v in value.items()]
        return _field(b"\x32", b"".join(pairs))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


#: The encoded pairs of the values seen (a ``KeyValue``'s bytes, its length first), by
#: type, key, then value: most of a request's attributes repeat (its operation, model,
#: provider, path, status, route...). A key keeps at most :data:`_MAX_VALUES` values,
#: so one whose values are ids stops being cached once it has that many.
_STRS: dict[str, dict[str, bytes]] = {}
_INTS: dict[str, dict[int, bytes]] = {}
_BOOLS: dict[str, dict[bool, bytes]] = {}
_NONE: dict[Any, bytes] = {}


def _pair(key: str, encoded: bytes) -> bytes:
    """A ``KeyValue`` of an encoded ``AnyValue``, its length first."""
    n = len(encoded)
    pair = _key(key) + (_SMALL[n] if n < 128 else _varint(n)) + encoded
    n = len(pair)
    return (_SMALL[n] if n < 128 else _varint(n)) + pair


def _cached(cache: dict[str, dict[Any, bytes]], key: str, value: Any) -> bytes:
    """``value``'s pair, kept for the next time ``key`` has it."""
    pair = _pair(key, _value(value))
    values = cache.get(key)
    if values is None:
        if len(cache) >= _MAX_KEYS:
            return pair
        values = cache[key] = {}
    if len(values) < _MAX_VALUES:
        values[value] = pair
    return pair


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None, out: list[bytes]) -> None:
    """Each attribute as a ``KeyValue`` field of tag ``tag``, onto ``out``; one the SDK
    cannot encode is dropped and logged, as its encoder does."""
    if not attributes:
        return
    strs, ints, bools, keys = _STRS, _INTS, _BOOLS, _KEYS
    for key, value in attributes.items():
        # The common types inline, from the caches where they can be.
        kind = type(value)
        try:
            if kind is str:
                pair = strs.get(key, _NONE).get(value) or _cached(strs, key, value)
            elif kind is int:
                pair = ints.get(key, _NONE).get(value) or _cached(ints, key, value)
            elif kind is float:
                head = keys.get(key) or _key(key)
                n = len(head) + 10
                pair = (_SMALL[n] if n < 128 else _varint(n)) + head + b"\x09\x21" + _double(value)
            elif kind is bool:
                pair = bools.get(key, _NONE).get(value) or _cached(bools, key, value)
            else:
                pair = _pair(key, _value(value))
        except Exception:  # as the SDK's encoder: this attribute is left out
            _logger.exception("Failed to encode key %s", key)
            continue
        out.append(tag + pair)


#: A span's or an event's name field, by name (they repeat: ``chat gpt-5.4``).
_NAMES: dict[tuple[bytes, str], bytes] = {}
#: A ``Span.status`` field without a description, by code.
_STATUSES = {code: _field(b"\x7a", b"\x18" + _varint(code) if code else b"") for code in (0, 1, 2)}


def _name(tag: bytes, name: str) -> bytes:
    field = _NAMES.get((tag, name))
    if field is None:
        field = _field(tag, name.encode())
        if len(_NAMES) < _MAX_KEYS:
            _NAMES[tag, name] = field
    return field


def _status(status: Status) -> bytes:
    code = status.status_code.value
    if status.description:
        message = _field(b"\x12", status.description.encode())
        return _field(b"\x7a", message + (b"\x18" + _varint(code) if code else b""))
    return _STATUSES.get(code) or _field(b"\x7a", b"\x18" + _varint(code))


def _span(span: ReadableSpan) -> bytes:
    """One ``Span`` message, its fields in number order, defaults left out."""
    context = span.get_span_context()
    assert context is not None  # as the SDK's encoder, which reads its ids
    parts = [
        b"\x0a\x10",
        context.trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        context.span_id.to_bytes(8, "big"),
    ]
    state = context.trace_state
    if state:
        parts.append(_field(b"\x1a", ",".join([f"{k}={v}" for k, v in state.items()]).encode()))
    parent = span.parent
    if parent:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    name = span.name
    if name:
        parts.append(_name(b"\x2a", name))
    parts.append(_KINDS[span.kind])
    start, end = span.start_time, span.end_time
    if start:
        parts += (b"\x39", _fixed64(start))
    if end:
        parts += (b"\x41", _fixed64(end))
    _attributes(b"\x4a", span.attributes, parts)
    dropped = span.dropped_attributes
    if dropped:
        parts += (b"\x50", _varint(dropped))
    for event in span.events:
        parts.append(_field(b"\x5a", _event(event)))
    dropped = span.dropped_events
    if dropped:
        parts += (b"\x60", _varint(dropped))
    for link in span.links:
        parts.append(_field(b"\x6a", _link(link)))
    dropped = span.dropped_links
    if dropped:
        parts += (b"\x70", _varint(dropped))
    status = span.status
    if status is not None:
        parts.append(_status(status))
    parts += (b"\x85\x01", _REMOTE if parent and parent.is_remote else _LOCAL)
    return b"".join(parts)


def _event(event: Event) -> bytes:
    parts: list[bytes] = []
    if event.timestamp:
        parts += (b"\x09", _fixed64(event.timestamp))
    if event.name:
        parts.append(_name(b"\x12", event.name))
    _attributes(b"\x1a", event.attributes, parts)
    dropped = event.dropped_attributes
    if dropped:
        parts += (b"\x20", _varint(dropped))
    return b"".join(parts)


def _link(link: Link) -> bytes:
    """A ``Span.Link``: as the SDK's encoder, without the linked context's trace state."""
    context = link.context
    parts = [
        b"\x0a\x10",
        context.trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        context.span_id.to_bytes(8, "big"),
    ]
    _attributes(b"\x22", link.attributes, parts)
    dropped = link.dropped_attributes
    if dropped:
        parts += (b"\x28", _varint(dropped))
    parts += (b"\x35", _REMOTE if context.is_remote else _LOCAL)
    return b"".join(parts)


def _resource(resource: Resource) -> bytes:
    parts: list[bytes] = []
    _attributes(b"\x0a", resource.attributes, parts)
    return b"".join(parts)


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return b""
    parts = []
    if scope.name:
        parts.append(_field(b"\x0a", scope.name.encode()))
    if scope.version:
        parts.append(_field(b"\x12", scope.version.encode()))
    _attributes(b"\x1a", scope.attributes, parts)
    return b"".join(parts)


_Scopes = dict[int, tuple[InstrumentationScope | None, list[bytes]]]


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """An ``ExportTraceServiceRequest``'s bytes: the spans by resource, then by scope,
    each group in the order of its first span, as the SDK's ``encode_spans`` groups
    them (equal resources, or scopes, are one group)."""
    # Each distinct resource and scope object is looked up by value once (a Resource's
    # hash dumps its attributes to JSON), not once per span.
    resources: dict[int, Resource] = {}
    by_value: dict[Resource, Resource] = {}
    scopes: dict[int, InstrumentationScope | None] = {}
    scope_by_value: dict[InstrumentationScope, InstrumentationScope] = {}
    groups: dict[int, tuple[Resource, _Scopes]] = {}
    last: tuple[object, object, list[bytes]] | None = None
    for span in spans:
        raw_resource, raw_scope = span.resource, span.instrumentation_scope
        if last is not None and raw_resource is last[0] and raw_scope is last[1]:
            last[2].append(_span(span))  # as the span before: one batch's usual case
            continue
        resource = resources.get(id(raw_resource))
        if resource is None:
            resource = resources[id(raw_resource)] = by_value.setdefault(raw_resource, raw_resource)
        if id(raw_scope) in scopes:
            scope = scopes[id(raw_scope)]
        else:
            scope = raw_scope or None
            if scope is not None:
                scope = scope_by_value.setdefault(scope, scope)
            scopes[id(raw_scope)] = scope
        group = groups.get(id(resource))
        if group is None:
            group = groups[id(resource)] = (resource, {})
        entry = group[1].get(id(scope))
        if entry is None:
            entry = group[1][id(scope)] = (scope, [])
        entry[1].append(_span(span))
        last = (raw_resource, raw_scope, entry[1])
    out = []
    for resource, by_scope in groups.values():
        parts = [_field(b"\x0a", _resource(resource))]
        for scope, encoded in by_scope.values():
            fields = [_field(b"\x0a", _scope(scope))]
            fields += [_field(b"\x12", span) for span in encoded]
            if scope is not None and scope.schema_url:
                fields.append(_field(b"\x1a", scope.schema_url.encode()))
            parts.append(_field(b"\x12", b"".join(fields)))
        if resource.schema_url:
            parts.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(parts)))
    return b"".join(out)


class SpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter, its request encoded by :func:`encode_spans`."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """As the SDK's ``export``, with the bytes made here, then sent by its client."""
        client = getattr(self, "_client", None)
        metrics = getattr(self, "_metrics", None)
        limit = getattr(self, "_max_request_size", None)
        too_large = getattr(_common, "_is_request_too_large", None)
        if client is None or metrics is None or limit is None or too_large is None:
            return super().export(spans)  # an SDK whose export this does not know
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with metrics.export_operation(len(spans)) as result:
            try:
                data = encode_spans(spans)
            except Exception as error:
                _logger.exception("Failed to encode span batch")
                result.error = error
                return SpanExportResult.FAILURE
            if too_large(data, limit):
                _logger.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size"
                    " %d bytes.",
                    len(data),
                    limit,
                )
                result.error = _common.RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds"
                    f" max_request_size {limit} bytes."
                )
                return SpanExportResult.FAILURE
            sent = client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
