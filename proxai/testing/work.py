"""How much work a call does, counted: for tests that a cost grows linearly, with no clock.

:func:`work_of` runs a function under a tracer and counts two things that come out the
same on every run, unlike its time:

- the **lines** of Python it executes (a loop over everything so far, per element, is
  quadratic here);
- the **bytes** it allocates, summed line by line at each line's peak (a string grown by
  concatenation copies what it has so far, and each copy counts, so building it
  piece by piece this way is quadratic here, joining the pieces once is linear).

:func:`assert_linear` measures an operation at size ``n`` and ``2n``: linear work about
doubles, quadratic work about quadruples. Work done in C without allocating (a ``list``
searched with ``in``) is invisible to both; test such a step by counting what it calls
(a ``str`` subclass that counts its comparisons, say).

:func:`kept_by` measures memory instead: what a call leaves allocated while its result
lives.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable
from types import FrameType
from typing import Any

import attrs

__all__ = ["Work", "assert_linear", "kept_by", "work_of"]


@attrs.frozen
class Work:
    """What one call did: lines of Python executed, bytes allocated (at each line's peak)."""

    lines: int
    allocated: int


def work_of(call: Callable[[], object]) -> Work:
    """Run ``call()`` and count its :class:`Work` (see the module docstring)."""
    lines = 0
    allocated = 0
    base = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines, allocated, base
        if event == "line":
            lines += 1
            current, peak = tracemalloc.get_traced_memory()
            allocated += max(0, peak - base)
            tracemalloc.reset_peak()
            base = current
        return trace

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    previous = sys.gettrace()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
        if started:
            tracemalloc.stop()
    return Work(lines, allocated)


def assert_linear(
    operation: Callable[[int], Callable[[], object]], n: int, *, factor: float = 2.6
) -> tuple[Work, Work]:
    """Fail unless ``operation(2 * n)`` costs at most ``factor`` times ``operation(n)``, in
    lines and in bytes. ``operation(size)`` prepares the input and returns the call to
    measure (so building the input is not counted); one small call runs first, untraced,
    so that first-use costs (imports, caches) do not count either."""
    operation(max(1, n // 8))()
    small = work_of(operation(n))
    large = work_of(operation(2 * n))
    assert large.lines <= factor * small.lines, (
        f"lines of Python: {small.lines} at n={n}, {large.lines} at n={2 * n} "
        f"({large.lines / small.lines:.2f}x): grows faster than its input"
    )
    assert large.allocated <= factor * small.allocated, (
        f"bytes allocated: {small.allocated} at n={n}, {large.allocated} at n={2 * n} "
        f"({large.allocated / max(1, small.allocated):.2f}x): grows faster than its input"
    )
    return small, large


def kept_by(build: Callable[[], object]) -> int:
    """Bytes that ``build()`` allocated and that stay allocated while what it returns lives
    (by tracemalloc, after a garbage collection on each side)."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = build()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        if started:
            tracemalloc.stop()
    del result
    return kept
