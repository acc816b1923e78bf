"""Every benchmark in one run, then docs/bench.md and docs/bench.png.

    .venv/bin/python -m bench.run_all [--reps 3] [--quick] [--only perevent profile ...]
        [--render-to DIR]

Runs, each repeated ``--reps`` times with targets interleaved and medians reported:

- ``perevent``: the per-event regime (issue 16): one upstream write per event, CPU per
  event and per stream, added TTFB, RSS per held stream, byte checks;
- ``profile``: py-spy on proxai in that regime, pass-through and translating;
- the one-read figures (issue 7): ``throughput``, ``longstream``, ``scaling``, ``stall``
  and ``floor`` (its one-read throughput part);
- ``websocket``: the Responses WebSocket (issue 22): CPU per event over a socket
  against SSE, the second turn's time to first event, py-spy on both;
- ``state``: conversation state (issue 23): CPU per event and per stream with
  ``store: false``, ``store: true`` (memory and Redis) and no state at all (``main``),
  a ``previous_response_id`` turn's time to first byte on both backends, py-spy.
- ``telemetry``: CPU per stream and per event with ``[telemetry]`` on (sampling 1.0)
  against off, pass-through and translating (issue 26);
- ``limits``: ``[limits]`` off, on the memory backend and on Redis: added TTFB, CPU per
  stream, Redis's CPU, and one admission call layer by layer (issues 24 and 34).
- ``counts``: instructions per event and per stream under callgrind (``bench/sse_counts.py``)
  for proxai, the stock relay and the shaped relay: counts, not times, which no other
  work on the machine moves (issue 34).

Every cell is watched for other work on the machine (``bench/contention.py``) and
rerun, at most twice, if something else used more than 5 % of a core; docs/bench.md
says at its top whether any cell was contended all the same.

Raw results go to bench/results/*.json (one file per bench plus all.json), then
docs/bench.md and docs/bench.png are regenerated from them. ``--only`` reruns some
benches and keeps the others' last results. ``--quick`` is a smoke test (short runs,
each cell run once even if contended): nothing is rendered, or, with ``--render-to
DIR``, bench.md and bench.png go into DIR (never docs/), from the quick results merged
over the last ones (all.json, else each bench's own file). The whole run takes about
36 minutes on an idle 2-core machine (``state`` about 8 of them, ``counts`` about 9,
``limits`` about 2);
on a busy one contended cells run up to three times.
The older paced-latency and memory benches (``bench/latency.py``, ``bench/memory.py``
and the same parts of ``bench/floor.py``) still run on their own; the per-event bench
measures both in its regime.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    contention,
    floor,
    limits,
    longstream,
    perevent,
    pyspy,
    scaling,
    sse_counts,
    stall,
    state,
    telemetry,
    throughput,
    websocket,
)
from bench.common import RESULTS, ROOT, have_tools, loadavg, log, machine, pin_driver, save

BENCHES = [
    "perevent",
    "profile",
    "throughput",
    "longstream",
    "scaling",
    "stall",
    "floor",
    "websocket",
    "state",
    "telemetry",
    "limits",
    "counts",
]


def profile(seconds: int) -> dict[str, Any]:
    """py-spy on pass-through and translating proxai, paced, c=4."""
    RESULTS.mkdir(exist_ok=True)
    out: dict[str, Any] = {}
    for key, translating in (("responses", False), ("translating", True)):
        raw = RESULTS / f"pyspy-{key}.txt"
        out[key] = pyspy.paced(4, seconds, 250, translating, raw)
        log("profile", key, [(r["part"], round(r["per_event_us"], 1)) for r in out[key]["parts"]])
    return out


def plan(reps: int, quick: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    if quick:
        return {
            "perevent": perevent.quick,
            "profile": lambda: profile(2),
            "throughput": lambda: throughput.run(1, 1, [1, 16]),
            "longstream": lambda: longstream.run(1, 20_000),
            "scaling": lambda: scaling.run(1, 1, [64]),
            "stall": lambda: stall.run(1, 5.0),
            "floor": lambda: {"throughput": floor.throughput(1, 1, [1, 16])},
            "websocket": websocket.quick,
            "state": state.quick,
            "telemetry": lambda: telemetry.run(1, (4,)),
            "limits": limits.quick,
            "counts": lambda: sse_counts.run(1, 2),
        }
    return {
        "perevent": lambda: perevent.run(reps),
        "profile": lambda: profile(8),
        "throughput": lambda: throughput.run(reps, 3, [1, 16, 64]),
        "longstream": lambda: longstream.run(reps, 200_000),
        "scaling": lambda: scaling.run(reps, 3, [16, 64]),
        # every stream runs at once; the client outlasts nginx's 60 s proxy_read_timeout
        "stall": lambda: stall.run(reps, 75.0),
        "floor": lambda: {"throughput": floor.throughput(reps, 3, [1, 16, 64])},
        "websocket": lambda: websocket.run(max(reps, 5)),
        "state": lambda: state.run(max(reps, 5)),
        "telemetry": lambda: telemetry.run(reps),
        "limits": lambda: limits.run(reps, 200, [1, 16]),
        "counts": lambda: sse_counts.run(2, 6),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=BENCHES, default=BENCHES)
    parser.add_argument(
        "--render-to", type=Path, default=None, help="with --quick: render bench.md here"
    )
    args = parser.parse_args()
    tools = ["nginx", "wrk", "taskset", str(ROOT / ".venv" / "bin" / "py-spy")]
    if "counts" in args.only:
        tools += ["valgrind", "callgrind_control"]
    if {"state", "limits"} & set(args.only):
        tools.append("redis-server")
    if not have_tools(*tools):
        return 2
    pin_driver()
    if args.quick:  # a smoke test's figures are no results: contended cells run once
        contention.ATTEMPTS = 1
    path = RESULTS / "all.json"
    everything: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for stale in set(everything) - {*BENCHES, "machine", "reps"}:
        del everything[stale]  # benches no longer in the run (issue 7's latency, memory)
    everything["machine"] = machine()
    everything["reps"] = args.reps
    started = time.monotonic()
    for name, bench in plan(args.reps, args.quick).items():
        if name not in args.only:
            continue
        log(f"== {name}")
        began, load_before = time.monotonic(), loadavg()
        result = bench()
        result["wall_s"] = time.monotonic() - began
        result["loadavg"] = [load_before, loadavg()]
        # As saved: the report reads JSON (its keys are text, where a bench's are ints).
        everything[name] = json.loads(save(name, result).read_text())
    log(f"all benches: {time.monotonic() - started:.0f} s")
    from bench import chart, report

    if args.quick:
        if args.render_to is None:
            log("quick run: nothing rendered")
            return 0
        for name in set(BENCHES) - set(everything):  # not in all.json: its own last file
            last = RESULTS / f"{name}.json"
            if last.exists():
                everything[name] = json.loads(last.read_text())
        args.render_to.mkdir(parents=True, exist_ok=True)
        chart.draw(everything, args.render_to / "bench.png")
        report.write(everything, args.render_to / "bench.md")
        log(f"quick run: rendered into {args.render_to} (not docs/)")
        return 0
    save("all", everything)
    chart.draw(everything)
    report.write(everything)
    log("wrote docs/bench.md and docs/bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
