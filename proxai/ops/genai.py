"""OpenTelemetry's GenAI semantic conventions, as proxai's records fill them: no I/O, no SDK.

:mod:`proxai.ops.telemetry` puts these attributes on spans and metrics; they are
decided here, from an :class:`~proxai.outcome.Outcome` and its
:class:`~proxai.outcome.AttemptRecord` s, so they are tested without a collector.
The names are those of the GenAI conventions (``gen_ai.*``, the client inference
span and metrics), the stable ``server.*``, ``http.*`` and ``error.type``, and
proxai's own under ``proxai.*``. Like the request log, nothing here is a prompt, an
output, a header or a key: the conventions' opt-in content attributes
(``gen_ai.input.messages`` and the like) are never set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..outcome import CLIENT_ENDED, STALLS, AttemptRecord, Outcome, OutcomeKind, Usage

__all__ = [
    "DURATION_BUCKETS",
    "TOKEN_BUCKETS",
    "AttributeValue",
    "RequestFacts",
    "UpstreamFacts",
    "attempt_attributes",
    "attempt_error_type",
    "error_type",
    "is_server_fault",
    "server_attributes",
    "span_name",
    "stall_attributes",
    "usage_attributes",
]

AttributeValue = str | bool | int | float | list[str]

#: The bucket boundaries the conventions give the GenAI duration histograms (seconds).
DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
#: ... and the token histograms.
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

#: Characters kept of a client-given id (``previous_response_id``, a conversation's).
MAX_ID = 256

# Usage attribute names (gen_ai.usage.*).
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_write.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"


@attrs.frozen
class RequestFacts:
    """What the client's request says that a trace may show: its operation (``None``
    for a request that is no GenAI operation, such as ``GET /v1/models``), and the
    ids that chain it to others, where it sends them."""

    method: str
    operation: str | None = None
    previous_response_id: str | None = None
    conversation_id: str | None = None

    @classmethod
    def of_body(
        cls, method: str, operation: str | None, body: Mapping[str, Any] | None
    ) -> RequestFacts:
        """The facts of a generation request's parsed body (Responses'
        ``previous_response_id`` and ``conversation``, a string or ``{"id": ...}``)."""
        if body is None:
            return cls(method, operation)
        previous = body.get("previous_response_id")
        conversation = body.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        return cls(
            method,
            operation,
            previous[:MAX_ID] if isinstance(previous, str) else None,
            conversation[:MAX_ID] if isinstance(conversation, str) else None,
        )


@attrs.frozen
class UpstreamFacts:
    """An upstream as the conventions name it."""

    provider: str  # gen_ai.provider.name
    address: str | None  # server.address
    port: int | None  # server.port


def span_name(facts: RequestFacts, model: str | None) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``; the method for a request
    that is no GenAI operation (its path can hold ids: not a span name)."""
    if facts.operation is None:
        return facts.method
    return f"{facts.operation} {model}" if model else facts.operation


def usage_attributes(tokens: Usage | None) -> dict[str, int]:
    """``gen_ai.usage.*`` from the response's usage (its API's reader put it in one
    shape; the input counts cache reads and writes, as the conventions do)."""
    if tokens is None:
        return {}
    counts = {
        INPUT_TOKENS: tokens.input_tokens,
        OUTPUT_TOKENS: tokens.output_tokens,
        CACHE_READ_TOKENS: tokens.cached_tokens,
        CACHE_WRITE_TOKENS: tokens.cache_write_tokens,
        REASONING_TOKENS: tokens.reasoning_tokens,
    }
    return {name: count for name, count in counts.items() if count is not None}


def error_type(outcome: Outcome) -> str | None:
    """``error.type`` of a request: ``None`` when it ended as its protocol ends a
    response; the upstream's status for an error it answered; else the outcome's kind
    (``stalled_idle``, ``client_disconnected``...)."""
    kind = outcome.kind
    if kind in (OutcomeKind.COMPLETED, OutcomeKind.INCOMPLETE):
        return None
    if kind is OutcomeKind.UPSTREAM_ERROR and outcome.status is not None:
        return str(outcome.status)
    return kind.value if kind is not None else "_OTHER"


def is_server_fault(outcome: Outcome) -> bool:
    """Whether the SERVER span's status is an error: not for an end the client brought
    about, nor for a 4xx (as HTTP's conventions have it for servers)."""
    if error_type(outcome) is None or outcome.kind in CLIENT_ENDED:
        return False
    return not (outcome.status is not None and 400 <= outcome.status < 500)


def attempt_error_type(attempt: AttemptRecord) -> str | None:
    """``error.type`` of one attempt: how it failed before answering, or its status
    from 400 up."""
    if attempt.kind is not None:
        return attempt.kind.value
    if attempt.status is not None and attempt.status >= 400:
        return str(attempt.status)
    return None


def _response_attributes(outcome: Outcome, attributes: dict[str, AttributeValue]) -> None:
    if outcome.response_id is not None:
        attributes["gen_ai.response.id"] = outcome.response_id
    if outcome.response_model is not None:
        attributes["gen_ai.response.model"] = outcome.response_model
    if outcome.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = list(outcome.finish_reasons)
    attributes.update(usage_attributes(outcome.tokens))


def _genai_attributes(
    facts: RequestFacts, outcome: Outcome, upstream: UpstreamFacts | None
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    if facts.operation is None:
        return attributes
    attributes["gen_ai.operation.name"] = facts.operation
    if upstream is not None:
        attributes["gen_ai.provider.name"] = upstream.provider
    if outcome.model is not None:
        attributes["gen_ai.request.model"] = outcome.model
    attributes["gen_ai.request.stream"] = outcome.streaming
    if facts.previous_response_id is not None:
        attributes["gen_ai.request.previous_response.id"] = facts.previous_response_id
    if facts.conversation_id is not None:
        attributes["gen_ai.conversation.id"] = facts.conversation_id
    return attributes


def server_attributes(
    facts: RequestFacts, outcome: Outcome, upstream: UpstreamFacts | None
) -> dict[str, AttributeValue]:
    """The SERVER span's attributes: the request as the client made it and how it
    ended, the GenAI ones when it is a GenAI operation, proxai's own."""
    attributes = _genai_attributes(facts, outcome, upstream)
    if facts.operation is not None:
        _response_attributes(outcome, attributes)
    attributes["http.request.method"] = outcome.method
    attributes["url.path"] = outcome.path
    if outcome.status is not None:
        attributes["http.response.status_code"] = outcome.status
    error = error_type(outcome)
    if error is not None:
        attributes["error.type"] = error
    own: dict[str, AttributeValue | None] = {
        "proxai.request_id": outcome.request_id,
        "proxai.outcome": outcome.kind.value if outcome.kind else None,
        "proxai.socket_id": outcome.socket_id,
        "proxai.route": outcome.route,
        "proxai.upstream": outcome.upstream,
        "proxai.attempts": len(outcome.attempts),
        "proxai.retry_refused": outcome.retry_refused or None,
        "proxai.translation": outcome.translation,
        "proxai.dropped": list(outcome.dropped) or None,
        "proxai.stalled_item": outcome.stalled_item,
        "proxai.time_to_first_byte": outcome.first_byte_s,
        "proxai.duration": outcome.total_s,
        "proxai.events": outcome.events,
        "proxai.stored_as": outcome.stored_as,
    }
    attributes.update({k: v for k, v in own.items() if v is not None})
    return attributes


def attempt_attributes(
    facts: RequestFacts,
    outcome: Outcome,
    attempt: AttemptRecord,
    index: int,
    upstream: UpstreamFacts,
    *,
    answered: bool,
) -> dict[str, AttributeValue]:
    """A CLIENT span's attributes: one attempt at one upstream; the one whose answer
    was relayed (``answered``) also carries the response's."""
    attributes = _genai_attributes(facts, outcome, upstream)
    if answered and facts.operation is not None:
        _response_attributes(outcome, attributes)
        if outcome.streaming and outcome.first_event_s is not None:
            ttfc = outcome.first_event_s - attempt.started_s
            attributes["gen_ai.response.time_to_first_chunk"] = max(ttfc, 0.0)
    if upstream.address is not None:
        attributes["server.address"] = upstream.address
        if upstream.port is not None:
            attributes["server.port"] = upstream.port
    if attempt.status is not None:
        attributes["http.response.status_code"] = attempt.status
    # The last attempt's end is the request's (a stall, a client gone); another's is its own.
    error = error_type(outcome) if answered else attempt_error_type(attempt)
    if error is not None:
        attributes["error.type"] = error
    attributes["proxai.upstream"] = attempt.upstream
    attributes["proxai.attempt"] = index
    if attempt.retry_after is not None:
        attributes["proxai.retry_after"] = attempt.retry_after
    return attributes


def stall_attributes(outcome: Outcome) -> dict[str, AttributeValue] | None:
    """The ``proxai.stall`` span event's attributes, when a deadline ended the request."""
    if outcome.kind not in STALLS:
        return None
    assert outcome.kind is not None
    attributes: dict[str, AttributeValue] = {"proxai.outcome": outcome.kind.value}
    if outcome.stalled_item is not None:
        attributes["proxai.stalled_item"] = outcome.stalled_item
    if outcome.detail is not None:  # proxai's own words for a stall, never upstream text
        attributes["proxai.detail"] = outcome.detail
    return attributes
