"""The stall: what a client gets through each target when the upstream stalls
mid-arguments.

    .venv/bin/python -m bench.stall [--reps 3] [--give-up 75]

The upstream (bench/upstream.py ``stall``) sends ``response.created``, a
``function_call`` item and three argument deltas, then nothing (it keeps the
connection open). proxai runs with ``[timeouts] tool_arguments = 2.0``; nginx with
Debian's defaults (``proxy_read_timeout 60s``). The client gives up after ``--give-up``
seconds. All streams run at once (``--reps`` per target), so the run takes about
``--give-up`` seconds (more if the machine was busy: the run is one watched cell, run
again up to twice if other work used the CPU, ``bench.contention.quiet``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from typing import Any

from bench.common import (
    BodyDecoder,
    Row,
    connect,
    log,
    median,
    pin_driver,
    post_request,
    python_upstream,
    save,
    targets,
)
from bench.contention import quiet

TOOL_ARGUMENTS = 2.0


async def one_stream(name: str, port: int, give_up: float) -> Row:
    reader, writer = await connect(port)
    t0 = time.perf_counter()
    writer.write(post_request(port))
    head = bytearray()
    body = bytearray()
    decoder: BodyDecoder | None = None
    last_byte = float("nan")
    ending = "gave up (the stream was still open)"
    try:
        while True:
            left = give_up - (time.perf_counter() - t0)
            if left <= 0:
                break
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout=left)
            except TimeoutError:
                break
            except ConnectionError:
                ending = "connection reset"
                last_byte = time.perf_counter() - t0
                break
            if not data:
                ending = "connection closed without the body's end (truncated)"
                last_byte = time.perf_counter() - t0
                break
            last_byte = time.perf_counter() - t0
            if decoder is None:
                head += data
                end = head.find(b"\r\n\r\n")
                if end < 0:
                    continue
                data = bytes(head[end + 4 :])
                del head[end:]
                length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", bytes(head))
                decoder = BodyDecoder(int(length.group(1)) if length else None)
            body += decoder.feed(data)
            if decoder.done:
                ending = "body ended cleanly"
                break
    finally:
        writer.close()
    events = re.findall(rb"(?m)^event: (.+)$", bytes(body))
    status = int(head.split(b" ", 2)[1]) if head else 0
    code = re.search(rb'"code":"([^"]+)","message":"([^"]+)"', bytes(body))
    return {
        "error_code": code.group(1).decode() if code else None,
        "error_message": code.group(2).decode() if code else None,
        "target": name,
        "status": status,
        "events": [e.decode() for e in events],
        "ending": ending,
        "seconds": last_byte,
        "gave_up_after": give_up if ending.startswith("gave up") else None,
    }


async def run_all(all_targets: list[Any], reps: int, give_up: float) -> list[Row]:
    return list(
        await asyncio.gather(
            *(
                one_stream(target.name, target.port, give_up)
                for target in all_targets
                for _ in range(reps)
            )
        )
    )


def describe(rows: list[Row]) -> str:
    first = rows[0]
    got = ", ".join(first["events"][5:]) or "nothing"
    return f"the 5 events sent, then {got}; {first['ending']}"


def run(reps: int, give_up: float) -> dict[str, Any]:
    with (
        python_upstream("stall") as (up, _),
        targets(up, proxai_timeouts={"tool_arguments": TOOL_ARGUMENTS}) as all_targets,
    ):
        log(f"stall: {reps} streams per target at once, giving up after {give_up:.0f} s")
        # One cell: every stream at once; a contended one is rerun (give_up each time).
        raw, seen = quiet(
            lambda: asyncio.run(run_all(all_targets, reps, give_up)), "stall, every target"
        )
    for row in raw:
        log("stall", row)
    summary = []
    for name in ("direct", "nginx", "proxai"):
        rows = [r for r in raw if r["target"] == name]
        summary.append(
            {
                "target": name,
                "reps": len(rows),
                "status": rows[0]["status"],
                "events": rows[0]["events"],
                "ending": rows[0]["ending"],
                "error_code": rows[0]["error_code"],
                "error_message": rows[0]["error_message"],
                "same_for_all": all(
                    (r["events"], r["ending"]) == (rows[0]["events"], rows[0]["ending"])
                    for r in rows
                ),
                "seconds": median([r["seconds"] for r in rows]),
                "gave_up_after": rows[0]["gave_up_after"],
                "what": describe(rows),
            }
        )
    return {
        "raw": raw,
        "summary": summary,
        "tool_arguments": TOOL_ARGUMENTS,
        "give_up": give_up,
        "cell": seen.fields(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--give-up", type=float, default=75.0)
    args = parser.parse_args()
    pin_driver()
    result = run(args.reps, args.give_up)
    save("stall", result)
    for row in result["summary"]:
        print({k: v for k, v in row.items() if k != "events"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
