"""Profile ``proxai serve`` with py-spy, in the per-event regime or the one-read one.

    .venv/bin/python -m bench.pyspy [--regime paced|one-read] [--concurrency 4]
        [--seconds 8] [--translating] [--out FILE]

``paced`` (the default, issue 16's regime): the per-event bench's upstream
(``bench/event_upstream.py``, one write per event, 2 ms before each delta), one proxai
pinned to the proxy core and the bench's asyncio client at ``--concurrency`` streams,
recorded with py-spy (``.venv/bin/pip install py-spy``) twice: with 20-delta and
80-delta streams. Each sample goes to a part of the work by the innermost frame that
belongs to one (:data:`PARTS`: the code that called trio, h11 or attrs is charged for
them). Scaled by the CPU time measured over the same run (``/proc``), the two lengths
give each part's CPU per event (the difference over 60 deltas) and per stream (the
rest), printed and written as JSON next to the raw output; each recording is watched for
other work on the machine (``bench.contention.watch``: marked, not rerun).
``--translating``: proxai over an ``openai_chat`` upstream.

``one-read``: the throughput bench's upstream (nginx, the pre-rendered 40-delta
stream) and wrk; prints own time by package and inclusive time of proxai's functions.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import streams
from bench.common import (
    ROOT,
    connect,
    cpu_ns,
    exchange,
    free_port,
    pin_driver,
    post_request,
    proxai,
    stop,
    wait_port,
    workdir,
)
from bench.contention import watch
from bench.streams import Variant
from bench.throughput import fast_upstream, wrk
from bench.traced import in_task

#: Parts of proxai's work, by a fragment of a frame's file (first match wins); a
#: sample belongs to the innermost frame that matches one.
PARTS = (
    ("/proxai/relay/", "relay: tasks, channels, scopes, bookkeeping"),
    ("/proxai/protocols/", "observer"),
    ("/proxai/translate/", "translator"),
    ("/proxai/wire/", "SSE framer"),
    ("/proxai/ops/", "request log and metrics"),
    ("/proxai/upstream/", "proxai's upstream client (request, pool choice)"),
    ("/proxai/", "app: admission, projection, routing, outcome"),
    ("/httpcore/", "upstream read path: httpx, httpcore, h11"),
    ("/httpx/", "upstream read path: httpx, httpcore, h11"),
    ("/hypercorn/", "hypercorn: client side (h11 parse, send)"),
)
RUN_LOOP = "trio's run loop (scheduling, epoll), outside any task"

PACKAGES = (
    "proxai",
    "trio",
    "httpcore",
    "httpx",
    "h11",
    "hypercorn",
    "orjson",
    "attrs",
    "contextlib",
    "typing",
    "logging",
    "socket",
)


def part(frames: list[str], table: Sequence[tuple[str, str]] = PARTS) -> str:
    """The part a sample belongs to; ``frames`` root first, as py-spy writes them
    (``table``: the parts, :data:`PARTS` or a bench's finer one)."""
    paths = [frame.rsplit("(", 1)[-1] for frame in frames]
    task = in_task(paths)
    for path in reversed(task):
        for fragment, name in table:
            if fragment in path:
                return name
    return RUN_LOOP if not task else "other"


def parts(
    collapsed: Path, table: Sequence[tuple[str, str]] = PARTS
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Samples per part, and per part by the package of the innermost frame."""
    totals: collections.Counter[str] = collections.Counter()
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = stack.split(";")
        name = part(frames, table)
        totals[name] += int(count_text)
        leaves[name][package(frames[-1])] += int(count_text)
    return dict(totals), {k: dict(v) for k, v in leaves.items()}


def package(frame: str) -> str:
    # "func (path/to/module.py:123)"
    path = "/" + frame.rsplit("(", 1)[-1]
    for name in PACKAGES:
        if f"/{name}/" in path or f"/{name}.py" in path:
            return name
    if "<attrs generated" in frame:
        return "attrs"
    return "other"


def report(collapsed: Path, top: int = 40) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    own_fn: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        # "func (module.py:123)" -> "func (module.py)": functions, not lines
        frames = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";")]
        total += count
        own[package(frames[-1])] += count
        own_fn[frames[-1]] += count
        for frame in set(frames):
            if package(frame) == "proxai":
                inclusive[frame] += count
    print(f"{total} samples\n\nown time by package:")
    for name, count in own.most_common():
        print(f"  {name:12} {100 * count / total:5.1f} %")
    print("\nown time, top functions:")
    for name, count in own_fn.most_common(top):
        print(f"  {100 * count / total:5.1f} %  {name}")
    print("\nproxai functions, inclusive:")
    for name, count in inclusive.most_common(top):
        print(f"  {100 * count / total:5.1f} %  {name}")


async def _load(port: int, path: bytes, body: bytes, concurrency: int, seconds: float) -> int:
    """``concurrency`` connections streaming back to back for ``seconds``: streams done."""
    request = post_request(port, path, body)
    deadline = time.monotonic() + seconds
    done = 0

    async def one() -> None:
        nonlocal done
        reader, writer = await connect(port)
        try:
            while time.monotonic() < deadline:
                response = await exchange(reader, writer, request, keep_body=False)
                if not response.complete:
                    raise RuntimeError("a stream did not complete")
                done += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done


def record(pid: int, seconds: float, rate: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "py-spy"),
            "record",
            "--format",
            "raw",
            "--full-filenames",
            "--rate",
            str(rate),
            "--duration",
            str(seconds),
            "--pid",
            str(pid),
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def paced(
    concurrency: int, seconds: int, rate: int, translating: bool, out: Path
) -> dict[str, Any]:
    """Profiles at 20 and 80 deltas; CPU µs per event and per stream of each part."""
    from bench.perevent import PAUSE, event_upstream

    upstream_process, upstream = event_upstream()
    runs: dict[int, dict[str, Any]] = {}
    try:
        with workdir() as wd:
            port = free_port()
            protocol = "openai_chat" if translating else None
            process = proxai(wd, port, upstream, protocol=protocol, timeouts={"idle": 600.0})
            try:
                wait_port(port)
                for deltas in (20, 80):
                    body = streams.request_body(Variant(deltas, PAUSE), "responses")
                    path = b"/v1/responses"
                    asyncio.run(_load(port, path, body, concurrency, 1.0))  # warm up
                    raw = out.with_name(f"{out.stem}-{deltas}{out.suffix}")
                    spy = record(process.pid, seconds + 1, rate, raw)
                    time.sleep(0.5)
                    # Watched, not rerun: a profile is read for its shares, and a
                    # contended one is marked so that the report says so.
                    with watch() as seen:
                        cpu0 = cpu_ns([process.pid])
                        done = asyncio.run(_load(port, path, body, concurrency, seconds))
                        cpu = (cpu_ns([process.pid]) - cpu0) / 1e9
                    spy.wait()
                    totals, leaves = parts(raw)
                    runs[deltas] = {
                        "streams": done,
                        "cpu_s": cpu,
                        "samples": totals,
                        "leaves": leaves,
                        **seen.fields(),
                    }
            finally:
                stop([process])
    finally:
        stop([upstream_process])
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "translating": translating,
        "runs": runs,
        "parts": split(runs),
    }


def split(runs: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each part's CPU per stream at both lengths (its share of the samples times the
    CPU per stream), then per event (difference / 60) and per stream (the rest)."""
    per_stream: dict[int, dict[str, float]] = {}
    for deltas, run in runs.items():
        total = sum(run["samples"].values())
        cpu_us = run["cpu_s"] / run["streams"] * 1e6
        per_stream[deltas] = {k: v / total * cpu_us for k, v in run["samples"].items()}
    names = sorted(set(per_stream[20]) | set(per_stream[80]))
    out = []
    for name in names:
        short, long = per_stream[20].get(name, 0.0), per_stream[80].get(name, 0.0)
        marginal = (long - short) / 60
        out.append({"part": name, "per_event_us": marginal, "per_stream_us": short - 20 * marginal})
    return sorted(out, key=lambda r: -r["per_event_us"])


def show(result: dict[str, Any]) -> None:
    parts_ = result["parts"]
    event = sum(r["per_event_us"] for r in parts_)
    stream = sum(r["per_stream_us"] for r in parts_)
    for deltas, run in result["runs"].items():
        print(
            f"{deltas} deltas: {run['streams']} streams, {run['cpu_s']:.2f} s CPU, "
            f"{sum(run['samples'].values())} samples"
        )
    print(f"\n{'part':58} {'µs/event':>9} {'share':>6} {'µs/stream':>10} {'share':>6}")
    for r in parts_:
        print(
            f"{r['part']:58} {r['per_event_us']:9.1f} {100 * r['per_event_us'] / event:5.1f}% "
            f"{r['per_stream_us']:10.0f} {100 * r['per_stream_us'] / stream:5.1f}%"
        )
    print(f"{'total':58} {event:9.1f} {'':6} {stream:10.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regime", choices=["paced", "one-read"], default="paced")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--translating", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    pin_driver()
    if args.regime == "paced":
        name = "pyspy-translating" if args.translating else "pyspy-paced"
        out = args.out or ROOT / "bench" / "results" / f"{name}.txt"
        out.parent.mkdir(exist_ok=True)
        result = paced(args.concurrency or 4, args.seconds, args.rate, args.translating, out)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1))
        show(result)
        return 0
    out = args.out or ROOT / "bench" / "results" / "pyspy.txt"
    out.parent.mkdir(exist_ok=True)
    return one_read(args.concurrency or 16, args.seconds, args.rate, out)


def one_read(concurrency: int, seconds: int, rate: int, out: Path) -> int:
    with fast_upstream() as (up, _, script, _wd), workdir() as wd:
        port = free_port()
        process = proxai(wd, port, up)
        try:
            wait_port(port)
            wrk(port, 4, 1, script)  # warm up
            spy = subprocess.Popen(
                [
                    str(ROOT / ".venv" / "bin" / "py-spy"),
                    "record",
                    "--format",
                    "raw",
                    "--rate",
                    str(rate),
                    "--duration",
                    str(seconds + 1),
                    "--pid",
                    str(process.pid),
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            figures = wrk(port, concurrency, seconds, script)
            spy.wait()
        finally:
            stop([process])
    print(f"wrk: {figures['requests'] / seconds:.0f} streams/s (under py-spy)")
    report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
