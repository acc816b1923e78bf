"""Conversation state on the request path: the Responses API's stored responses on
upstreams that keep none.

For a ``POST /v1/responses`` (or a socket's turn), before it is planned:
:meth:`Conversations.prepare` decides what to look up (``previous_response_id``, the
``item_reference`` items) and whether to store the response, does the lookups in the
state store, and gives the body to plan: self-contained (the stored items first, then
the new ones, references replaced) when proxai holds what it names, unchanged when
the upstream does. An upstream that keeps state itself (``store`` not false) is left
to do so; proxai stores only what an upstream that keeps nothing answers.

``GET /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and ``DELETE
/v1/responses/{id}`` are answered here for the responses proxai stored
(:meth:`Conversations.answer`); other ids go to the upstream.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from ..errors import ProxyError
from ..protocols.responses.history import expand, item_not_found, needs, previous_not_found
from ..protocols.responses.record import ResponseRecord
from ..protocols.responses.socket import new_response_id
from ..state import ResponseStatus, StateStore, StoredResponse
from ..translate.ir import StoredAs
from ..wire.json_body import dumps_exact

__all__ = ["Conversations", "StatePlan", "is_response_path", "response_not_found"]

_RESPONSE_PATH = re.compile(r"/v1/responses/(resp_[A-Za-z0-9_-]{1,200})(/input_items)?")


@attrs.frozen
class StatePlan:
    """What the state step decided for one request."""

    #: The body to plan (the client's bytes when nothing was expanded).
    body: bytes
    #: Whose stored responses it reads and writes (:func:`proxai.policy.auth.tenant_of`).
    tenant: str
    #: Set when proxai stores the response.
    stored: StoredAs | None = None
    #: The request's whole input as JSON items, and its instructions (for the record).
    items: tuple[bytes, ...] = ()
    instructions: Any = None


class Conversations:
    """The stored responses of one proxai (its ``[state]`` store)."""

    def __init__(self, store: StateStore, *, max_record_bytes: int) -> None:
        self.store = store
        self.max_record_bytes = max_record_bytes

    async def prepare(
        self,
        body: bytes,
        data: Mapping[str, Any],
        *,
        tenant: str,
        upstream_keeps_state: bool,
        store: bool = True,
    ) -> StatePlan:
        """Resolve what the request names and say whether to store its response (raises
        the 400s of ids nobody holds, and 503 when the store does not answer);
        ``store`` false: never (a compaction)."""
        named = needs(data)
        storing = store and data.get("store") is not False and not upstream_keeps_state
        if named.previous_id is None and not named.references and not storing:
            return StatePlan(body, tenant)  # a request that uses no state pays nothing
        prior: tuple[bytes, ...] | None = None
        if named.previous_id is not None:
            previous = await self.store.get(tenant, named.previous_id)
            if previous is not None:
                prior = (*previous.input_items, *previous.output_items)
            elif not upstream_keeps_state:
                raise previous_not_found(named.previous_id)
        resolved: dict[str, bytes] = {}
        for index, item_id in named.references:
            held = await self.store.item(tenant, item_id)
            if held is not None:
                resolved[item_id] = held
            elif not upstream_keeps_state:
                raise item_not_found(index, item_id)
        expanded = prior is not None or bool(resolved)
        keep = None if prior is not None else named.previous_id
        sent, items = expand(data, prior=prior or (), resolved=resolved, keep_previous=keep)
        stored = StoredAs(new_response_id(), named.previous_id) if storing else None
        return StatePlan(
            orjson.dumps(sent) if expanded else body,
            tenant,
            stored,
            items if storing else (),
            data.get("instructions"),
        )

    def record(self) -> ResponseRecord:
        return ResponseRecord(self.max_record_bytes)

    async def save(self, plan: StatePlan, record: ResponseRecord) -> None:
        """Store a response that ended (completed, incomplete or failed, as OpenAI does)."""
        if record.response_id is None or record.response is None or record.overflowed:
            return
        try:  # OpenAI stores a response that ended; one still queued or running is not one
            status = ResponseStatus(record.status or "")
        except ValueError:
            return
        response = record.response
        if not record.has_output:  # the seed's terminal: its items came as events
            whole = orjson.loads(response)
            whole["output"] = [orjson.Fragment(i) for i in record.items]
            response = dumps_exact(whole)
        await self.store.put(
            StoredResponse(
                id=record.response_id,
                tenant=plan.tenant,
                created_at=time.time(),
                instructions=dumps_exact(plan.instructions) if plan.instructions else None,
                input_items=plan.items,
                output_items=tuple(record.items),
                response=response,
                status=status,
            )
        )

    # -- retrieve, input_items, delete -------------------------------------------------

    async def answer(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        *,
        tenant: str,
        upstream_keeps_state: bool,
    ) -> tuple[int, bytes] | None:
        """The answer to a request for a response proxai stored (``None``: not one, and
        the upstream keeps responses of its own: it answers). Behind an upstream that
        keeps none, proxai is the only one that can hold a response: an id it does not
        hold (unknown, expired, deleted, another key's) is its 404."""
        match = _RESPONSE_PATH.fullmatch(path)
        if match is None or method not in ("GET", "DELETE"):
            return None
        response_id, listing = match.group(1), match.group(2) is not None
        if method == "DELETE" and listing:
            return None
        record = await self.store.get(tenant, response_id)
        if record is None:
            if upstream_keeps_state:
                return None
            raise response_not_found(response_id)
        if method == "DELETE":
            await self.store.delete(tenant, response_id)
            deleted = {"id": response_id, "object": "response.deleted", "deleted": True}
            return 200, orjson.dumps(deleted)
        if not listing:
            return 200, record.response
        return 200, input_items_page(record, query)


def is_response_path(path: str) -> bool:
    """``/v1/responses/{id}`` or ``/v1/responses/{id}/input_items``."""
    return _RESPONSE_PATH.fullmatch(path) is not None


def response_not_found(response_id: str) -> ProxyError:
    """OpenAI's 404 for a response id it does not hold (the SDKs' ``NotFoundError``)."""
    return ProxyError(404, f"Response with id '{response_id}' not found.", "invalid_request_error")


def input_items_page(record: StoredResponse, query: Mapping[str, str]) -> bytes:
    """``GET /v1/responses/{id}/input_items``: OpenAI's list (``order`` desc by
    default, ``after`` an item id, ``limit`` 1 to 100, default 20)."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ProxyError.invalid_request("'order' must be 'asc' or 'desc'", param="order")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise ProxyError.invalid_request("'limit' must be an integer", param="limit") from None
    if not 1 <= limit <= 100:
        raise ProxyError.invalid_request("'limit' must be from 1 to 100", param="limit")
    items = [orjson.loads(i) for i in record.input_items]
    for number, item in enumerate(items):
        if isinstance(item, dict) and "id" not in item:
            item["id"] = f"{record.id}_input_{number}"
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after is not None:
        ids = [i.get("id") for i in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    body = {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
    return orjson.dumps(body)


def parse_query(query: bytes) -> dict[str, str]:
    """A query string's first value of each name."""
    from urllib.parse import parse_qsl

    fields: dict[str, str] = {}
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        fields.setdefault(name, value)
    return fields
