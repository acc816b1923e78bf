"""Every benchmark of issue 7 in one run, then docs/bench.md and docs/bench.png.

    .venv/bin/python -m bench.run_all [--reps 3] [--quick] [--only throughput latency ...]

Runs throughput, latency, memory, longstream, scaling, stall and floor (see each
module's docstring), each repeated ``--reps`` times with medians reported, writes raw results
to bench/results/*.json (one file per bench plus all.json) and regenerates
docs/bench.md and docs/bench.png from them. ``--only`` reruns some benches and keeps
the others' last results. ``--quick`` is a smoke test (short runs, nothing rendered).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import floor, latency, longstream, memory, scaling, stall, throughput
from bench.common import RESULTS, have_tools, loadavg, log, machine, pin_driver, save

BENCHES = ["throughput", "latency", "memory", "longstream", "scaling", "stall", "floor"]


def plan(reps: int, quick: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    if quick:
        return {
            "throughput": lambda: throughput.run(1, 1, [1, 16]),
            "latency": lambda: latency.run(1, 32, [1, 16]),
            "memory": lambda: memory.run(1, 100),
            "longstream": lambda: longstream.run(1, 20_000),
            "scaling": lambda: scaling.run(1, 1, [64]),
            "stall": lambda: stall.run(1, 5.0),
            "floor": lambda: floor.run(1, 1, [1, 16], 100, 32),
        }
    return {
        "throughput": lambda: throughput.run(reps, 4, [1, 16, 64]),
        "latency": lambda: latency.run(reps, 400, [1, 16]),
        "memory": lambda: memory.run(reps, 1000),
        "longstream": lambda: longstream.run(reps, 200_000),
        "scaling": lambda: scaling.run(reps, 4, [16, 64]),
        # every stream runs at once; the client outlasts nginx's 60 s proxy_read_timeout
        "stall": lambda: stall.run(reps, 75.0),
        "floor": lambda: floor.run(reps, 4, [1, 16, 64], 1000, 400),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=BENCHES, default=BENCHES)
    args = parser.parse_args()
    if not have_tools("nginx", "wrk", "taskset"):
        return 2
    pin_driver()
    path = RESULTS / "all.json"
    everything: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    everything["machine"] = machine()
    everything["reps"] = args.reps
    for name, bench in plan(args.reps, args.quick).items():
        if name not in args.only:
            continue
        log(f"== {name}")
        started, load_before = time.monotonic(), loadavg()
        result = bench()
        result["wall_s"] = time.monotonic() - started
        result["loadavg"] = [load_before, loadavg()]
        save(name, result)
        everything[name] = result
    if args.quick:
        log("quick run: nothing rendered")
        return 0
    save("all", everything)
    from bench import chart, report

    chart.draw(everything)
    report.write(everything)
    log("wrote docs/bench.md and docs/bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
