"""A same-run A/B of two proxai checkouts in the per-event regime (for judging a lever).

    PROXAI_B=/path/to/other/checkout .venv/bin/python -m bench.ab [--reps 5] [--c 1 4]
        [--translated]

``proxai`` is this checkout, ``proxai-b`` the other one (its source on ``sys.path``),
``stock-relay`` the stack's floor; every repetition runs each at 20 and 80 paced deltas,
interleaved, and prints the medians of the CPU per event (marginal) and per stream
(fixed), and B's ratio to A. Issue 16 keeps a lever only if this shows it.
``--translated``: A and B translate (a Responses client over a Chat upstream) instead
of passing the stream through.
"""

from __future__ import annotations

import argparse
import statistics

from . import memory, streams
from .common import post_request
from .perevent import STOCK, Variant, cell, event_upstream, lanes

NAMES = ("proxai", "proxai-b", STOCK)
TRANSLATED = ("proxai-translating", "proxai-b-translating", STOCK)
SHORT, LONG = 20, 80


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--c", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--mode", default="paced", choices=["paced", "unpaced"])
    parser.add_argument("--memory", type=int, default=0, help="also RSS per N held streams")
    parser.add_argument("--translated", action="store_true", help="A and B translate")
    args = parser.parse_args()
    names = TRANSLATED if args.translated else NAMES
    a, b = names[0], names[1]
    if args.memory:
        held(args.memory, args.reps)
    process, upstream = event_upstream()
    marginal: dict[tuple[str, int], list[float]] = {}
    fixed: dict[tuple[str, int], list[float]] = {}
    contended = cells = 0
    try:
        with lanes(names, upstream) as found:
            for lane in found:
                cell(lane, args.mode, 4, 2, -1)  # warm up
            for rep in range(args.reps):
                for c in args.c:
                    for lane in found:
                        rows = [cell(lane, args.mode, c, n, rep) for n in (SHORT, LONG)]
                        contended += sum(1 for row in rows if row["contended"])
                        cells += len(rows)
                        short, long = (row["cpu_per_stream_us"] for row in rows)
                        per_event = (long - short) / (LONG - SHORT)
                        marginal.setdefault((lane.name, c), []).append(per_event)
                        fixed.setdefault((lane.name, c), []).append(short - SHORT * per_event)
    finally:
        process.kill()
    if contended:
        print(f"CONTENDED: {contended} of {cells} cells ran while other work used the CPU")
    else:
        print(f"all {cells} cells quiet (other work under 5 % of a core)")
    for c in args.c:
        m = {n: statistics.median(marginal[(n, c)]) for n in names}
        f = {n: statistics.median(fixed[(n, c)]) for n in names}
        print(
            f"c={c}: per event A {m[a]:.1f} µs, B {m[b]:.1f} µs "
            f"(B/A {m[b] / m[a]:.3f}), stock {m[STOCK]:.1f} µs; "
            f"per stream A {f[a]:.0f}, B {f[b]:.0f} "
            f"(B/A {f[b] / f[a]:.3f}), stock {f[STOCK]:.0f}"
        )


def held(count: int, reps: int) -> None:
    """RSS per held stream of A, B and the stock relay (fresh processes per repetition)."""
    per: dict[str, list[float]] = {}
    process, upstream = event_upstream()
    try:
        for _ in range(reps):
            with lanes(NAMES, upstream) as found:
                for lane in found:
                    body = streams.request_body(Variant(hold=True), "responses")
                    request = post_request(lane.target.port, lane.path, body)
                    row = memory.measure(lane.target, count, request)
                    per.setdefault(lane.name, []).append(row["kb_per_stream"])
    finally:
        process.kill()
    kib = {n: statistics.median(v) for n, v in per.items()}
    print(
        f"RSS per held stream: A {kib['proxai']:.1f} KiB, B {kib['proxai-b']:.1f} KiB, "
        f"stock {kib[STOCK]:.1f} KiB"
    )


if __name__ == "__main__":
    main()
