"""docs/bench.png from bench/results/all.json: the per-event regime first (CPU per
event and per stream, added time to first byte, RSS per held stream), then the
one-read throughput, proxai against nginx and the stack's floor.

    .venv/bin/python -m bench.chart
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT

SERIES = {  # per-event bench target: (label, colour)
    "nginx": ("nginx", "#4c72b0"),
    "hypercorn-paced": ("hypercorn alone", "#c4c4c4"),
    "stock-relay": ("stock relay (hypercorn + httpx)", "#8c8c8c"),
    "h11-relay": ("h11 relay", "#55a868"),
    "shaped-relay": ("shaped relay (proxai's tasks)", "#8172b2"),
    "proxai": ("proxai", "#dd8452"),
    "proxai-translating": ("proxai translating", "#c44e52"),
    "litellm": ("LiteLLM proxy", "#8172b3"),
    "portkey": ("Portkey gateway", "#937860"),
}
ONE_READ = {"nginx": "#4c72b0", "stack floor": "#8c8c8c", "proxai": "#dd8452"}
FLOOR = "transport-relay"  # bench/floor.py's stock relay


def _grouped(
    ax: Any, levels: list[int], values: dict[str, list[float]], fmt: str, floor: float
) -> None:
    """Bars grouped by concurrency, one per target; heights clipped at ``floor`` for
    the log scale (a median at or below zero is noise around nothing), labels not."""
    width = 0.84 / max(1, len(values))
    for i, (name, ys) in enumerate(values.items()):
        label, colour = SERIES[name]
        xs = [x + (i - (len(values) - 1) / 2) * width for x in range(len(levels))]
        bars = ax.bar(xs, [max(floor, y) for y in ys], width, label=label, color=colour)
        ax.bar_label(bars, labels=[fmt.format(v) for v in ys], fontsize=6, rotation=90)
    ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])


def _per_event(ax: Any, rows: list[dict[str, Any]], mode: str, field: str, title: str) -> None:
    levels = sorted({r["concurrency"] for r in rows if r["mode"] == mode})
    values = {}
    for name in SERIES:
        found = {
            r["concurrency"]: r[field] for r in rows if r["target"] == name and r["mode"] == mode
        }
        if found:
            values[name] = [found.get(c, float("nan")) for c in levels]
    _grouped(ax, levels, values, "{:,.0f}", 1.0)
    ax.set_yscale("log")
    ax.set_ylabel("µs of proxy CPU (log)")
    ax.set_title(title, fontsize=10)


def draw(results: dict[str, Any], out: Path | None = None) -> None:
    """Draw the chart to ``out`` (default docs/bench.png; a quick run renders elsewhere)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    pe = results.get("perevent")
    if pe is not None:
        rows = pe["cpu"]
        _per_event(axes[0][0], rows, "paced", "marginal_us", "CPU per event (marginal), paced")
        _per_event(axes[0][1], rows, "paced", "fixed_us", "CPU per stream (fixed), paced")
        _per_event(axes[0][2], rows, "unpaced", "marginal_us", "CPU per event, unpaced")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(
            handles, labels, loc="upper center", ncol=6, fontsize=9, bbox_to_anchor=(0.5, 0.955)
        )

        ax = axes[1][0]
        levels = sorted({r["concurrency"] for r in pe["ttfb"]})
        values = {}
        for name in SERIES:
            found = {r["concurrency"]: r["added_p50_ms"] for r in pe["ttfb"] if r["target"] == name}
            if found:
                values[name] = [found.get(c, float("nan")) for c in levels]
        _grouped(ax, levels, values, "{:.2f}", 0.01)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title("Added TTFB p50 vs direct, paced", fontsize=10)

        ax = axes[1][1]
        memory = {r["target"]: r["kb_per_stream"] for r in pe["memory"]["summary"]}
        names = [n for n in ("nginx", "hypercorn-held", *list(SERIES)[2:]) if n in memory]
        labels = [SERIES.get(n, ("hypercorn alone", ""))[0] for n in names]
        colours = [SERIES.get(n, ("", "#c4c4c4"))[1] for n in names]
        bars = ax.bar(range(len(names)), [memory[n] for n in names], color=colours)
        ax.bar_label(bars, labels=[f"{memory[n]:.1f}" for n in names], fontsize=8)
        ax.set_xticks(range(len(names)), labels, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel("KiB per held stream (RSS)")
        ax.set_title("Memory per held stream", fontsize=10)

    ax = axes[1][2]
    rows = results["throughput"]["summary"]
    series = [("nginx", [r for r in rows if r["target"] == "nginx"])]
    floor = results.get("floor", {}).get("throughput")
    if floor is not None:
        series.append(("stack floor", [r for r in floor["summary"] if r["target"] == FLOOR]))
    series.append(("proxai", [r for r in rows if r["target"] == "proxai"]))
    width = 0.8 / len(series)
    levels = sorted({r["concurrency"] for r in rows})
    for i, (name, kept) in enumerate(series):
        ys = [next(r["streams_per_core_s"] for r in kept if r["concurrency"] == c) for c in levels]
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(levels))]
        bars = ax.bar(xs, ys, width, label=name, color=ONE_READ[name])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in ys], fontsize=7)
    ax.axhline(2000, color="green", linestyle="--", linewidth=1, label="issue 7 target ≥ 2,000")
    ax.set_yscale("log")
    ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
    ax.set_ylabel("streams per proxy core-second (log)")
    ax.set_title("One read: 40-delta stream in one upstream read", fontsize=10)
    ax.legend(fontsize=7)

    when = results.get("machine", {}).get("date", "")
    fig.suptitle(
        "proxai against nginx and the stack's floor, one upstream write per event (medians "
        f"of {results.get('reps', '?')} interleaved runs on a shared 2-core machine, {when})"
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out or ROOT / "docs" / "bench.png", dpi=100)
    plt.close(fig)


def main() -> int:
    draw(json.loads((RESULTS / "all.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
