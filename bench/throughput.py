"""Throughput: streams per proxy core-second, direct vs proxai vs nginx.

    .venv/bin/python -m bench.throughput [--reps 3] [--seconds 4] [--concurrency 1 16 64]
        [--targets proxai]

A fast upstream (nginx serving a pre-rendered 40-delta Responses stream from a file,
so it is never the bottleneck; its CPU share is reported) serves POST /v1/responses.
wrk (with a Lua POST script) drives, in turn: the upstream directly, proxai in front
of it, and nginx as a plain reverse proxy (proxy_buffering off, HTTP/1.1 keep-alive
upstream). Each proxy runs pinned to core 1 and its CPU time is read from /proc, so the
figure is streams per proxy core-second; wrk and the upstream share core 0. Each
measurement is repeated ``--reps`` times (targets interleaved) and the medians are
reported. Each run is watched for other work on the machine and repeated if there was
some (``bench.contention.quiet``). Needs nginx and wrk (make bench installs them) and
Linux.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import (
    DRIVER_CORE,
    Row,
    Target,
    cpu_seconds,
    free_port,
    have_tools,
    log,
    median,
    nginx_static,
    pin_driver,
    save,
    stop,
    targets,
    text_stream,
    tree,
    wait_port,
    workdir,
)
from bench.contention import quiet

LUA = (
    'wrk.method = "POST"\n'
    'wrk.body = \'{"model":"m","stream":true,"input":"hi"}\'\n'
    'wrk.headers["Content-Type"] = "application/json"\n'
)


def wrk(port: int, connections: int, seconds: float, script: Path) -> dict[str, float]:
    result = subprocess.run(
        [
            "taskset",
            "-c",
            str(DRIVER_CORE),
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/v1/responses",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    text = result.stdout
    if os.environ.get("BENCH_DEBUG"):
        print(text, file=sys.stderr)
    requests = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", text)
    if requests is None:
        raise RuntimeError(f"unexpected wrk output:\n{text}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket_errors = re.search(r"Socket errors: (.*)", text)

    def ms(q: str) -> float:
        match = re.search(rf"{q}%\s+([\d.]+)(us|ms|s)", text)
        if match is None:
            return float("nan")
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {
        "requests": int(requests.group(1)),
        "errors": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",  # type: ignore[dict-item]
        "p50_ms": ms("50"),
        "p99_ms": ms("99"),
    }


def measure(
    target: Target,
    connections: int,
    seconds: int,
    script: Path,
    upstream_pids: Sequence[int],
) -> Row:
    """One wrk run against ``target``: streams/s, proxy CPU, upstream CPU share."""
    pids = target.pids()

    def measured() -> tuple[dict[str, float], float, float]:
        before = cpu_seconds(pids) if pids else 0.0
        up_before = cpu_seconds(upstream_pids)
        figures = wrk(target.port, connections, seconds, script)
        cpu = (cpu_seconds(pids) - before) if pids else float("nan")
        return figures, cpu, cpu_seconds(upstream_pids) - up_before

    (figures, cpu, upstream_cpu), seen = quiet(
        measured, f"{target.name} c={connections} {seconds} s (one read)"
    )
    return {
        "target": target.name,
        "concurrency": connections,
        **figures,
        "streams_per_s": figures["requests"] / seconds,
        "proxy_cpu_s": cpu,
        "proxy_cpu_share": cpu / seconds,
        "streams_per_core_s": figures["requests"] / cpu if cpu else float("nan"),
        "upstream_cpu_share": upstream_cpu / seconds,
        **seen.fields(),
    }


@contextmanager
def fast_upstream() -> Iterator[tuple[int, list[int], Path, Path]]:
    """nginx serving the 40-delta stream on core 0: (port, pids, lua script, workdir)."""
    with workdir() as wd:
        (wd / "stream.sse").write_bytes(b"".join(text_stream(40)))
        script = wd / "post.lua"
        script.write_text(LUA)
        up = free_port()
        process = nginx_static(wd, "up", up, wd / "stream.sse")
        try:
            wait_port(up)
            yield up, tree(process.pid), script, wd
        finally:
            stop([process])


def summarize(raw: list[Row], keys: Sequence[str] = ("target", "concurrency")) -> list[Row]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in raw:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = []
    for group, rows in groups.items():
        summary: Row = dict(zip(keys, group, strict=True))
        summary["reps"] = len(rows)
        for field in (
            "streams_per_s",
            "streams_per_core_s",
            "proxy_cpu_share",
            "upstream_cpu_share",
            "p50_ms",
            "p99_ms",
        ):
            summary[field] = median([r[field] for r in rows])
        summary["errors"] = sum(r["errors"] for r in rows)
        out.append(summary)
    return out


def run(
    reps: int, seconds: int, concurrency: list[int], only: Sequence[str] = ()
) -> dict[str, Any]:
    raw: list[Row] = []
    with fast_upstream() as (up, upstream_pids, script, _), targets(up) as all_targets:
        if only:
            all_targets = [t for t in all_targets if t.name in only]
        for target in all_targets:
            subprocess.run(  # warm up
                [
                    "wrk",
                    "-t1",
                    "-c4",
                    "-d1s",
                    "-s",
                    str(script),
                    f"http://127.0.0.1:{target.port}/",
                ],
                capture_output=True,
                check=True,
            )
        for rep in range(reps):
            for connections in concurrency:
                for target in all_targets:
                    row = {**measure(target, connections, seconds, script, upstream_pids)}
                    row["rep"] = rep
                    log("throughput", {k: _round(v) for k, v in row.items()})
                    raw.append(row)
    return {"raw": raw, "summary": summarize(raw), "seconds": seconds}


def _round(value: object) -> object:
    return round(value, 3) if isinstance(value, float) else value


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--targets",
        nargs="+",
        choices=["direct", "nginx", "proxai"],
        default=[],
        help="measure only these targets (default: all three)",
    )
    args = parser.parse_args()
    if not have_tools("nginx", "wrk", "taskset"):
        return 2
    pin_driver()
    result = run(args.reps, args.seconds, args.concurrency, args.targets)
    save("throughput", result)
    for row in result["summary"]:
        print({k: _round(v) for k, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
