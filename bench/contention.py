"""Whether a bench cell ran on a quiet machine (issue 34).

A figure measured while something else used the CPU is not a result. Each cell is
wrapped in :func:`watch`: it reads the whole machine's busy time from ``/proc/stat``
before and after, subtracts what this bench's own processes (this driver and every
process under it: the upstream, the proxies, nginx) used meanwhile, and calls the cell
*contended* if the rest took more than :data:`LIMIT` of one core. :func:`quiet` reruns
a contended cell (at most twice) and marks the row it keeps.

CPU time is what the kernel accounts: ``/proc/stat`` in clock ticks (10 ms), the bench's
processes in nanoseconds from ``/proc/PID/task/*/schedstat``. A process of the bench
that ends during the cell (wrk, a py-spy recording, a measuring subprocess) is counted
by what the kernel hands its parent when it is reaped (``getrusage(RUSAGE_CHILDREN)``):
its time before the cell was read from ``/proc`` at the start and is taken off again.
A child that exits but is not reaped before the cell ends still looks like someone
else's work.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import attrs

from .common import cpu_ns, log

__all__ = ["LIMIT", "Watch", "quiet", "watch"]

#: The most of one core anything but the bench may use during a cell.
LIMIT = 0.05
#: Runs of a contended cell, the first included.
ATTEMPTS = 3

T = TypeVar("T")
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _busy_ns() -> int:
    """The machine's busy CPU time since boot, all cores: user, nice, system, irq,
    softirq, steal (not idle, not iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) * _TICK_NS


def _own_pids(root: int) -> list[int]:
    """``root`` and every process under it, from one pass over ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def _reaped_ns() -> int:
    """CPU time of this process's children that ended and were waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((usage.ru_utime + usage.ru_stime) * 1e9)


@attrs.define
class Watch:
    """What the rest of the machine used during one cell (filled when the cell ends)."""

    other_core: float = 0.0  # in cores (1.0: one core busy the whole time)
    wall_s: float = 0.0
    own_s: float = 0.0  # CPU seconds the bench's own processes used

    @property
    def contended(self) -> bool:
        return self.other_core > LIMIT

    def fields(self) -> dict[str, bool | float]:
        """What a cell's row carries for the report's banner (``report.contention_banner``)."""
        return {"contended": self.contended, "other_core": round(self.other_core, 3)}


@contextmanager
def watch() -> Iterator[Watch]:
    """Measure what the rest of the machine uses while the block runs."""
    root = os.getpid()
    result = Watch()
    pids = _own_pids(root)
    own_before, busy_before = cpu_ns(pids) + _reaped_ns(), _busy_ns()
    started = time.monotonic()
    try:
        yield result
    finally:
        busy_after = _busy_ns()
        pids = sorted(set(pids) | set(_own_pids(root)))
        own_after = cpu_ns(pids) + _reaped_ns()
        wall = time.monotonic() - started
        other = (busy_after - busy_before) - (own_after - own_before)
        result.wall_s = wall
        result.own_s = (own_after - own_before) / 1e9
        # /proc/stat counts whole ticks per core: the difference of two reads is short
        # by less than one tick per core, which is not contention.
        slack = (os.cpu_count() or 1) * _TICK_NS
        result.other_core = max(0, other - slack) / 1e9 / wall if wall > 0 else 0.0


def quiet(run: Callable[[], T], what: str) -> tuple[T, Watch]:
    """``run()`` on a quiet machine if it can be: a contended run is repeated, up to
    :data:`ATTEMPTS` runs in all; the last one is kept, its :class:`Watch` saying
    whether it was contended."""
    for attempt in range(ATTEMPTS):
        with watch() as seen:
            result = run()
        if not seen.contended:
            return result, seen
        log(
            f"contended: {what}: {seen.other_core:.2f} of a core used by other work "
            f"(run {attempt + 1} of {ATTEMPTS})"
        )
    return result, seen
