"""Instructions per relayed event through the real server, counted (not timed).

    .venv/bin/python -m bench.sse_counts [--streams 3] [--deltas 20] [--pause 0.03]
    .venv/bin/python -m bench.sse_counts --targets proxai proxai-otel --streams 6
    .venv/bin/python -m bench.sse_counts --targets proxai --streams 6 --lane socket
    .venv/bin/python -m bench.sse_counts --targets proxai --streams 6 --protocol openai_chat \
        --store true

``--lane socket`` runs the streams as turns of one Responses WebSocket (proxai only);
``--protocol`` gives proxai's upstream that ``[upstream] protocol`` (``openai_chat``: a
Chat upstream, translated); ``--store`` sends ``store`` with each request (a stored
stream needs an upstream that keeps no state, such as ``openai_chat``).

``proxai serve`` runs under ``valgrind --tool=callgrind`` (instrumentation switched on
after start-up) in front of the per-event bench's upstream (``bench/event_upstream.py``).
One keep-alive connection runs ``streams`` Responses streams of ``deltas`` and then of
``2 * deltas`` paced deltas, each batch in its own window (counters zeroed, then dumped
with ``callgrind_control``); the difference over ``streams * deltas`` is one event's
instructions, the whole process's (the trio thread, hypercorn, proxai, the upstream
read). The pause is long (30 ms) because callgrind slows the server fifty-fold: every
event must still be its own read and its own send, as on an LLM upstream. Instruction
counts do not move with the machine's load, so a lever can be weighed on a busy machine
where the CPU benches cannot; ``bench.perevent`` on a quiet one gives the time.

``proxai-otel`` is proxai with ``[telemetry]`` on, every trace sampled, exporting to a
sink in this process (``bench.telemetry.sink``), so the exporter thread's encoding and
POSTs are in the counts (issue 34's telemetry target: on against ``proxai``, per
stream). No export runs on a timer: the batch processor sends one POST when a window's
``2 * streams`` spans are queued, and each window is dumped only once the sink has them
all, so every window counts its streams' spans and one POST (an upper bound of the
POST's share: a full batch carries 512 spans). The metrics are exported at shutdown
only, out of the windows (one export a minute is no stream's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, free_port, proxai, stop, wait_port, workdir
from bench.perevent import TIMEOUTS, event_upstream, telemetry_table
from bench.streams import Variant
from bench.telemetry import sink, spans_received
from bench.websocket import Lane

_TOTALS = re.compile(rb"^(?:totals|summary):\s*(\d+)", re.MULTILINE)


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def dumped(out: Path, before: set[Path], keep: Path | None) -> int:
    """Instructions in the dump that appeared since ``before`` (copied into ``keep``)."""
    for _ in range(600):
        new = set(out.parent.glob(out.name + "*")) - before
        for path in new:
            text = path.read_bytes()
            found = _TOTALS.search(text)
            if found:
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / path.name).write_bytes(text)
                return int(found.group(1))
        time.sleep(0.1)
    raise RuntimeError("no callgrind dump")


#: the floor apps (``bench/floor_apps.py``) a target name runs, in this process's way
FLOORS = {"stock-relay": "transport", "h11-relay": "h11relay", "shaped-relay": "shaped"}
#: proxai with ``[telemetry]`` on, every trace sampled (see the module's docstring)
OTEL = "proxai-otel"


def _otel_env(streams: int) -> dict[str, str]:
    """Exports of a whole window's spans, none on a timer."""
    return {
        "OTEL_BSP_SCHEDULE_DELAY": "3600000",
        "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": str(2 * streams),
    }


def server(
    target: str,
    wd: Path,
    out: Path,
    upstream: int,
    otel: tuple[str, int] | None = None,
    protocol: str | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """``target`` under callgrind, serving on a free port: (process, port); ``otel``: the
    sink's endpoint and the streams of a window, for ``proxai-otel``; ``protocol``: the
    upstream's, for proxai."""
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    port = free_port()
    if target in ("proxai", OTEL):
        prefix = [*valgrind, sys.executable, "-m", "proxai"]
        extra: list[str] = []
        env = None
        if target == OTEL:
            assert otel is not None
            extra, env = telemetry_table(otel[0]), _otel_env(otel[1])
        process = proxai(
            wd,
            port,
            upstream,
            timeouts=TIMEOUTS,
            protocol=protocol,
            argv_prefix=prefix,
            extra=extra,
            env=env,
        )
        return process, port
    serve = f"from bench.cprofiled import serve_floor; serve_floor({FLOORS[target]!r}, {port})"
    env = {**os.environ, "FLOOR_UPSTREAM": f"http://127.0.0.1:{upstream}"}
    process = subprocess.Popen(
        [*valgrind, sys.executable, "-c", serve],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, port


#: How long the sink may take to get a window's spans (callgrind is ~50 times slower).
_EXPORT_WAIT = 300.0


async def _spans_reach(count: int) -> None:
    """Wait until the sink has decoded ``count`` spans in all."""
    deadline = time.monotonic() + _EXPORT_WAIT
    while spans_received() < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sink has {spans_received()} spans of {count}")
        await asyncio.sleep(0.05)


def measure(
    target: str,
    streams: int,
    deltas: int,
    pause: float,
    keep: Path | None = None,
    *,
    lane: str = "sse",
    protocol: str | None = None,
    fields: dict[str, Any] | None = None,
) -> dict[str, object]:
    """Instructions per event and per stream of ``target`` (``lane``, ``protocol``,
    ``fields``: see the module's docstring)."""
    RESULTS.mkdir(exist_ok=True)
    upstream_process, upstream = event_upstream()
    totals: list[int] = []
    traced = target == OTEL
    try:
        with workdir() as wd, sink(count_spans=True) as endpoint:
            out = wd / "callgrind.out"
            process, port = server(target, wd, out, upstream, (endpoint, streams), protocol)
            pid = str(process.pid)
            try:
                wait_port(port, timeout=300)
                control("-i", "on", pid)

                async def run() -> list[str]:
                    connection = Lane(lane, port, fields)
                    # A translated stream's bytes are not the upstream's: checked for
                    # completeness only.
                    check = protocol is None
                    expected = spans_received()
                    async with connection:
                        # Warm up (with telemetry: one window's worth, one export).
                        for _ in range(streams if traced else 2):
                            await connection.run(Variant(2, pause), check)
                        if traced:
                            expected += 2 * streams
                            await _spans_reach(expected)
                        for n in (deltas, 2 * deltas):
                            control("-z", pid)
                            for _ in range(streams):
                                await connection.run(Variant(n, pause), check)
                            if traced:  # the window's spans encoded and sent
                                expected += 2 * streams
                                await _spans_reach(expected)
                            before = set(wd.glob("callgrind.out*"))
                            control("-d", pid)
                            totals.append(dumped(out, before, keep and keep / target))
                    return connection.problems

                problems = asyncio.run(run())
            finally:
                stop([process])
    finally:
        stop([upstream_process])
    short, long = totals
    return {
        "target": target,
        "lane": lane,
        "protocol": protocol,
        "fields": fields or {},
        "streams": streams,
        "deltas": deltas,
        "pause": pause,
        "problems": problems,
        "instructions_short": short,
        "instructions_long": long,
        "per_event": (long - short) / (streams * deltas),
        "per_stream": (2 * short - long) / streams,
    }


#: What the bench run (``bench.run_all``'s ``counts``) counts: proxai and the floors it is
#: compared with (the h11 relay is left to the command line).
RUN_TARGETS = ("proxai", OTEL, "stock-relay", "shaped-relay")


def run(reps: int = 2, streams: int = 6, deltas: int = 20, pause: float = 0.03) -> dict[str, Any]:
    """``reps`` counts of each of :data:`RUN_TARGETS`, interleaved, and their medians with
    proxai's ratios to the stock relay (``bench.run_all``'s ``counts``). A window's count
    moves by a few per cent with where the garbage collector runs (``streams`` 6 keeps
    that small), never with the machine's load."""
    rows = [
        measure(target, streams, deltas, pause) | {"rep": rep}
        for rep in range(reps)
        for target in RUN_TARGETS
    ]
    summary = []
    for target in RUN_TARGETS:
        mine = [r for r in rows if r["target"] == target]
        summary.append(
            {
                "target": target,
                "per_event": statistics.median(float(r["per_event"]) for r in mine),
                "per_stream": statistics.median(float(r["per_stream"]) for r in mine),
                # A whole stream of 2 * deltas, counted as it is (the fixed part alone
                # carries the per-event figure's noise twentyfold).
                "whole_stream": statistics.median(
                    int(str(r["instructions_long"])) / streams for r in mine
                ),
                "problems": sorted({p for r in mine for p in r["problems"]}),  # type: ignore[attr-defined]
            }
        )
    stock = next(r for r in summary if r["target"] == "stock-relay")
    plain = next(r for r in summary if r["target"] == "proxai")
    for row in summary:
        row["per_event_vs_stock"] = float(row["per_event"]) / float(stock["per_event"])
        row["per_stream_vs_stock"] = float(row["per_stream"]) / float(stock["per_stream"])
        # What [telemetry] adds to a whole stream, against proxai's.
        row["stream_vs_proxai"] = float(row["whole_stream"]) / float(plain["whole_stream"])
    return {"streams": streams, "deltas": deltas, "pause": pause, "rows": rows, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.03)
    parser.add_argument(
        "--targets", nargs="*", default=["proxai", *FLOORS], choices=["proxai", OTEL, *FLOORS]
    )
    parser.add_argument("--keep", type=Path, default=None, help="copy the dumps into DIR/TARGET")
    parser.add_argument("--lane", choices=["sse", "socket"], default="sse")
    parser.add_argument("--protocol", default=None, help="proxai's [upstream] protocol")
    parser.add_argument("--store", choices=["true", "false"], default=None)
    args = parser.parse_args()
    fields = {} if args.store is None else {"store": args.store == "true"}
    results = [
        measure(
            t,
            args.streams,
            args.deltas,
            args.pause,
            args.keep,
            lane=args.lane,
            protocol=args.protocol,
            fields=fields,
        )
        for t in args.targets
    ]
    for result in results:
        print(
            f"{result['target']:14} {result['per_event']:>12,.0f} instructions per event"
            f" {result['per_stream']:>14,.0f} per stream  {result['problems'] or ''}"
        )
    by_name = {str(r["target"]): r for r in results}
    if "proxai" in by_name and OTEL in by_name:
        off, on = (float(str(by_name[t]["per_stream"])) for t in ("proxai", OTEL))
        print(f"[telemetry] on: {on - off:+,.0f} instructions per stream ({on / off - 1:+.1%})")
        # The whole stream of ``deltas`` events too: per_stream is the difference of two
        # windows, into which a per-event count's noise goes twenty-fold.
        off, on = (
            int(str(by_name[t]["instructions_short"])) / args.streams for t in ("proxai", OTEL)
        )
        print(
            f"[telemetry] on: {on - off:+,.0f} instructions per {args.deltas}-delta stream"
            f" of {off:,.0f} ({on / off - 1:+.1%})"
        )
    (RESULTS / "sse_counts.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
