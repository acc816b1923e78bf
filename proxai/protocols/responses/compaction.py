"""Compaction for upstreams that do not compact, sans-io: the requests, the envelope, the
summary coming back.

A Responses client (Codex) asks the server to compact a long conversation in one of
two forms: ``POST /v1/responses/compact`` (:attr:`CompactionForm.ENDPOINT`, answered
with a ``response.compaction`` object), or a ``POST /v1/responses`` whose last input
item is ``{"type": "compaction_trigger"}`` (:attr:`CompactionForm.TRIGGER`, answered
with a response whose output is exactly one ``compaction`` item). OpenAI answers both
with an item whose ``encrypted_content`` only it can read. An upstream that does not
compact (Chat, Messages) is asked instead for a summary of the conversation
(:func:`summarizing_request`: the conversation, then ``[compaction] prompt``), and the
summary goes back in the item's ``encrypted_content`` inside proxai's envelope
(:func:`seal`). Nothing is stored: when the item comes back in a later request,
:func:`expand_compactions` turns it into the user message holding the summary, before
the request is translated.

The envelope (``proxai-compaction-v1.<payload>.<digest>``) names its maker and its
version, so a later proxai reads it or says why not; the payload is base64url JSON, not
encrypted (the summary is the client's own conversation, in the client's hands), and the
digest makes a damaged or edited envelope a clear 400 rather than a wrong summary.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from ...errors import ProxyError
from .history import input_items

__all__ = [
    "ENVELOPE_MARK",
    "CompactionAnswer",
    "CompactionForm",
    "EnvelopeError",
    "Summary",
    "compaction_form",
    "expand_compactions",
    "seal",
    "summarizing_request",
    "unseal",
]

JSON = Any

#: What every envelope of proxai's starts with, whatever its version.
ENVELOPE_PREFIX = "proxai-compaction-"
#: The bytes a request holding one of proxai's envelopes contains (JSON escapes none).
ENVELOPE_MARK = ENVELOPE_PREFIX.encode()
#: The version this proxai writes and reads.
ENVELOPE_VERSION = 1
_HEAD = f"{ENVELOPE_PREFIX}v{ENVELOPE_VERSION}."
#: Bytes of SHA-256 kept as the envelope's digest.
_DIGEST_BYTES = 16

#: The input item types only an upstream that compacts reads.
COMPACTION = "compaction"
TRIGGER = "compaction_trigger"

#: The request fields the summarizing request keeps; the rest (``text`` formats,
#: ``max_output_tokens``, ``store``, ``include``...) are the client's next turn's, not
#: the summary's.
_KEPT_FIELDS = frozenset(
    {
        "model",
        "instructions",
        "tools",
        "reasoning",
        "parallel_tool_calls",
        "prompt_cache_key",
        "service_tier",
        "safety_identifier",
        "user",
        "temperature",
        "top_p",
    }
)


class CompactionForm(enum.Enum):
    """How the client asked for a compaction."""

    #: ``POST /v1/responses/compact``: a ``response.compaction`` object in JSON.
    ENDPOINT = "endpoint"
    #: A ``POST /v1/responses`` whose last input item is a ``compaction_trigger``: a
    #: response (streamed or whole) whose output is one ``compaction`` item.
    TRIGGER = "trigger"


def compaction_form(data: Mapping[str, JSON], *, endpoint: bool) -> CompactionForm | None:
    """The form of compaction a Responses request asks for (``endpoint``: it was posted to
    the compact endpoint), if any: one look at its last input item."""
    if endpoint:
        return CompactionForm.ENDPOINT
    items = data.get("input")
    if isinstance(items, list) and items:
        last = items[-1]
        if isinstance(last, dict) and last.get("type") == TRIGGER:
            return CompactionForm.TRIGGER
    return None


# -- the envelope -------------------------------------------------------------------------


@attrs.frozen
class Summary:
    """What one of proxai's compaction items carries."""

    text: str
    #: The model that wrote it, and when (Unix seconds): for whoever reads the envelope.
    model: str | None = None
    created_at: int = 0


class EnvelopeError(ValueError):
    """A compaction item's ``encrypted_content`` proxai cannot read (the reason why)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _digest(head_and_payload: str) -> str:
    return _b64(hashlib.sha256(head_and_payload.encode("ascii")).digest()[:_DIGEST_BYTES])


def seal(summary: Summary) -> str:
    """The ``encrypted_content`` that carries ``summary`` back to proxai later."""
    payload = {"summary": summary.text, "model": summary.model, "created_at": summary.created_at}
    signed = _HEAD + _b64(orjson.dumps(payload))
    return f"{signed}.{_digest(signed)}"


def unseal(value: JSON) -> Summary:
    """The summary ``value`` carries; raises :class:`EnvelopeError` for anything else
    (another maker's, another version's, a damaged or edited envelope)."""
    if not isinstance(value, str) or not value.startswith(ENVELOPE_PREFIX):
        raise EnvelopeError(
            "it was not made by proxai (an upstream that compacts, such as OpenAI, made it, "
            "and only that upstream can read it)"
        )
    version = value[len(ENVELOPE_PREFIX) :].partition(".")[0]
    if version != f"v{ENVELOPE_VERSION}":
        raise EnvelopeError(
            f"its envelope is version {version[:20]!r}; this proxai reads v{ENVELOPE_VERSION} only"
        )
    signed, _, digest = value.rpartition(".")
    if not signed.startswith(_HEAD) or not hmac.compare_digest(digest, _digest(signed)):
        raise EnvelopeError("its envelope is damaged or was edited (its digest does not match)")
    try:
        payload = orjson.loads(_unb64(signed[len(_HEAD) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise EnvelopeError("its envelope's payload is not base64url JSON") from None
    text = payload.get("summary") if isinstance(payload, dict) else None
    if not isinstance(text, str):
        raise EnvelopeError("its envelope holds no summary")
    model = payload.get("model")
    created = payload.get("created_at")
    return Summary(
        text,
        model if isinstance(model, str) else None,
        created if isinstance(created, int) else 0,
    )


# -- a compaction coming back -------------------------------------------------------------


def summary_message(summary: Summary, prefix: str) -> dict[str, JSON]:
    """The user message a compaction item becomes for an upstream that does not compact."""
    text = f"{prefix}\n\n{summary.text}" if prefix else summary.text
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def expand_compactions(
    data: Mapping[str, JSON], *, summary_prefix: str, upstream_compacts: bool
) -> dict[str, JSON] | None:
    """``data`` with each of proxai's compaction items replaced by its summary message
    (``None``: it holds none, and nothing changes).

    For an upstream that compacts (``upstream_compacts``), the other compaction items are
    its own and stay; for one that does not, one proxai cannot read, or a
    ``compaction_trigger`` that is not the last input item, is a 400 naming it (a trigger
    followed by a compaction item was answered already, and is left out).
    """
    items = data.get("input")
    if not isinstance(items, list):
        return None
    kinds = [item.get("type") if isinstance(item, dict) else None for item in items]
    # A trigger before a compaction item is one that was answered: the history of a
    # response chained onto a compaction (its input, then its output).
    last_compaction = max((i for i, k in enumerate(kinds) if k == COMPACTION), default=-1)
    changed = False
    out: list[JSON] = []
    for index, item in enumerate(items):
        kind = kinds[index]
        if kind == COMPACTION:
            content = item.get("encrypted_content")
            ours = isinstance(content, str) and content.startswith(ENVELOPE_PREFIX)
            if upstream_compacts and not ours:
                out.append(item)
                continue
            try:
                summary = unseal(content)
            except EnvelopeError as exc:
                raise unreadable_compaction(index, str(exc)) from None
            out.append(summary_message(summary, summary_prefix))
            changed = True
        elif kind == TRIGGER and not upstream_compacts and index < last_compaction:
            changed = True
        elif kind == TRIGGER and not upstream_compacts:
            raise ProxyError.invalid_request(
                "a compaction_trigger item must be the last input item",
                param=f"input[{index}]",
            )
        else:
            out.append(item)
    return {**data, "input": out} if changed else None


def unreadable_compaction(index: int, why: str) -> ProxyError:
    """The 400 for a compaction item the upstream cannot be given."""
    return ProxyError(
        400,
        f"input[{index}] is a compaction item this upstream cannot read: {why}. The upstream "
        "this request goes to does not compact; send the conversation itself, or compact it "
        "again through proxai.",
        "invalid_request_error",
        param=f"input[{index}].encrypted_content",
        code="invalid_encrypted_content",
    )


# -- the summarizing request and its answer -----------------------------------------------


@attrs.frozen
class CompactionAnswer:
    """What the answer to a compaction needs besides the summary."""

    form: CompactionForm
    #: The client's user messages (as JSON), which ``/v1/responses/compact``'s output
    #: lists before the compaction item, as OpenAI's does.
    user_messages: tuple[bytes, ...] = ()


def summarizing_request(
    data: Mapping[str, JSON], form: CompactionForm, *, prompt: str, summary_prefix: str
) -> tuple[dict[str, JSON], CompactionAnswer]:
    """The Responses request asking an upstream that does not compact for the summary of
    the conversation ``data`` asks to compact, and what its answer needs.

    The conversation (the trigger left out, earlier compactions as their summaries),
    then ``prompt`` as one more user message; the client's tools stay declared, since
    the history may hold calls of them, but none may be called (``tool_choice:
    "none"``); nothing is stored. It streams when the client asked for a stream.
    """
    items = list(input_items(data.get("input")))
    if form is CompactionForm.TRIGGER and items:
        items.pop()  # the compaction_trigger
    request: dict[str, JSON] = {k: v for k, v in data.items() if k in _KEPT_FIELDS}
    request["input"] = items
    expanded = expand_compactions(request, summary_prefix=summary_prefix, upstream_compacts=False)
    if expanded is not None:
        request = expanded
    request["input"] = [
        *request["input"],
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
    ]
    if request.get("tools"):
        request["tool_choice"] = "none"
    request["store"] = False
    if form is CompactionForm.TRIGGER and data.get("stream") is True:
        request["stream"] = True
    users = tuple(
        orjson.dumps(item)
        for item in items
        if isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
    )
    return request, CompactionAnswer(form, users if form is CompactionForm.ENDPOINT else ())
