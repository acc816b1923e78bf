"""bench/contention.py: a cell that shares the machine with other work is seen as such."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.contention import LIMIT, quiet, watch

#: Busy for the given seconds, in a process that is not the bench's (its parent, a
#: shell, exits at once: it belongs to init, as other work on the machine does).
OTHER = "{exe} -c 'import time; t = time.monotonic() + {s}\nwhile time.monotonic() < t: pass' &"


def test_other_work_during_a_cell_marks_it_contended() -> None:
    subprocess.run(["sh", "-c", OTHER.format(exe=sys.executable, s=0.8)], check=True)
    with watch() as seen:
        time.sleep(0.6)  # the cell: the other process is busy all along
    assert seen.contended and seen.other_core > 0.5 > LIMIT


def test_a_child_that_ends_during_the_cell_is_the_bench_own_work() -> None:
    # wrk, py-spy, a measuring subprocess: reaped inside the cell, so its CPU (at least
    # the 0.3 s it spins for, however loaded the machine) counts as the bench's.
    spin = "import time\nwhile time.process_time() < 0.3: pass"
    with watch() as seen:
        subprocess.run([sys.executable, "-c", spin], check=True)
    assert seen.own_s >= 0.3
    assert seen.fields() == {"contended": seen.contended, "other_core": round(seen.other_core, 3)}


def test_a_contended_cell_is_run_again_and_marked() -> None:
    runs = []

    def cell() -> int:
        runs.append(1)
        subprocess.run(["sh", "-c", OTHER.format(exe=sys.executable, s=0.5)], check=True)
        time.sleep(0.4)
        return len(runs)

    result, seen = quiet(cell, "a cell beside a busy process")
    assert result == len(runs) == 3 and seen.contended


def test_the_report_says_at_the_top_whether_any_cell_was_contended() -> None:
    from bench.report import contention_banner

    quiet_run = {"perevent": {"raw": [{"contended": False, "other_core": 0.0}] * 3}}
    assert contention_banner(quiet_run)[0].startswith("All 3 watched cells ran on a quiet")
    loaded = {
        "perevent": {"raw": [{"contended": False, "other_core": 0.0}]},
        "state": {"cpu": [{"contended": True, "other_core": 0.4}]},
    }
    assert contention_banner(loaded)[0].startswith("**CONTENDED: 1 of 2 cells")
    assert "0.40 of a core" in contention_banner(loaded)[0]
