"""Scaling: proxai's throughput with ``--workers 1`` and ``--workers 2``.

    .venv/bin/python -m bench.scaling [--reps 3] [--seconds 4] [--concurrency 64]

Same fast upstream and wrk load as bench/throughput.py (40-delta stream). One worker
runs pinned to core 1 as in the throughput bench; two workers run on both cores (the
machine has two), so they share core 0 with wrk and the upstream: streams/s is the
figure to compare, and streams per proxy core-second shows what a second worker costs.
If ``proxai serve`` has no ``--workers`` option in this checkout, the bench is skipped
with a note.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.common import (
    PROXY_CORE,
    Row,
    Target,
    free_port,
    log,
    pin_driver,
    proxai,
    proxai_has_workers,
    save,
    stop,
    wait_port,
)
from bench.throughput import _round, fast_upstream, measure, summarize

SKIP_NOTE = (
    "`proxai serve` has no `--workers` option in this checkout (it is being added on "
    "main), so scaling was not measured; rerun `make bench` once it is merged."
)


def run(reps: int, seconds: int, concurrency: list[int]) -> dict[str, Any]:
    if not proxai_has_workers():
        log("scaling: skipped:", SKIP_NOTE)
        return {"skipped": SKIP_NOTE, "raw": [], "summary": []}
    raw: list[Row] = []
    layouts = {1: str(PROXY_CORE), 2: "0,1"}
    with fast_upstream() as (up, upstream_pids, script, wd):
        for workers, cores in layouts.items():
            port = free_port()
            process = proxai(wd, port, up, workers=workers, cores=cores)
            try:
                wait_port(port)
                target = Target(f"proxai --workers {workers}", port, process.pid)
                measure(target, 4, 1, script, upstream_pids)  # warm up
                for rep in range(reps):
                    for connections in concurrency:
                        row = measure(target, connections, seconds, script, upstream_pids)
                        row.update(workers=workers, cores=cores, rep=rep)
                        log("scaling", {k: _round(v) for k, v in row.items()})
                        raw.append(row)
            finally:
                stop([process])
    summary = summarize(raw, ("target", "workers", "cores", "concurrency"))
    return {"raw": raw, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64])
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.seconds, args.concurrency)
    save("scaling", result)
    for row in result["summary"]:
        print({k: _round(v) for k, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
