"""The HTTP carrier's entry into the pipeline: one ASGI ``http`` scope, start to end.

What proxai answers itself (``OPTIONS``, health, metrics, the live view) is
:mod:`proxai.service.local`'s and leaves no record. Any other request is read
(:mod:`proxai.service.intake`), checked and admitted (:mod:`proxai.service.admission`:
nothing is read or sent upstream for a refused one), its body read under proxai's
limits, and run (:mod:`proxai.service.pipeline`). Every request that was not answered
locally leaves a record, even one a bug or a shutdown cut short; a refusal or failure
is answered in its API's error shape while the request is still admitted.
"""

from __future__ import annotations

from typing import Any

import trio

from ..config import Config
from ..errors import ProxyError
from ..ops.capture import Capture, Captures
from ..outcome import Outcome, OutcomeKind
from ..relay.writer import send_error
from ..wire.request_coding import decode_request_body
from .admission import Admission
from .asgi_io import AsgiDownstream, ASGIReceive, ASGISend, read_body
from .intake import Intake
from .local import LocalAnswers
from .pipeline import Body, Pipeline
from .plan import Incoming
from .reporting import Reporter

__all__ = ["HttpEndpoint"]


class HttpEndpoint:
    """Serves the app's HTTP scopes."""

    def __init__(
        self,
        config: Config,
        *,
        intake: Intake,
        admission: Admission,
        pipeline: Pipeline,
        local: LocalAnswers,
        reporter: Reporter,
        captures: Captures | None,
    ) -> None:
        self._config = config
        self._intake = intake
        self._admission = admission
        self._pipeline = pipeline
        self._local = local
        self._reporter = reporter
        self._captures = captures

    async def serve(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        verdict = self._intake.verdict(scope)
        downstream = AsgiDownstream(send, receive, verdict.response_headers)
        if verdict.refusal is None and await self._local.answer(scope, verdict, downstream):
            return
        incoming = self._intake.incoming(scope)
        outcome = Outcome(incoming.method, incoming.path, request_id=incoming.request_id)
        trace = self._reporter.trace(incoming, outcome)
        capture: Capture | None = None
        try:
            self._intake.check(incoming, verdict)
            tenant = self._admission.check(incoming)
            self._pipeline.check_served(incoming)
            async with self._admission.admitted(tenant, incoming, outcome) as hold:
                try:
                    if hold is not None:
                        downstream.add_headers(hold.headers)
                    # Refused requests are not captured: a flood of them must not push
                    # out the rest.
                    capture = self._captures.start() if self._captures is not None else None
                    if capture is not None:
                        capture.request_head(
                            incoming.method, incoming.raw_path, incoming.query, incoming.headers
                        )
                    # The body is the pipeline's from here: this frame, which a stream
                    # keeps for its life, holds none of it.
                    body = Body(await self._read_body(incoming, receive, capture))
                    request = self._pipeline.request(
                        incoming, tenant, outcome, capture=capture, trace=trace
                    )
                    await self._pipeline.run(request, body.handed_over(), downstream)
                except ProxyError as exc:  # answered while still admitted
                    await _refuse(exc, downstream, incoming, outcome, capture)
        except ProxyError as exc:  # refused before admission
            await _refuse(exc, downstream, incoming, outcome, capture)
        except Exception as exc:
            outcome.kind = outcome.kind or OutcomeKind.PROXY_ERROR
            outcome.detail = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            # Every request leaves a record, even one a bug or a shutdown cut short.
            self._reporter.report(outcome, trace=trace)
            if capture is not None and self._captures is not None:
                with trio.move_on_after(5, shield=True):
                    await self._captures.save(capture, outcome)

    async def _read_body(
        self, incoming: Incoming, receive: ASGIReceive, capture: Capture | None
    ) -> bytes:
        """The request's body, whole and decoded (raises ProxyError: 413, 408, 499)."""
        server = self._config.server
        body = await read_body(
            incoming.headers,
            receive,
            limit=server.max_request_body_bytes,
            seconds=self._config.timeouts.request_body,
        )
        body = decode_request_body(incoming.headers, body, limit=server.max_request_body_bytes)
        if capture is not None:
            capture.request.add(body)
        return body


async def _refuse(
    exc: ProxyError,
    downstream: AsgiDownstream,
    incoming: Incoming,
    outcome: Outcome,
    capture: Capture | None,
) -> None:
    """Answer ``exc`` in the request's error shape, and record it (a function, not a
    closure in :meth:`HttpEndpoint.serve`: that would make cells of its locals, which a
    stream keeps for its life)."""
    body = await send_error(downstream, exc, incoming.sdk.error_shape, incoming.id_header)
    if capture is not None:
        capture.client.add(body)
    outcome.kind = exc.kind or OutcomeKind.PROXY_ERROR
    outcome.status = exc.status
    outcome.detail = exc.message
