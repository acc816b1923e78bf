"""The ending policy alone: verdict, status and what was forwarded in; what the client gets out."""

from __future__ import annotations

import pytest

from proxai.errors import ProxyError, ending_code
from proxai.outcome import OutcomeKind
from proxai.protocols.observer import Verdict
from proxai.relay.ending import after_client_end, client_gone, decide, head_timeout
from proxai.wire.sse import sse_frame

CLOSING = b"event: error\ndata: {}\n\n"
ERROR = (sse_frame("error", {}),)  # its frame, as an observer makes it


def test_a_completed_stream_ends_as_it_is() -> None:
    end = decide(
        Verdict(OutcomeKind.COMPLETED), status=200, forwarded=True, finished=True, can_abort=True
    )
    assert (end.kind, end.error, end.closing.data, end.abort) == (
        OutcomeKind.COMPLETED,
        None,
        b"",
        False,
    )


def test_a_stall_before_any_byte_becomes_a_504_instead_of_the_response() -> None:
    verdict = Verdict(OutcomeKind.STALLED_IDLE, "no event for 30 s", ERROR)
    end = decide(verdict, status=200, forwarded=False, finished=False, can_abort=True)
    assert end.error is not None
    assert (end.error.status, end.error.code, end.error.message) == (
        504,
        "upstream_timeout",
        "no event for 30 s",
    )
    assert end.closing.data == b"" and end.kind is OutcomeKind.STALLED_IDLE


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (OutcomeKind.UPSTREAM_EOF, "upstream_closed"),
        (OutcomeKind.UPSTREAM_RESET, "upstream_reset"),
        (OutcomeKind.UPSTREAM_EVENT_TOO_LARGE, "upstream_event_too_large"),
        (OutcomeKind.TRANSLATION_FAILED, "translation_failed"),
    ],
)
def test_an_upstream_cut_before_any_byte_becomes_a_502(kind: OutcomeKind, code: str) -> None:
    end = decide(Verdict(kind, "cut"), status=200, forwarded=False, finished=False, can_abort=True)
    assert end.error is not None and (end.error.status, end.error.code) == (502, code)


def test_shutdown_before_any_byte_is_a_503_with_retry_after() -> None:
    verdict = Verdict(OutcomeKind.SHUTDOWN, "proxai is shutting down")
    end = decide(verdict, status=200, forwarded=False, finished=False, can_abort=True)
    assert end.error is not None and end.error.status == 503
    assert (b"retry-after", b"1") in end.error.headers


def test_after_the_first_byte_the_protocols_closing_is_appended() -> None:
    verdict = Verdict(OutcomeKind.STALLED_TOOL_ARGUMENTS, "stalled", ERROR)
    end = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    assert (end.error, end.closing.data, end.abort) == (None, CLOSING, False)


def test_a_cut_short_body_no_observer_can_close_is_broken_off() -> None:
    verdict = Verdict(OutcomeKind.UPSTREAM_RESET, "reset")
    end = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    assert end.abort and end.closing.data == b""


def test_a_body_is_not_broken_off_when_the_server_cannot_abort_or_the_terminal_came() -> None:
    verdict = Verdict(OutcomeKind.UPSTREAM_RESET, "reset")
    assert not decide(verdict, status=200, forwarded=True, finished=False, can_abort=False).abort
    assert not decide(verdict, status=200, forwarded=True, finished=True, can_abort=True).abort


def test_a_non_2xx_answer_relayed_whole_is_recorded_as_an_upstream_error() -> None:
    end = decide(
        Verdict(OutcomeKind.COMPLETED), status=429, forwarded=True, finished=False, can_abort=True
    )
    assert end.kind is OutcomeKind.UPSTREAM_ERROR and end.detail == "upstream answered 429"
    assert end.error is None and not end.abort


def test_no_headers_in_time_names_the_deadline_that_passed() -> None:
    first = head_timeout(first_byte=True, seconds=60.0)
    total = head_timeout(first_byte=False, seconds=5.0)
    assert (first.status, first.kind) == (504, OutcomeKind.STALLED_FIRST_BYTE)
    assert "60.0 s (proxai first_byte timeout)" in first.message
    assert (total.status, total.kind) == (504, OutcomeKind.TOTAL_TIMEOUT)
    # the code a stall has in the stream too
    assert first.code == total.code == ending_code(OutcomeKind.STALLED_FIRST_BYTE)
    assert ending_code(OutcomeKind.STALLED_FIRST_BYTE) == "upstream_timeout"


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (OutcomeKind.UPSTREAM_EOF, "upstream_closed"),
        (OutcomeKind.UPSTREAM_EVENT_TOO_LARGE, "upstream_event_too_large"),
        (OutcomeKind.STALLED_TOOL_ARGUMENTS, "upstream_timeout"),
        (OutcomeKind.SHUTDOWN, "proxy_shutting_down"),
        (OutcomeKind.CLIENT_STALLED, "server_error"),
    ],
)
def test_a_stream_ended_by_proxai_gets_one_code_before_or_after_its_first_byte(
    kind: OutcomeKind, code: str
) -> None:
    assert ending_code(kind) == code
    if kind is not OutcomeKind.CLIENT_STALLED:  # never before the first byte
        verdict = Verdict(kind, "ended")
        error = decide(verdict, status=200, forwarded=False, finished=False, can_abort=True).error
        assert error is not None and error.code == code


@pytest.mark.parametrize(
    "kind",
    [
        OutcomeKind.UPSTREAM_EOF,
        OutcomeKind.UPSTREAM_RESET,
        OutcomeKind.STALLED_IDLE,
        OutcomeKind.TOTAL_TIMEOUT,
        OutcomeKind.SHUTDOWN,
        OutcomeKind.TRANSLATION_FAILED,
    ],
)
def test_the_upstreams_end_after_the_clients_translated_end_leaves_the_response_whole(
    kind: OutcomeKind,
) -> None:
    verdict, anomaly = after_client_end(
        Verdict(kind, "why", ERROR), client_end=OutcomeKind.COMPLETED
    )
    assert verdict == Verdict(OutcomeKind.COMPLETED)
    assert anomaly is not None and "after the client's response had ended" in anomaly
    end = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    assert (end.kind, end.closing.data, end.abort) == (OutcomeKind.COMPLETED, b"", False)


def test_the_clients_incomplete_or_failed_end_is_kept() -> None:
    eof = Verdict(OutcomeKind.UPSTREAM_EOF, "closed", ERROR)
    for client_end in (OutcomeKind.INCOMPLETE, OutcomeKind.FAILED):
        assert after_client_end(eof, client_end=client_end)[0].kind is client_end


def test_before_the_clients_end_the_verdict_stands() -> None:
    eof = Verdict(OutcomeKind.UPSTREAM_EOF, "closed", ERROR)
    assert after_client_end(eof, client_end=None) == (eof, None)
    stalled = Verdict(OutcomeKind.CLIENT_STALLED, "the client read nothing")
    assert after_client_end(stalled, client_end=None) == (stalled, None)


def test_a_client_that_stalls_after_its_translated_end_gets_it_whole_not_broken_off() -> None:
    """Found by the no-hang machine (responses over Chat): the translated terminal was
    held for a client that had read nothing for ``client_write``; the stall's verdict
    stood, so the body was aborted after it when the client read on. As a pass-through
    observer does, the client's end is what the response is recorded as (a client that
    never reads it is recorded stalled when its connection ends, ``client_gone``)."""
    stalled = Verdict(OutcomeKind.CLIENT_STALLED, "the client read nothing")
    verdict, anomaly = after_client_end(stalled, client_end=OutcomeKind.COMPLETED)
    assert (verdict, anomaly) == (Verdict(OutcomeKind.COMPLETED), None)
    end = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    assert (end.kind, end.closing.data, end.abort) == (OutcomeKind.COMPLETED, b"", False)


def test_a_translation_that_failed_with_no_error_to_write_is_broken_off() -> None:
    verdict = Verdict(OutcomeKind.TRANSLATION_FAILED, "translation failed (X: y)")
    end = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    assert (end.kind, end.abort) == (OutcomeKind.TRANSLATION_FAILED, True)


def test_a_response_made_whole_goes_out_whole_and_an_error_instead_of_it_as_its_status() -> None:
    completed = Verdict(OutcomeKind.COMPLETED)
    body = b'{"object": "response"}'
    end = decide(completed, status=200, forwarded=False, finished=False, can_abort=True, whole=body)
    assert (end.kind, end.error, end.closing.data, end.abort) == (
        OutcomeKind.COMPLETED,
        None,
        body,
        False,
    )
    refusal = ProxyError(502, "not a JSON object", "server_error", code="upstream_invalid_body")
    end = decide(
        completed, status=200, forwarded=False, finished=False, can_abort=True, whole=refusal
    )
    assert (end.kind, end.error, end.closing.data) == (OutcomeKind.PROXY_ERROR, refusal, b"")
    translated_error = decide(
        completed, status=429, forwarded=False, finished=False, can_abort=True, whole=b"{}"
    )
    assert (translated_error.kind, translated_error.closing.data) == (
        OutcomeKind.UPSTREAM_ERROR,
        b"{}",
    )


@pytest.mark.parametrize(
    "verdict",
    [
        Verdict(OutcomeKind.COMPLETED),  # the Chat upstream's [DONE] after its error chunk
        Verdict(OutcomeKind.UPSTREAM_EOF, "closed", ERROR),  # or no end at all
    ],
)
def test_a_translators_in_band_failure_is_recorded_as_failed_however_the_stream_ended(
    verdict: Verdict,
) -> None:
    end = decide(
        verdict, status=200, forwarded=True, finished=False, can_abort=True, failed_in_band=True
    )
    assert end.kind is OutcomeKind.FAILED
    plain = decide(verdict, status=200, forwarded=True, finished=False, can_abort=True)
    # Only the record changes: the client gets what it would have.
    assert (end.detail, end.closing.data, end.abort, end.error) == (
        plain.detail,
        plain.closing.data,
        plain.abort,
        plain.error,
    )


def test_a_client_that_hangs_up_between_writes_is_disconnected() -> None:
    assert client_gone(judged=None, blocked_s=None, client_write=10.0) == (
        OutcomeKind.CLIENT_DISCONNECTED,
        None,
    )
    # A write that waited less than half of client_write: the client hung up, no more.
    assert client_gone(judged=OutcomeKind.COMPLETED, blocked_s=4.9, client_write=10.0) == (
        OutcomeKind.CLIENT_DISCONNECTED,
        None,
    )


def test_a_connection_that_ends_while_a_write_waited_half_of_client_write_is_a_stalled_client() -> (
    None
):
    gone = client_gone(judged=None, blocked_s=5.0, client_write=10.0)
    assert gone is not None
    kind, detail = gone
    assert kind is OutcomeKind.CLIENT_STALLED
    assert detail is not None and "waited 5.0 s" in detail and "client_write" in detail


def test_a_client_already_judged_stalled_stays_so() -> None:
    assert client_gone(judged=OutcomeKind.CLIENT_STALLED, blocked_s=None, client_write=10.0) is None
    assert client_gone(judged=OutcomeKind.CLIENT_STALLED, blocked_s=9.0, client_write=10.0) is None
