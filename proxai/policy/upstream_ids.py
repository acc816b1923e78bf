"""Who may name an id an upstream that keeps state minted, sans-io.

An ``openai`` or ``openai_responses`` upstream stores responses under proxai's one
upstream key, whoever's client key made them: forwarded unchecked, a
``GET``/``DELETE /v1/responses/{id}``, a ``previous_response_id`` or an
``item_reference`` lets any key that learned an id (from a trace or a log) reach
another's conversation. proxai records whose each such id is (the state store's
``claim``) and asks before forwarding (its ``owners``); this module decides from the
answer, the I/O is :mod:`proxai.service.conversations`'.

With one tenant (``[auth]`` off, or one key) there is no one to isolate from, and
nothing is recorded or asked: an upstream that keeps state costs no store call.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..protocols.table import STORED_PATH

__all__ = ["Isolation", "named_in_path"]

_PREFIX = STORED_PATH + "/"


@attrs.frozen
class Isolation:
    """The rule where several tenants share the upstream's key."""

    #: An id the index does not know (``[state] forward_unknown_upstream_ids``): made
    #: outside proxai, before it kept the index, or forgotten since.
    forward_unknown: bool = False

    @staticmethod
    def applies(tenants: int) -> bool:
        """Whether ids need checking at all: only where more than one tenant exists."""
        return tenants > 1

    def forwards(self, tenant: str, owner: str | None) -> bool:
        """Whether a request of ``tenant`` naming an id claimed by ``owner`` (``None``:
        unknown) may go upstream; refused, it is answered as an unknown id is."""
        if owner is None:
            return self.forward_unknown
        return owner == tenant

    def first_refused(self, tenant: str, owners: Sequence[str | None]) -> int | None:
        """The place of the first id (of those looked up) that may not be forwarded."""
        for place, owner in enumerate(owners):
            if not self.forwards(tenant, owner):
                return place
        return None


def named_in_path(method: str, path: str) -> str | None:
    """The response id a request's path names: ``/v1/responses/{id}`` and anything under
    it (``input_items``, ``cancel``, a resumed stream). A ``POST`` to
    ``/v1/responses/{name}`` is one of the API's endpoints (``compact``,
    ``input_tokens``), never an id's. Any shape of id counts, so an upstream minting ids
    of its own shape is guarded too."""
    if not path.startswith(_PREFIX):
        return None
    first, _, rest = path[len(_PREFIX) :].partition("/")
    if not first or (method == "POST" and not rest):
        return None
    return first
