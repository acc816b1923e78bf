"""docs/bench.png from bench/results/all.json: streams per proxy core-second and added
time to first byte, nginx, the stack's floor (when measured) and proxai side by side.

    .venv/bin/python -m bench.chart
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.common import RESULTS, ROOT

COLORS = {"nginx": "#4c72b0", "stack floor": "#8c8c8c", "proxai": "#dd8452"}
FLOOR = "transport-relay"  # bench/floor.py's cheapest relay on this stack


def _series(results: dict[str, Any], part: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, summary rows) per target drawn: nginx, the floor if measured, proxai."""
    rows = results[part]["summary"]
    series = [("nginx", [r for r in rows if r["target"] == "nginx"])]
    floor = results.get("floor", {}).get(part)
    if floor is not None:
        series.append(("stack floor", [r for r in floor["summary"] if r["target"] == FLOOR]))
    series.append(("proxai", [r for r in rows if r["target"] == "proxai"]))
    return series


def draw(results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))

    series = _series(results, "throughput")
    width = 0.8 / len(series)
    levels = sorted({r["concurrency"] for r in results["throughput"]["summary"]})
    for i, (name, rows) in enumerate(series):
        values = [
            next(r["streams_per_core_s"] for r in rows if r["concurrency"] == c) for c in levels
        ]
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(levels))]
        bars = left.bar(xs, values, width, label=name, color=COLORS[name])
        left.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    left.axhline(2000, color="green", linestyle="--", linewidth=1, label="target ≥ 2,000")
    left.set_yscale("log")
    left.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
    left.set_ylabel("streams per proxy core-second (log)")
    left.set_title("Throughput, 40-delta Responses stream")
    left.legend(fontsize=8)

    series = _series(results, "latency")
    width = 0.8 / len(series)
    concurrency = sorted({r["concurrency"] for r in results["latency"]["summary"]})
    groups = [(c, p) for c in concurrency for p in ("p50", "p99")]
    for i, (name, rows) in enumerate(series):
        values = [
            max(0.01, next(r[f"added_ttfb_{p}_ms"] for r in rows if r["concurrency"] == c))
            for c, p in groups
        ]
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(groups))]
        bars = right.bar(xs, values, width, label=name, color=COLORS[name])
        right.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
    right.set_yscale("log")
    right.set_xticks(range(len(groups)), [f"c={c} {p}" for c, p in groups])
    right.set_ylabel("added TTFB vs direct, ms (log)")
    right.set_title("Added time to first byte, paced stream (20 deltas, 5 ms)")
    targets = {(1, "p50"): 1.0, (16, "p99"): 5.0}
    for x, group in enumerate(groups):
        if group in targets:
            right.hlines(targets[group], x - 0.45, x + 0.45, colors="green", linestyles="--")
    right.plot([], [], color="green", linestyle="--", label="target")
    right.legend(fontsize=8)

    when = results.get("machine", {}).get("date", "")
    fig.suptitle(
        f"proxai vs nginx and the stack's floor (medians of {results.get('reps', '?')} runs, "
        f"{when})"
    )
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "bench.png", dpi=110)
    plt.close(fig)


def main() -> int:
    draw(json.loads((RESULTS / "all.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
