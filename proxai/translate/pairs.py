"""The translation pairs proxai serves: one table, one row per (client API, upstream API).

A row is the request translator and the response's decoder and encoder. The
relay never branches on a pair: it gets a :class:`~proxai.translate.stream.ResponseTranslator`
built from the row, or none when the upstream speaks the client's API.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import attrs

from ..config import TranslationOptions, UpstreamKind
from ..protocols.names import WireApi
from ..protocols.responses.compaction import CompactionAnswer
from ..protocols.table import UPSTREAM_PROTOCOLS
from .decoders import decoder_for
from .encoders import encoder_for
from .encoders.compaction import CompactionEncoder
from .ir import Clock, Encoder, IdSource, StoredAs, TranslationContext, random_token
from .requests import TRANSLATORS, translate_request
from .stream import ResponseTranslator, TranslatorFactory

__all__ = ["PAIRS", "Pair", "TranslatedRequest", "translate", "upstream_api"]


@attrs.frozen
class Pair:
    """A client API served by an upstream API."""

    client: WireApi
    upstream: WireApi

    def translator(
        self, context: TranslationContext, compaction: CompactionAnswer | None = None
    ) -> ResponseTranslator:
        """``compaction``: the response is a summary, answered as the compaction a
        Responses client asked for (:mod:`~proxai.translate.encoders.compaction`)."""
        encoder: Encoder = (
            encoder_for(self.client, context)
            if compaction is None
            else CompactionEncoder(context, compaction)
        )
        return ResponseTranslator(context, decoder_for(self.upstream), encoder)


#: Every pair proxai translates: those the request translators cover (each client API to
#: each other API), each answered by its upstream API's decoder and its client API's encoder.
PAIRS: dict[tuple[WireApi, WireApi], Pair] = {key: Pair(*key) for key in TRANSLATORS}


def upstream_api(kind: UpstreamKind, client: WireApi) -> WireApi | None:
    """The API a request of ``client``'s API is sent in to an upstream of ``kind``:
    its own when the upstream speaks it, else the one it is translated to, else
    ``None`` (this upstream cannot take it)."""
    protocol = UPSTREAM_PROTOCOLS[kind]
    if client in protocol.apis:
        return client
    target = protocol.translate_to
    if target is not None and (client, target) in PAIRS:
        return target
    return None


@attrs.frozen
class TranslatedRequest:
    """A request rewritten for an upstream of another API."""

    body: dict[str, Any]
    context: TranslationContext
    pair: Pair
    compaction: CompactionAnswer | None = None

    def translator(self) -> TranslatorFactory:
        """Builds the response's translator; holds the context, not the translated body
        (a stream must not keep the request alive)."""
        return functools.partial(self.pair.translator, self.context, self.compaction)


def translate(
    client: WireApi,
    upstream: WireApi,
    body: dict[str, Any],
    options: TranslationOptions,
    *,
    clock: Clock = time.time,
    ids: IdSource = random_token,
    stored: StoredAs | None = None,
    compaction: CompactionAnswer | None = None,
) -> TranslatedRequest:
    """Rewrite ``body`` for ``upstream``; raises ProxyError (400) for what cannot be.
    ``clock`` and ``ids`` are what the response's encoder reads the time and makes up ids
    from; ``stored``: proxai stores the response (its id and what it follows);
    ``compaction``: ``body`` is a summarizing request, answered as that compaction."""
    data, context = translate_request(client, upstream, body, options, clock=clock, ids=ids)
    context.stored = stored
    return TranslatedRequest(data, context, PAIRS[(client, upstream)], compaction)
