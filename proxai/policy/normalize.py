"""Request normalization: opt-in rewrites per upstream, applied only when they change something.

proxai forwards request bodies as the bytes the client sent. A pass that
changes nothing leaves those bytes untouched; only a pass that does change
the request makes proxai serialize the edited JSON (compact, UTF-8).

- ``system_to_instructions`` (Responses): ``role: "system"`` input items (and
  ``"developer"`` ones with ``developer_to_instructions``) are removed from
  ``input`` and their text is prepended to ``instructions``, for compatible
  upstreams that reject system items in ``input``. An item whose content is
  not all text (an image, a file) is left where it is.
- ``model`` rewrite: the route's ``upstream_model`` replaces ``model``.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..config import NormalizeConfig
from ..wire.json_body import dumps_kept

__all__ = ["normalize_body"]

_TEXT_PARTS = frozenset({"input_text", "text", "output_text"})


def _item_text(item: dict[str, Any]) -> str | None:
    """The text of a message item, or None if it holds anything but text."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") in _TEXT_PARTS):
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "\n".join(texts)


def _system_to_instructions(data: dict[str, Any], roles: frozenset[str]) -> bool:
    items = data.get("input")
    if not isinstance(items, list):
        return False
    moved: list[str] = []
    kept: list[Any] = []
    for item in items:
        is_message = isinstance(item, dict) and item.get("type", "message") == "message"
        text = _item_text(item) if is_message and item.get("role") in roles else None
        if text is None:
            kept.append(item)
        elif text.strip():
            moved.append(text)
        # an empty system item is dropped: it would only add a blank paragraph
    if len(kept) == len(items):
        return False
    existing = data.get("instructions")
    if isinstance(existing, str) and existing:
        moved.append(existing)
    data["input"] = kept
    if moved:
        data["instructions"] = "\n\n".join(moved)
    return True


def normalize_body(
    body: bytes,
    data: dict[str, Any],
    passes: NormalizeConfig,
    *,
    responses: bool,
    upstream_model: str | None = None,
    edited: bool = False,
) -> bytes:
    """The body to send upstream: ``body`` itself unless a pass changed ``data``.

    ``data`` is the parsed ``body`` and is edited in place; ``responses`` says
    whether it is a Responses request (the only kind with ``instructions``);
    ``edited``: the caller already changed ``data`` (proxai's envelopes dropped).
    """
    changed = edited
    if responses and passes.system_to_instructions:
        roles = frozenset(
            {"system", "developer"} if passes.developer_to_instructions else {"system"}
        )
        changed |= _system_to_instructions(data, roles)
    if upstream_model is not None and data.get("model") != upstream_model:
        data["model"] = upstream_model
        changed = True
    if not changed:
        return body
    return dumps_kept(data, client_body=lambda: orjson.loads(body))
