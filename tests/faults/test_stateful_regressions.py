"""Defects the no-hang machine found (tests/faults/test_stateful.py), each replayed as the
minimal sequence hypothesis printed (the invariants checked after every step, as the
machine does), with the fix it holds."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from proxai.outcome import OutcomeKind
from proxai.protocols.table import WireApi
from tests.faults.stateful import ProxaiMachine, Start


@contextmanager
def machine(start: Start) -> Iterator[Callable[..., None]]:
    """A machine at ``start``; yields ``step(name, **arguments)``."""
    logging.disable(logging.WARNING)
    state = type("Machine", (ProxaiMachine,), {"start": start})()
    try:
        state.the_five_invariants()

        def step(name: str, **arguments: object) -> None:
            getattr(state, name)(**arguments)
            state.the_five_invariants()

        step.state = state  # type: ignore[attr-defined]
        yield step
        state.teardown()
    finally:
        logging.disable(logging.NOTSET)


def test_a_socket_turn_cut_for_not_reading_is_recorded_as_client_stalled() -> None:
    # Found by the machine (responses-responses-ws-tools2), as hypothesis printed it:
    #   state.upstream_sends_its_head()
    #   state.upstream_sends_the_next_event()  (four times)
    #   state.upstream_ends_its_body()
    #   state.time_passes(seconds=2.0)
    #   state.time_passes(seconds=4.0)
    #   state.time_passes(seconds=30.0)
    #   state.teardown()
    # Failure: the outcome upstream_eof does not name the ending ('gone', None).
    # The upstream closed early, so the relay ended the turn upstream_eof; the client had
    # read nothing, its frames (the events, then proxai's error and response.failed) were
    # still blocked after client_write + 1 s, and the socket was cut. The turn was
    # recorded upstream_eof although the client got no ending at all; over SSE the same
    # client is recorded client_stalled.
    with machine(Start(WireApi.RESPONSES, WireApi.RESPONSES, socket=True, tools=2)) as step:
        step("upstream_sends_its_head")
        for _ in range(4):
            step("upstream_sends_the_next_event")
        step("upstream_ends_its_body")
        step("time_passes", seconds=2.0)
        step("time_passes", seconds=4.0)
        step("time_passes", seconds=30.0)
        (turn,) = step.state.world.replies  # type: ignore[attr-defined]
        assert turn.outcome is not None
        assert turn.outcome.kind is OutcomeKind.CLIENT_STALLED
        assert turn.outcome.detail is not None and "cut" in turn.outcome.detail


def test_a_frame_that_arrives_while_a_draining_socket_closes_is_dropped_not_a_crash() -> None:
    # Found by the machine (responses-messages-ws-tools2), as hypothesis printed it:
    #   state.client_sends_the_next_request()
    #   state.time_reaches_a_deadline(offset=-0.25)
    #   state.shutdown_begins()
    #   state.client_sends_the_next_request()
    #   state.teardown()
    # Failure: the socket's handler raised trio.BrokenResourceError out of the ASGI app.
    # Both turns ended in 504s the client had not read yet, so its window was full. The
    # drain ended the idle socket: the runner closed the queue and waited (up to 1 s) to
    # send the 1001 close; a response.create arriving in that second found the queue
    # closed, and the receiver's send_nowait raised.
    with machine(Start(WireApi.RESPONSES, WireApi.MESSAGES, socket=True, tools=2)) as step:
        step("client_sends_the_next_request")
        step("time_reaches_a_deadline", offset=-0.25)
        step("shutdown_begins")
        step("client_sends_the_next_request")
        world = step.state.world  # type: ignore[attr-defined]
        assert world.replies[-1].outcome is None  # queued behind the drain: never run


def test_a_client_that_stalls_after_the_terminal_and_then_reads_it_all_completed() -> None:
    # Found by the machine (chat-messages-sse-tools2), as hypothesis printed it:
    #   state.upstream_sends_its_head()
    #   state.upstream_sends_several_events(count=17)
    #   state.time_passes(seconds=150.0)
    #   state.client_reads(everything=True)
    #   state.time_passes(seconds=2.0)
    #   state.time_passes(seconds=20.0)
    #   state.shutdown_begins()
    #   state.time_passes(seconds=4.0)
    #   state.time_passes(seconds=4.0)
    #   state.time_passes(seconds=0.5)
    #   state.client_reads(everything=True)
    #   state.teardown()
    # Failure: the outcome client_stalled does not name the ending ('complete', ...).
    # The whole stream, terminal included, was in proxai's hands when the client stopped
    # reading; at client_write proxai let the upstream go and kept the rest for the
    # client, which then read all of it: a complete response, recorded client_stalled.
    with machine(Start(WireApi.CHAT, WireApi.MESSAGES, socket=False, tools=2)) as step:
        step("upstream_sends_its_head")
        step("upstream_sends_several_events", count=17)
        step("time_passes", seconds=150.0)
        step("client_reads", everything=True)
        step("time_passes", seconds=2.0)
        step("time_passes", seconds=20.0)
        step("shutdown_begins")
        step("time_passes", seconds=4.0)
        step("time_passes", seconds=4.0)
        step("time_passes", seconds=0.5)
        step("client_reads", everything=True)
        step("time_passes", seconds=2.0)
        (reply,) = step.state.world.replies  # type: ignore[attr-defined]
        assert reply.ending is not None and reply.ending[0] == "complete"
        assert reply.outcome is not None
        assert reply.outcome.kind is OutcomeKind.COMPLETED


def test_a_translated_response_held_for_a_stalled_client_is_not_broken_off() -> None:
    # Found by the machine's long profile (responses-chat-sse-tools2, issue 38's run), as
    # hypothesis printed it:
    #   state.upstream_answers_an_error(retry_after=False, status=429)
    #   state.time_passes(seconds=0.25)
    #   state.upstream_answers_an_error(retry_after=False, status=429)
    #   state.client_sends_the_next_request()
    #   state.shutdown_begins()
    #   state.upstream_sends_its_head()
    #   state.upstream_sends_several_events(count=12)
    #   state.time_passes(seconds=11.75)
    #   state.time_passes(seconds=19.75)
    #   state.teardown()
    # Failure: response 1 broken off (its body ended on response.completed, unterminated).
    # The client read nothing for client_write: the relay held its last bytes, which held
    # the translated response.completed, but judged the client stalled and aborted the
    # body after them; the client that then read got a complete stream broken off.
    with machine(Start(WireApi.RESPONSES, WireApi.CHAT, socket=False, tools=2)) as step:
        step("upstream_answers_an_error", retry_after=False, status=429)
        step("time_passes", seconds=0.25)
        step("upstream_answers_an_error", retry_after=False, status=429)
        step("client_sends_the_next_request")
        step("shutdown_begins")
        step("upstream_sends_its_head")
        step("upstream_sends_several_events", count=12)
        step("time_passes", seconds=11.75)
        step("time_passes", seconds=19.75)
        world = step.state.world  # type: ignore[attr-defined]
        turn = world.replies[1]
        while turn.finished_at is None and world.unread():
            step("client_reads", everything=True)
        assert turn.outcome is not None and turn.outcome.kind is OutcomeKind.COMPLETED
        assert not turn.aborted and turn.ended_at is not None


def test_a_chat_stream_silent_after_its_usage_chunk_ends_without_an_error_chunk() -> None:
    # Found by the machine's long profile (chat-chat-sse-tools0 and -tools2), as
    # hypothesis printed it:
    #   state.upstream_sends_its_head()
    #   state.upstream_splits_an_event(cut=1)  (twice)
    #   state.upstream_sends_the_next_event()  (five times)
    #   state.time_passes(seconds=30.0)
    #   state.teardown()
    # Failure: the client's strict checks, "a choices: [] chunk before the end". The
    # upstream passed through its finish_reason and its usage chunk, then went silent;
    # proxai appended its upstream_timeout error chunk at idle to a response the client
    # already had whole.
    with machine(Start(WireApi.CHAT, WireApi.CHAT, socket=False, tools=0)) as step:
        step("upstream_sends_its_head")
        step("upstream_splits_an_event", cut=1)
        step("upstream_splits_an_event", cut=1)
        for _ in range(5):
            step("upstream_sends_the_next_event")
        step("time_passes", seconds=30.0)
        step("client_reads", everything=True)
        (reply,) = step.state.world.replies  # type: ignore[attr-defined]
        assert reply.ending is not None and reply.ending[0] == "complete"
        assert reply.outcome is not None and reply.outcome.kind is OutcomeKind.COMPLETED


def test_a_turn_queued_behind_one_the_client_stopped_reading_goes_with_its_socket() -> None:
    # Found by the machine's long profile (responses-responses-ws-tools2), as hypothesis
    # printed it:
    #   state.time_reaches_a_deadline(offset=-0.25)
    #   state.client_sends_the_next_request()  (twice)
    #   state.upstream_sends_its_head()
    #   state.upstream_sends_several_events(count=2)
    #   state.upstream_sends_several_events(count=13)
    #   state.teardown()
    # Failure: "turn 2: the socket closed before its ending". The machine's model, not
    # proxai: turn 1's client read nothing for client_write, so the socket was cut (it
    # cannot hold a turn for later), and turn 2, queued behind it and never started,
    # went with it. The machine now expects that.
    with machine(Start(WireApi.RESPONSES, WireApi.RESPONSES, socket=True, tools=2)) as step:
        step("time_reaches_a_deadline", offset=-0.25)
        step("client_sends_the_next_request")
        step("client_sends_the_next_request")
        step("upstream_sends_its_head")
        step("upstream_sends_several_events", count=2)
        step("upstream_sends_several_events", count=13)
        state = step.state  # type: ignore[attr-defined]
    # (the teardown ran the invariants once more, as the machine's does)
    first, queued = state.world.replies[1:]
    assert first.outcome is not None and first.outcome.kind is OutcomeKind.CLIENT_STALLED
    assert queued.ending == ("gone", None, None) and queued.dropped
