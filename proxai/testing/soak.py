"""A soak: many streams through one proxai, healthy and faulty mixed, then count what is left.

Everything runs in one trio run on loopback: a :class:`ScriptedUpstream`, a real
proxai (hypercorn), and httpx clients. Streams are a rotating mix of

- ``healthy``: the seed's turn 1, which must arrive byte for byte;
- ``stalled``: turn 1 going silent mid-arguments, which proxai must end with its
  synthesized ``error`` + ``response.failed``;
- ``reset``: turn 1 cut by a TCP reset mid-arguments, ended the same way;
- ``disconnect``: a slow stream the client walks away from after its first bytes.

Before the servers start and after they stop, it counts open file descriptors and
trio tasks, and reads the process's RSS: a leak of either shows as a difference.
Used by ``bench/soak.py`` (10,000 streams) and by the test suite (500).
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from ..outcome import OutcomeKind
from .seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from .server import open_proxai
from .upstream import RecordedRequest, Reset, Script, ScriptedUpstream, Stall

__all__ = ["SoakReport", "live_tasks", "open_fds", "rss_bytes", "soak"]

KINDS = ("healthy", "stalled", "reset", "disconnect")
TURN1 = turn_bytes(TURN1_EVENTS)
#: Deadlines well above scheduling delays on a saturated core (client, upstream and
#: proxai share one process here): a stall must be the script's, never the load's.
SOAK_TIMEOUTS = {"first_byte": 10.0, "idle": 5.0, "tool_arguments": 1.0, "total": 120.0}


def open_fds() -> int:
    """File descriptors this process has open (Linux)."""
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def live_tasks() -> int:
    """Every task in this trio run."""

    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


@attrs.define
class SoakReport:
    streams: int
    concurrency: int
    seconds: float = 0.0
    results: Counter[str] = attrs.field(factory=Counter)  # "<kind>:ok" / "<kind>:<problem>"
    outcomes: Counter[str] = attrs.field(factory=Counter)
    fds_before: int = 0
    fds_after: int = 0
    tasks_before: int = 0
    tasks_after: int = 0
    rss_before: int = 0
    rss_after: int = 0

    @property
    def failures(self) -> dict[str, int]:
        return {k: v for k, v in self.results.items() if not k.endswith(":ok")}

    def summary(self) -> str:
        mib = 1024 * 1024
        return "\n".join(
            [
                f"{self.streams} streams at concurrency {self.concurrency} in {self.seconds:.1f} s "
                f"({self.streams / max(self.seconds, 1e-9):.0f} streams/s)",
                "client results: " + ", ".join(f"{k}={v}" for k, v in sorted(self.results.items())),
                "proxai outcomes: "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())),
                f"open fds: {self.fds_before} before, {self.fds_after} after",
                f"trio tasks: {self.tasks_before} before, {self.tasks_after} after",
                f"RSS: {self.rss_before / mib:.1f} MiB before, "
                f"{self.rss_after / mib:.1f} MiB after "
                f"({(self.rss_after - self.rss_before) / mib:+.1f} MiB)",
            ]
        )


def _script(request: RecordedRequest) -> Script:
    kind = request.json().get("metadata", {}).get("soak", "healthy")
    if kind == "stalled":
        return Script.sse(TURN1_EVENTS[:6], then=[Stall()])
    if kind == "reset":
        return Script.sse(TURN1_EVENTS[:6], then=[Reset()])
    if kind == "disconnect":
        return Script.sse(TURN1_EVENTS, delay=0.2)
    return Script.sse(TURN1_EVENTS, chunk_size=257)


async def _one(client: httpx.AsyncClient, url: str, kind: str, report: SoakReport) -> None:
    body = {**TURN1_REQUEST, "metadata": {"soak": kind}}
    received = b""
    async with client.stream("POST", url, json=body) as response:
        async for chunk in response.aiter_raw():
            received += chunk
            if kind == "disconnect":
                break
    if kind == "healthy":
        ok = received == TURN1
    elif kind == "disconnect":
        ok = received.startswith(b"event: response.created")
    else:
        ok = (
            received.startswith(turn_bytes(TURN1_EVENTS[:6]))
            and b"event: response.failed" in received
        )
    report.results[f"{kind}:{'ok' if ok else 'wrong bytes'}"] += 1


async def soak(streams: int, concurrency: int, *, warmup: int = 0) -> SoakReport:
    """Run the soak; the report says what happened and what was left.

    With ``warmup``, a first, smaller soak runs before the baseline is taken, so
    the RSS comparison is between two steady states (allocator arenas, caches and
    imports already paid for) and growth means memory kept per stream.
    """
    if warmup:
        await soak(warmup, concurrency)
    # Garbage left by earlier work must not be collected mid-run and skew the counts;
    # the count after the run is taken without collecting, so a socket that only the
    # garbage collector would close shows as a leak.
    gc.collect()
    report = SoakReport(streams, concurrency)
    report.fds_before, report.tasks_before, report.rss_before = (
        open_fds(),
        live_tasks(),
        rss_bytes(),
    )
    started = trio.current_time()
    upstream = ScriptedUpstream(_script)
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        async with open_proxai(upstream.base_url, timeouts=SOAK_TIMEOUTS) as proxai:
            limits = httpx.Limits(
                max_connections=concurrency, max_keepalive_connections=concurrency
            )
            async with httpx.AsyncClient(limits=limits, timeout=30) as client:
                limiter = trio.CapacityLimiter(concurrency)

                async def run(i: int) -> None:
                    async with limiter:
                        kind = KINDS[i % len(KINDS)]
                        try:
                            await _one(client, proxai.base_url + "/responses", kind, report)
                        except httpx.HTTPError as exc:
                            report.results[f"{kind}:{type(exc).__name__}"] += 1

                async with trio.open_nursery() as clients:
                    for i in range(streams):
                        clients.start_soon(run, i)
            # every request's tasks end before its outcome is recorded
            with trio.fail_after(30):
                outcomes = await proxai.wait_for_outcomes(streams)
            report.outcomes.update(o.kind.value if o.kind else "none" for o in outcomes)
        nursery.cancel_scope.cancel()
    report.seconds = trio.current_time() - started
    report.fds_after, report.tasks_after, report.rss_after = open_fds(), live_tasks(), rss_bytes()
    return report


def expected_outcomes(streams: int) -> dict[str, int]:
    """What proxai's records should say for a soak of ``streams``."""
    per_kind = Counter(KINDS[i % len(KINDS)] for i in range(streams))
    names: dict[str, Any] = {
        "healthy": OutcomeKind.COMPLETED,
        "stalled": OutcomeKind.STALLED_TOOL_ARGUMENTS,
        "reset": OutcomeKind.UPSTREAM_RESET,
        "disconnect": OutcomeKind.CLIENT_DISCONNECTED,
    }
    return {names[k].value: n for k, n in per_kind.items()}
