"""The no-hang machine across every start state (see tests/faults/stateful.py).

``make test`` runs a small, deterministic budget per start state; ``make
test-stateful`` the long profile (``PROXAI_STATEFUL_EXAMPLES``, new examples each run).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, register_random, settings
from hypothesis.stateful import run_state_machine_as_test

from proxai.policy import retry
from tests.faults.stateful import START_STATES, ProxaiMachine, Start

# The retry plan's jitter, drawn from hypothesis's seed: an example replays exactly.
register_random(retry._RNG)

EXAMPLES = int(os.environ.get("PROXAI_STATEFUL_EXAMPLES", "6"))
STEPS = int(os.environ.get("PROXAI_STATEFUL_STEPS", "30"))
#: PROXAI_STATEFUL_SHRINK=0 reports a failure as found (faster, while triaging).
PHASES = [
    p for p in Phase if p is not Phase.shrink or os.environ.get("PROXAI_STATEFUL_SHRINK") != "0"
]


@pytest.mark.parametrize("start", START_STATES, ids=[s.id for s in START_STATES])
def test_no_client_hangs_and_nothing_outlives_its_request(start: Start) -> None:
    machine = type(f"Machine_{start.id}", (ProxaiMachine,), {"start": start})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            phases=PHASES,
            suppress_health_check=list(HealthCheck),
        ),
    )
