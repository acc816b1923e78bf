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

Where several tenants share the upstream's key (:class:`~proxai.policy.upstream_ids.Isolation`),
the ids an upstream that keeps state minted are claimed for the tenant whose response
they are (:meth:`Conversations.claim`), and a request naming one proxai does not hold
(by its path, ``previous_response_id`` or ``item_reference``) goes upstream only if the
index says it is the request's tenant's: another's, or unknown, is answered as an id
nobody holds (:meth:`Conversations.guard_path`, and in :meth:`Conversations.prepare`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

from ..errors import ProxyError
from ..policy.upstream_ids import Isolation, named_in_path
from ..protocols.table import STORING, Needs, ResponseRecord
from ..state import ResponseStatus, StateStore, StateUnavailable, StoredResponse
from ..translate.ir import StoredAs
from ..wire.json_body import dumps_exact
from .plan import StoredRef

__all__ = ["Conversations", "StatePlan", "response_not_found"]


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
    #: Set when the upstream's ids of the response are claimed for ``tenant``.
    claims: bool = False
    #: What the request's record should say (a lookup the store did not answer).
    warnings: tuple[str, ...] = ()

    def planned(self) -> StatePlan:
        """This plan once its body is planned: what storing the response needs. A held
        stream keeps it for its life; the body each upstream is sent is the exchange's,
        and goes when the upstream answers."""
        return attrs.evolve(self, body=b"")


class Conversations:
    """The stored responses of one proxai (its ``[state]`` store)."""

    def __init__(
        self, store: StateStore, *, max_record_bytes: int, isolation: Isolation | None = None
    ) -> None:
        self.store = store
        self.max_record_bytes = max_record_bytes
        #: ``None``: one tenant, nothing to isolate (and no store call for it).
        self.isolation = isolation

    async def prepare(
        self,
        body: bytes,
        data: Mapping[str, Any],
        *,
        tenant: str,
        upstream_keeps_state: bool,
        store: bool = True,
    ) -> tuple[StatePlan, dict[str, Any] | None]:
        """Resolve what the request names and say whether to store its response (raises
        the 400s of ids nobody holds, and 503 when the store does not answer);
        ``store`` false: never (a compaction). With the plan, the expanded body as
        Python objects (``None``: not expanded), for the planner, so that it is not
        parsed back; apart from the plan, which lasts as long as the response, so that
        the objects die with the planning."""
        named = STORING.needs(data)
        storing = store and data.get("store") is not False and not upstream_keeps_state
        claims = (
            self.isolation is not None
            and upstream_keeps_state
            and store
            and data.get("store") is not False
        )
        if named.previous_id is None and not named.references and not storing:
            # A request that uses no state pays nothing (but its claim, once answered).
            return StatePlan(body, tenant, claims=claims), None
        try:
            return await self._resolve(
                body,
                data,
                named,
                tenant=tenant,
                upstream_keeps_state=upstream_keeps_state,
                claims=claims,
                storing=storing,
            )
        except StateUnavailable as exc:
            if not upstream_keeps_state or self.isolation is not None:
                raise
            # The upstream holds its own chains: with no one to isolate, a store that
            # does not answer must not refuse what the upstream can serve. The request
            # goes as sent (an id only proxai held then gets the upstream's not-found).
            warning = f"sent as the client wrote it: proxai's stored responses: {exc}"
            return StatePlan(body, tenant, claims=claims, warnings=(warning,)), None

    async def _resolve(
        self,
        body: bytes,
        data: Mapping[str, Any],
        named: Needs,
        *,
        tenant: str,
        upstream_keeps_state: bool,
        claims: bool,
        storing: bool,
    ) -> tuple[StatePlan, dict[str, Any] | None]:
        """Look up what the request names and expand it into a self-contained one.

        What the request pulls from the store (each reference as often as it is named)
        is bounded as a socket's conversation is: a few bytes naming stored work must not
        multiply it upstream, nor a chain grow it without end."""
        room = self.max_record_bytes
        prior: tuple[bytes, ...] | None = None
        if named.previous_id is not None:
            previous = await self.store.get(tenant, named.previous_id)
            if previous is not None:
                prior = (*previous.input_items, *previous.output_items)
                room -= sum(len(item) for item in prior)
                if room < 0:
                    raise STORING.previous_too_large(named.previous_id, self.max_record_bytes)
            elif not upstream_keeps_state:
                raise STORING.previous_not_found(named.previous_id)
        resolved: dict[str, bytes] = {}
        missing: set[str] = set()
        for index, item_id in named.references:
            held = resolved.get(item_id)
            if held is None and item_id not in missing:  # each id is looked up once
                held = await self.store.item(tenant, item_id)
                if held is not None:
                    resolved[item_id] = held
                elif not upstream_keeps_state:
                    raise STORING.item_not_found(index, item_id)
                else:
                    missing.add(item_id)
            if held is not None:
                room -= len(held)
                if room < 0:
                    raise STORING.references_too_large(index, self.max_record_bytes)
        if upstream_keeps_state:
            unheld = named.previous_id if prior is None else None
            await self._check_upstream_ids(tenant, unheld, named.references, missing)
        expanded = prior is not None or bool(resolved)
        keep = None if prior is not None else named.previous_id
        sent, items, objects = STORING.expand(
            data, prior=prior or (), resolved=resolved, keep_previous=keep
        )
        stored = StoredAs(STORING.new_id(), named.previous_id) if storing else None
        plan = StatePlan(
            orjson.dumps(sent) if expanded else body,
            tenant,
            stored,
            items if storing else (),
            data.get("instructions"),
            claims,
        )
        return plan, objects if expanded else None

    # -- the ids an upstream that keeps state minted -------------------------------------

    async def _check_upstream_ids(
        self,
        tenant: str,
        previous: str | None,
        references: tuple[tuple[int, str], ...],
        missing: set[str],
    ) -> None:
        """Raise what an unknown id gets for the first id proxai does not hold that the
        index does not say is ``tenant``'s (one lookup for all of them)."""
        if self.isolation is None or (previous is None and not missing):
            return
        asked: list[tuple[int | None, str]] = [] if previous is None else [(None, previous)]
        seen: set[str] = set()
        for at, item_id in references:
            if item_id in missing and item_id not in seen:
                seen.add(item_id)
                asked.append((at, item_id))
        owners = await self.store.owners([name for _, name in asked])
        refused = self.isolation.first_refused(tenant, owners)
        if refused is None:
            return
        place, name = asked[refused]
        raise (
            STORING.previous_not_found(name)
            if place is None
            else STORING.item_not_found(place, name)
        )

    async def guard_path(self, method: str, path: str, *, tenant: str) -> None:
        """Before a request whose path names a response proxai does not hold goes
        upstream: the 404 of an unknown id unless the index says it is ``tenant``'s."""
        if self.isolation is None:
            return
        response_id = named_in_path(method, path)
        if response_id is None:
            return
        (owner,) = await self.store.owners([response_id])
        if not self.isolation.forwards(tenant, owner):
            raise response_not_found(response_id)

    def id_record(self) -> ResponseRecord:
        """What following an answer for :meth:`claim` keeps: its ids, not its items."""
        return STORING.record(self.max_record_bytes, ids_only=True)

    async def claim(self, tenant: str, response_id: str, item_ids: Sequence[str] = ()) -> None:
        """Record the upstream's ids of a response as ``tenant``'s (the first owner stays)."""
        await self.store.claim(tenant, [response_id, *item_ids])

    def record(self) -> ResponseRecord:
        return STORING.record(self.max_record_bytes)

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
        ref: StoredRef,
        query: Mapping[str, str],
        *,
        tenant: str,
        upstream_keeps_state: bool,
    ) -> tuple[int, bytes] | None:
        """The answer to a request for a response proxai stored (``None``: not one, and
        the upstream keeps responses of its own: it answers). Behind an upstream that
        keeps none, proxai is the only one that can hold a response: an id it does not
        hold (unknown, expired, deleted, another key's) is its 404. ``ref``: what the
        path names (:attr:`~proxai.service.plan.Incoming.stored`)."""
        response_id, listing = ref.response_id, ref.listing
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
