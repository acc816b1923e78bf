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
