"""What ``[limits]`` costs (issue 24): added time to first byte and CPU per stream.

    .venv/bin/python -m bench.limits [--reps 3] [--requests 200] [--concurrency 1 16]

One paced upstream (``bench/upstream.py paced``: 20 deltas 5 ms apart, core 0), one
``redis-server`` (core 0, nothing on disk) and three proxai processes pinned to the
proxy core, measured one after the other in each repetition of the same run:

- ``none``: no ``[limits]``;
- ``memory``: ``[limits]`` on the memory backend;
- ``redis``: the same limits on the Redis backend (one script on admission, one at
  the end, lease renewals batched every ``slot_lease / 3``).

The limits are every kind at once, set high enough that nothing is refused: a ``"*"``
entry with requests and tokens per minute and streams per key, and the fleet's
streams, so every request takes a slot, is logged in the request window and is
charged its tokens. The raw asyncio client (core 0) reads each stream to its end;
TTFB is to the response head. Added TTFB is a target's p50 minus ``none``'s, per
repetition, then the median; CPU per stream is proxai's own CPU (``schedstat``) over
a cell divided by its streams, and Redis's CPU is reported beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from typing import Any

from bench.common import (
    DRIVER_CORE,
    Row,
    cpu_ns,
    free_port,
    log,
    machine,
    median,
    pin_driver,
    proxai,
    python_upstream,
    save,
    stop,
    taskset,
    tree,
    wait_port,
    workdir,
)
from bench.contention import quiet
from bench.latency import measure, percentile

DELTAS = 20
INTERVAL = 0.005
LIMITS = """[limits]
fleet_max_concurrent_streams = 100000
[[limits.keys]]
key = "*"
requests_per_minute = 100000000
tokens_per_minute = 1000000000
max_concurrent_streams = 100000
"""
TARGETS = ("none", "memory", "redis")


def redis_server(wd: Any, port: int) -> subprocess.Popen[bytes]:
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(wd), "--loglevel", "warning"]
    return subprocess.Popen(
        taskset(str(DRIVER_CORE), argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def one(name: str, port: int, pids: list[int], redis: int, c: int, n: int, rep: int) -> Row:
    def measured() -> tuple[dict[str, list[float]], int, int]:
        before, redis_before = cpu_ns(pids), cpu_ns([redis])
        samples = asyncio.run(measure(port, c, n))
        return samples, cpu_ns(pids) - before, cpu_ns([redis]) - redis_before

    (samples, cpu, redis_cpu), seen = quiet(measured, f"limits {name} c={c}")
    streams = len(samples["ttfb"]) + 2 * c  # the warm-ups count too
    row: Row = {
        "target": name,
        "concurrency": c,
        "rep": rep,
        "n": len(samples["ttfb"]),
        "ttfb_p50_ms": percentile(samples["ttfb"], 50),
        "ttfb_p99_ms": percentile(samples["ttfb"], 99),
        "last_byte_p50_ms": percentile(samples["last_byte"], 50),
        "cpu_us_per_stream": cpu / 1000 / streams,
        "redis_cpu_us_per_stream": redis_cpu / 1000 / streams,
        "contended": seen.contended,
        "other_core": round(seen.other_core, 3),
    }
    log("limits", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return row


def run(reps: int, requests: int, concurrency: list[int]) -> dict[str, Any]:
    raw: list[Row] = []
    with (
        python_upstream("paced", deltas=DELTAS, interval=INTERVAL) as (up, _),
        workdir() as wd,
    ):
        rport = free_port()
        redis = redis_server(wd, rport)
        ports = {name: free_port() for name in TARGETS}
        configs = {
            "none": "",
            "memory": LIMITS,
            "redis": f'[state]\nbackend = "redis"\nurl = "redis://127.0.0.1:{rport}/0"\n' + LIMITS,
        }
        # This checkout's proxai, whatever the venv has installed.
        here = (sys.executable, "-m", "proxai")
        processes = [
            proxai(wd, ports[n], up, extra=configs[n].splitlines(), argv_prefix=here)
            for n in TARGETS
        ]
        try:
            for port in (rport, *ports.values()):
                wait_port(port)
            pids = {n: tree(p.pid) for n, p in zip(TARGETS, processes, strict=True)}
            for rep in range(reps):
                for c in concurrency:
                    n = requests if c > 1 else max(50, requests // 4)
                    for name in TARGETS:
                        raw.append(one(name, ports[name], pids[name], redis.pid, c, n, rep))
        finally:
            stop([*processes, redis])
    return {"machine": machine(), "raw": raw, "summary": summarize(raw, concurrency)}


def summarize(raw: list[Row], concurrency: list[int]) -> list[Row]:
    out: list[Row] = []
    reps = sorted({r["rep"] for r in raw})
    for c in concurrency:
        base = {r["rep"]: r for r in raw if r["target"] == "none" and r["concurrency"] == c}
        for name in TARGETS:
            rows = [r for r in raw if r["target"] == name and r["concurrency"] == c]
            mine = {r["rep"]: r for r in rows}
            summary: Row = {"target": name, "concurrency": c, "reps": len(rows)}
            for field in ("ttfb_p50_ms", "ttfb_p99_ms", "cpu_us_per_stream"):
                summary[field] = median([r[field] for r in rows])
            summary["redis_cpu_us_per_stream"] = median(
                [r["redis_cpu_us_per_stream"] for r in rows]
            )
            summary["added_ttfb_p50_ms"] = median(
                [mine[k]["ttfb_p50_ms"] - base[k]["ttfb_p50_ms"] for k in reps if k in mine]
            )
            summary["cpu_ratio"] = median(
                [
                    mine[k]["cpu_us_per_stream"] / base[k]["cpu_us_per_stream"]
                    for k in reps
                    if k in mine
                ]
            )
            out.append(summary)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.requests, args.concurrency)
    save("limits", result)
    for row in result["summary"]:
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
