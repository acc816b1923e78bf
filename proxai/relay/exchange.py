"""What one relayed request is, decided before any I/O: the :class:`Exchange` record.

The app builds it from the client's request, the route and the protocol table;
the relay only carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from ..config import TimeoutsConfig
from ..errors import ErrorShape
from ..policy.retry import RetryPlan
from ..protocols.observer import ObserverFactory, pass_through
from ..protocols.table import UsageReader
from ..translate.stream import TranslatorFactory
from ..upstream.client import Upstream
from ..wire.headers import Headers

__all__ = [
    "UNLIMITED_RETRIES",
    "Exchange",
    "ProxiedRequest",
    "RetryAdmission",
    "Tap",
    "UpstreamTarget",
]


class Sink(Protocol):
    def add(self, data: bytes) -> None: ...


class Tap(Protocol):
    """Sees the bytes of a request's exchange (captures): never changes them."""

    def upstream_head(self, status: int, headers: Headers) -> None: ...

    @property
    def upstream(self) -> Sink: ...

    @property
    def client(self) -> Sink: ...


class RetryAdmission(Protocol):
    """Whether a request may retry now: the process's retry budget, which the app keeps
    (see :class:`~proxai.policy.retry.RetryBudget`)."""

    def note_request(self) -> None:
        """A request's first attempt goes upstream (the budget is a share of those)."""
        ...

    def start_retry(self) -> bool:
        """Count one retry; ``False`` when over budget (nothing counted)."""
        ...


class _Unlimited:
    def note_request(self) -> None:
        pass

    def start_retry(self) -> bool:
        return True


#: No budget: every retry the plan names is made.
UNLIMITED_RETRIES: RetryAdmission = _Unlimited()


@attrs.frozen
class ProxiedRequest:
    """What the client asked for, as the relay forwards it."""

    method: str
    path: str  # decoded, for routing and records
    raw_path: bytes  # as the client encoded it, for forwarding
    query: bytes
    headers: Headers
    #: False for a generation request that asked for no stream: the upstream sends its
    #: headers only when the whole answer is ready, so only ``total`` bounds the wait.
    first_byte_applies: bool = True


@attrs.frozen
class UpstreamTarget:
    """One upstream a request may go to: its client, deadlines and the request it gets
    (normalization, model rewrites and translation differ per upstream)."""

    client: Upstream
    timeouts: TimeoutsConfig
    body: bytes
    #: Builds the observer of this upstream's stream (its API's, with its deadlines).
    observer_factory: ObserverFactory = pass_through
    #: The path and query it is sent to, when not the client's (a translated request).
    raw_path: bytes | None = None
    query: bytes | None = None
    #: Builds the translator of its response into the client's API (``None``: the
    #: upstream speaks the client's API and the bytes pass unchanged).
    translator: TranslatorFactory | None = None
    #: Request fields left out of ``body`` for this upstream (proxai's reasoning envelopes
    #: on the way to a native one), for the outcome; a translator reports its own.
    dropped: Sequence[str] = ()
    #: Reads a whole answer's usage into the outcome's ``tokens`` (its API's row's
    #: reader; ``None``: the raw ``usage`` alone is kept). A stream's is its observer's.
    usage: UsageReader | None = None


@attrs.frozen
class Exchange:
    """Everything the relay needs to carry out one request."""

    request: ProxiedRequest
    #: Every upstream of the request's route by name; ``plan`` says which to try.
    targets: Mapping[str, UpstreamTarget]
    plan: RetryPlan
    #: ``[timeouts]``: ``total`` and ``client_write`` bound the whole exchange (each
    #: upstream's own deadlines come from its target).
    timeouts: TimeoutsConfig
    #: Consulted before each attempt after the first (the app's retry budget).
    retry_admission: RetryAdmission = UNLIMITED_RETRIES
    error_shape: ErrorShape = ErrorShape.OPENAI
    max_event_bytes: int = 16 * 1024 * 1024
    #: The largest upstream body held to be translated whole (``[server]``).
    max_translated_body_bytes: int = 32 * 1024 * 1024
    #: Whether ending a response without its final message makes the server break the
    #: connection (HTTP/1.1). Hypercorn's HTTP/2 leaves such a stream open, so there a
    #: cut-short body is ended normally rather than left hanging.
    can_abort: bool = True
    #: Headers proxai adds to the response (x-proxai-request-id).
    response_headers: Sequence[tuple[bytes, bytes]] = ()
