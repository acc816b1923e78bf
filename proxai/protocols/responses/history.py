"""A Responses request's history, sans-io: what a request that names earlier work
(``previous_response_id``, ``item_reference`` items) is sent upstream as, once
proxai holds that work.

One code for both holders: a WebSocket's own conversation
(:mod:`proxai.protocols.responses.socket`) and the stored responses
(:mod:`proxai.state`). The caller decides synchronously what it must look up
(:func:`needs`), does the lookups, then :func:`expand` builds the body: the earlier
items first, as JSON kept byte for byte, then the new ones, each ``item_reference``
replaced by the item it names. The earlier ``instructions`` are not carried over
(OpenAI's rule: a request's instructions are its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

from ...errors import ProxyError
from ...wire.json_body import dumps_exact

__all__ = [
    "MAX_ITEM_REFERENCES",
    "Needs",
    "expand",
    "input_items",
    "needs",
    "previous_not_found",
    "previous_too_large",
    "references_too_large",
]

#: The distinct ``item_reference`` ids one request may name: each is a lookup in the
#: state store (a Redis round trip), so a request of references must not cost the
#: store in proportion to a body of up to ``max_request_body_bytes``.
MAX_ITEM_REFERENCES = 1024


@attrs.frozen
class Needs:
    """What a request names that someone must hold."""

    previous_id: str | None
    #: The ids of its ``item_reference`` items, with their input index.
    references: tuple[tuple[int, str], ...] = ()


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return value
    raise ProxyError.invalid_request("'input' must be a string or an array of items", param="input")


def needs(body: Mapping[str, Any]) -> Needs:
    """The previous response and the referenced items ``body`` names (400 for a
    ``previous_response_id`` or a reference that is not a string)."""
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise ProxyError.invalid_request(
            "'previous_response_id' must be a string", param="previous_response_id"
        )
    references: list[tuple[int, str]] = []
    distinct: set[str] = set()
    items = body.get("input")
    if isinstance(items, list):
        for index, item in enumerate(items):
            if isinstance(item, dict) and item.get("type") == "item_reference":
                item_id = item.get("id")
                if not isinstance(item_id, str) or not item_id:
                    raise ProxyError.invalid_request(
                        "an item_reference needs the 'id' of the item it names",
                        param=f"input[{index}].id",
                    )
                distinct.add(item_id)
                if len(distinct) > MAX_ITEM_REFERENCES:
                    raise ProxyError.invalid_request(
                        f"a request may name at most {MAX_ITEM_REFERENCES} distinct items "
                        "in item_reference items; send the others' content itself",
                        param=f"input[{index}]",
                        code="too_many_item_references",
                    )
                references.append((index, item_id))
    return Needs(previous or None, tuple(references))


def previous_not_found(response_id: str, why: str = "") -> ProxyError:
    """OpenAI's answer to a ``previous_response_id`` nobody holds."""
    return ProxyError(
        400,
        f"Previous response with id '{response_id[:200]}' not found.{why}",
        "invalid_request_error",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def previous_too_large(response_id: str, limit: int) -> ProxyError:
    """A ``previous_response_id`` whose stored conversation is past what one request may
    pull from the store: the client sends the whole context (or compacts it)."""
    return previous_not_found(
        response_id,
        f" It is not expanded: its conversation is larger than {limit} bytes "
        "(server.websocket_max_state_bytes); send the whole context",
    )


def references_too_large(index: int, limit: int) -> ProxyError:
    """The ``item_reference`` at ``index`` takes what the request pulls from the store
    past ``limit``: a few bytes naming a large item must not multiply it."""
    return ProxyError(
        400,
        f"the items this request names (previous_response_id and item_reference) come to "
        f"more than {limit} bytes (server.websocket_max_state_bytes) at input[{index}]; "
        "send the items' content itself",
        "invalid_request_error",
        param=f"input[{index}]",
        code="item_references_too_large",
    )


def item_not_found(index: int, item_id: str) -> ProxyError:
    """An ``item_reference`` to an item nobody holds."""
    return ProxyError(
        400,
        f"Item with id '{item_id[:200]}' not found.",
        "invalid_request_error",
        param=f"input[{index}]",
        code="item_not_found",
    )


def expand(
    body: Mapping[str, Any],
    *,
    prior: Sequence[bytes] = (),
    resolved: Mapping[str, bytes] | None = None,
    keep_previous: str | None = None,
) -> tuple[dict[str, Any], tuple[bytes, ...], dict[str, Any]]:
    """The body to send, its whole input as JSON items, and the body as Python objects.

    ``prior``: the earlier items (input then output of the response followed);
    ``resolved``: the JSON of referenced items by id (a reference not in it stays as
    sent, for an upstream that holds it); ``keep_previous``: the
    ``previous_response_id`` to send (one the upstream holds), else none is sent.
    Linear in the items: each new item is serialized once, the earlier ones not at all.
    The objects are what the planner reads, so the body sent is never parsed back: the
    new items are the client's own objects, an earlier item is parsed here, once.
    """
    found = resolved or {}
    new: list[bytes] = []
    objects: list[Any] = [orjson.loads(item) for item in prior]
    for item in input_items(body.get("input")):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            held = found.get(item.get("id"))  # type: ignore[arg-type]
            if held is not None:
                new.append(held)
                objects.append(orjson.loads(held))
                continue
        new.append(dumps_exact(item))  # kept as long as the state that holds it
        objects.append(item)
    items = (*prior, *new)
    sent: dict[str, Any] = dict(body)
    sent["input"] = [orjson.Fragment(item) for item in items]
    if keep_previous is None:
        sent.pop("previous_response_id", None)
    else:
        sent["previous_response_id"] = keep_previous
    return sent, items, {**sent, "input": objects}


def unresolved(needs: Needs, resolved: Mapping[str, bytes]) -> ProxyError | None:
    """The 400 for the first reference nobody holds, if any."""
    for index, item_id in needs.references:
        if item_id not in resolved:
            return item_not_found(index, item_id)
    return None
