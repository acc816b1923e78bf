"""The fault matrix as data: every case, what the client must see and when.

The same rows drive ``test_matrix.py`` and ``docs/reliability.md`` (rendered by
``python -m tests.faults.render``; a test checks the document is current).
Times are on the virtual clock with the deadlines of ``MATRIX_TIMEOUTS``.
"""

from __future__ import annotations

import attrs

from proxai.errors import ErrorShape
from proxai.outcome import OutcomeKind
from proxai.protocols.table import WireApi
from tests.faults.kits import KITS, STAGES

MATRIX_TIMEOUTS = {
    "first_byte": 10.0,
    "tool_arguments": 20.0,
    "idle": 30.0,
    "total": 1000.0,
    "request_body": 5.0,
    "client_write": 50.0,
}
MAX_EVENT_BYTES = 65536
FAULTS = ("silence", "eof", "reset", "oversized_event")
PRE_STREAM = ("before_headers", "before_first_event")


@attrs.frozen
class Case:
    wire: WireApi
    stage: str
    fault: str
    ends_at: float  # seconds after the request, when the client's response is over
    outcome: OutcomeKind
    status: int  # 200: the error comes inside the stream
    #: The error's code (OpenAI's APIs) or type (Anthropic's), in the stream or in the HTTP
    #: error: one code per cause, whichever way the client is told.
    error: str
    message: str  # a fragment of the error's message

    @property
    def protocol(self) -> str:
        """The API's label in the matrix (its kit's name)."""
        return KITS[self.wire].name

    @property
    def id(self) -> str:
        return f"{self.protocol}-{self.stage}-{self.fault}"


def _silence(stage: str) -> tuple[float, OutcomeKind, str]:
    if stage == "before_headers":
        return MATRIX_TIMEOUTS["first_byte"], OutcomeKind.STALLED_FIRST_BYTE, "no response headers"
    if stage in ("mid_arguments", "mid_parallel_arguments"):
        return (
            MATRIX_TIMEOUTS["tool_arguments"],
            OutcomeKind.STALLED_TOOL_ARGUMENTS,
            "upstream stalled for 20.0 s while streaming",
        )
    return MATRIX_TIMEOUTS["idle"], OutcomeKind.STALLED_IDLE, "upstream sent nothing for 30.0 s"


_ENDS = {
    "eof": (OutcomeKind.UPSTREAM_EOF, "upstream_closed", "closed"),
    "reset": (OutcomeKind.UPSTREAM_RESET, "upstream_reset", "reset"),
    "oversized_event": (
        OutcomeKind.UPSTREAM_EVENT_TOO_LARGE,
        "upstream_event_too_large",
        f"over {MAX_EVENT_BYTES} bytes",
    ),
}


def _case(wire: WireApi, stage: str, fault: str) -> Case:
    anthropic = KITS[wire].error_shape is ErrorShape.ANTHROPIC
    if fault == "silence":
        ends_at, outcome, message = _silence(stage)
        if stage in PRE_STREAM:
            status, error = 504, "timeout_error" if anthropic else "upstream_timeout"
        else:
            status, error = 200, "overloaded_error" if anthropic else "upstream_timeout"
        return Case(wire, stage, fault, ends_at, outcome, status, error, message)
    outcome, code, message = _ENDS[fault]
    if stage == "before_headers":
        message = "before answering"
    elif fault == "eof":
        message = "closed the stream before the response completed"
    elif fault == "reset":
        message = "broke before the response completed"
    status = 502 if stage in PRE_STREAM else 200
    return Case(
        wire, stage, fault, 0.0, outcome, status, "api_error" if anthropic else code, message
    )


CASES = [
    _case(wire, stage, fault)
    for wire in KITS
    for stage in STAGES
    for fault in FAULTS
    if not (stage == "before_headers" and fault == "oversized_event")
]

CLIENT_STAGES = ("before_headers", "before_first_event", "mid_text", "mid_arguments")
DISCONNECT_AT = 5.0
