"""What proxai answers itself: ``OPTIONS``, health, ``/``, metrics, the live view, and a
table row's :class:`~proxai.protocols.table.LocalAnswer` (count_tokens estimated).

None of these goes upstream. The first five are answered before admission and leave
no record; a local answer is a planned request (routed, admitted, recorded) that
proxai completes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..config import Config
from ..ops.metrics import CONTENT_TYPE_LATEST, Metrics
from ..outcome import Outcome, OutcomeKind
from ..policy.browser import Verdict
from ..relay.writer import Downstream
from .asgi_io import AsgiDownstream, send_plain
from .live_view import PREFIX, LiveView
from .plan import LocalPlan

__all__ = ["HEALTH_PATHS", "LocalAnswers", "send_local_answer"]

#: What proxai answers whatever the Host or Origin: they hold nothing and spend nothing,
#: and a probe must not fail for a header.
HEALTH_PATHS = ("/healthz", "/readyz")
#: What a client probing the base URL gets (Claude Code sends HEAD /).
ROOT_BODY = b'{"service":"proxai","api":"/v1"}'

#: ``health(path)``: ``"ok"``, or why not (``"starting"``, ``"stopped"``, ``"draining"``).
Health = Callable[[str], str]


class LocalAnswers:
    """The answers proxai makes before admission, from the app's state."""

    def __init__(
        self,
        config: Config,
        *,
        health: Health,
        metrics: Metrics | None,
        live_view: LiveView,
        before_metrics: Callable[[], None],
    ) -> None:
        self._config = config
        self._health = health
        self._metrics = metrics
        self._live_view = live_view
        self._before_metrics = before_metrics

    async def answer(
        self, scope: dict[str, Any], verdict: Verdict, downstream: AsgiDownstream
    ) -> bool:
        """Answer what proxai serves itself (OPTIONS, health, ``/``, metrics, the live
        view); whether it did. Refusals, like proxied requests, leave a record: not these."""
        method: str = scope["method"]
        path: str = scope["path"]
        if verdict.options_answer is not None:
            await downstream.send_head(204, list(verdict.options_answer))
            await downstream.send_body(b"", more=False)
        elif path in HEALTH_PATHS and method in ("GET", "HEAD"):
            await self._send_health(path, method, downstream)
        elif path == "/" and method in ("GET", "HEAD"):
            await send_plain(
                downstream, 200, b"application/json", ROOT_BODY, with_body=method == "GET"
            )
        elif self._metrics is not None and path == self._config.metrics.path and method == "GET":
            self._before_metrics()
            body = self._metrics.exposition()
            await send_plain(downstream, 200, CONTENT_TYPE_LATEST.encode(), body)
        elif self._config.live_view.enabled and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self._live_view.handle(scope, downstream)
        else:
            return False
        return True

    async def _send_health(self, path: str, method: str, downstream: AsgiDownstream) -> None:
        """``/healthz``: 200 while proxai can serve (draining included), else 503;
        ``/readyz``: 200 while it takes new requests."""
        status = self._health(path)
        body = b'{"status":"%s"}' % status.encode()
        await send_plain(
            downstream,
            200 if status == "ok" else 503,
            b"application/json",
            body,
            with_body=method == "GET",
        )


async def send_local_answer(
    local: LocalPlan,
    downstream: Downstream,
    outcome: Outcome,
    extra_headers: Sequence[tuple[bytes, bytes]],
) -> None:
    """Answer a planned request proxai completes itself (``count_tokens`` for a model whose
    upstream has no such endpoint: an estimate, see docs/translation.md)."""
    body = local.body()
    await downstream.send_head(200, [(b"content-type", b"application/json"), *extra_headers])
    await downstream.send_body(body, more=False)
    outcome.kind, outcome.status = OutcomeKind.COMPLETED, 200
    outcome.detail = local.answer.detail
