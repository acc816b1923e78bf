"""Latency: added time to first byte and to last byte on a paced stream.

    .venv/bin/python -m bench.latency [--reps 3] [--requests 100] [--concurrency 1 16]

The upstream (bench/upstream.py ``paced``, Python, core 0) sends a Responses stream
whose 20 deltas come 5 ms apart. A raw asyncio client (core 0) measures, per request,
the time to the first response byte (TTFB), to the first body byte (first event) and
to the last byte, through direct / nginx / proxai (the proxies pinned to core 1).
The upstream's own timing is the ``direct`` row; "added" is a proxy's percentile
minus direct's, per repetition, then the median over repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import (
    Row,
    Target,
    connect,
    exchange,
    log,
    median,
    pin_driver,
    post_request,
    python_upstream,
    save,
    targets,
)

DELTAS = 20
INTERVAL = 0.005


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


async def measure(port: int, concurrency: int, requests: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ttfb": [], "first_event": [], "last_byte": []}
    request = post_request(port)
    per_connection = max(1, requests // concurrency)
    failures = 0

    async def one_connection() -> None:
        nonlocal failures
        reader, writer = await connect(port)
        try:
            for _ in range(2):  # warm-up
                await exchange(reader, writer, request, keep_body=False)
            for _ in range(per_connection):
                response = await exchange(reader, writer, request, keep_body=False)
                if not response.complete or response.status != 200:
                    failures += 1
                    return
                samples["ttfb"].append(response.first_byte * 1000)
                samples["first_event"].append(response.first_event * 1000)
                samples["last_byte"].append(response.last_byte * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(one_connection() for _ in range(concurrency)))
    if failures:
        raise RuntimeError(f"{failures} connections failed on port {port}")
    return samples


def run(reps: int, requests: int, concurrency: list[int]) -> dict[str, Any]:
    raw: list[Row] = []
    with (
        python_upstream("paced", deltas=DELTAS, interval=INTERVAL) as (up, _),
        targets(up) as all_targets,
    ):
        for rep in range(reps):
            for c in concurrency:
                for target in all_targets:
                    raw.append(one(target, c, requests, rep))
    return {"raw": raw, "summary": summarize(raw, concurrency)}


def one(target: Target, c: int, requests: int, rep: int) -> Row:
    # At c=1 fewer requests keep the run short; p99 then rests on about 1 % of them.
    n = requests if c > 1 else max(50, requests // 4)
    samples = asyncio.run(measure(target.port, c, n))
    row: Row = {"target": target.name, "concurrency": c, "rep": rep, "n": len(samples["ttfb"])}
    for key, values in samples.items():
        row[f"{key}_p50_ms"] = percentile(values, 50)
        row[f"{key}_p99_ms"] = percentile(values, 99)
    log("latency", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return row


def summarize(
    raw: list[Row], concurrency: list[int], names: Sequence[str] = ("direct", "nginx", "proxai")
) -> list[Row]:
    out: list[Row] = []
    reps = sorted({row["rep"] for row in raw})
    for c in concurrency:
        for name in names:
            rows = [r for r in raw if r["target"] == name and r["concurrency"] == c]
            if not rows:
                continue
            summary: Row = {"target": name, "concurrency": c, "reps": len(rows)}
            for key in ("ttfb", "first_event", "last_byte"):
                for p in ("p50", "p99"):
                    field = f"{key}_{p}_ms"
                    summary[field] = median([r[field] for r in rows])
                    added = []
                    for rep in reps:
                        mine = [r[field] for r in rows if r["rep"] == rep]
                        base = [
                            r[field]
                            for r in raw
                            if r["target"] == "direct" and r["concurrency"] == c and r["rep"] == rep
                        ]
                        if mine and base:
                            added.append(mine[0] - base[0])
                    summary[f"added_{field}"] = median(added)
            out.append(summary)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.requests, args.concurrency)
    save("latency", result)
    for row in result["summary"]:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
