"""bench/report.py's generated parts: the contention banner over every bench's rows, the
issue 34 targets table's verdicts, the limits section; and the rows the benches hand it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report, throughput
from bench.common import Target
from bench.limits import resp_command, resp_end

QUIET = {"contended": False, "other_core": 0.0}
LOUD = {"contended": True, "other_core": 0.3}


def test_a_one_read_cell_row_says_whether_it_was_contended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spin = "import time\nwhile time.process_time() < 0.05: pass"

    def fake_wrk(port: int, connections: int, seconds: float, script: Path) -> dict[str, float]:
        subprocess.run([sys.executable, "-c", spin], check=True)  # wrk: a child, reaped
        return {"requests": 10, "errors": 0, "p50_ms": 1.0, "p99_ms": 2.0}

    monkeypatch.setattr(throughput, "wrk", fake_wrk)
    row = throughput.measure(Target("direct", 1, None), 1, 1, Path("post.lua"), [])
    assert isinstance(row["contended"], bool) and row["other_core"] >= 0
    summary = throughput.summarize([{**row, "rep": 0}])
    assert "contended" not in summary[0]  # a cell is counted once: in raw, not the summary


def test_the_banner_counts_the_one_read_benches_and_the_profiles() -> None:
    res: dict[str, Any] = {
        "throughput": {"raw": [{"target": "proxai", **QUIET}] * 2, "summary": [{"x": 1}]},
        "longstream": {"raw": [{"target": "proxai", **QUIET}], "summary": []},
        "floor": {"throughput": {"raw": [{"target": "naive-relay", **QUIET}]}},
        "stall": {"raw": [{"target": "nginx"}], "cell": LOUD},
        "profile": {"responses": {"runs": {"20": {"streams": 3, **QUIET}}}},
        "limits": {"raw": [{"target": "redis", **QUIET}], "calls": {"raw": {}, **QUIET}},
    }
    banner = report.contention_banner(res)[0]
    assert banner.startswith("**CONTENDED: 1 of 8 cells")
    assert "0.30 of a core" in banner
    res["stall"]["cell"] = QUIET
    assert report.contention_banner(res)[0].startswith("All 8 watched cells ran on a quiet")


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ([("c=1", 1.0), ("c=4", 0.9)], "met"),
        ([("c=1", 1.2), ("c=4", 0.9)], "met at c=4; **not met** at c=1"),
        ([("c=1", 1.2)], "**not met**"),
        ([("c=1", float("nan"))], "not measured"),
        ([], "not measured"),
    ],
)
def test_a_target_verdict(values: list[tuple[str, float]], verdict: str) -> None:
    assert report.goal_verdict(values, 1.0) == verdict


def limits_result(contended: bool = False) -> dict[str, Any]:
    def row(target: str, c: int, added: float, ratio: float) -> dict[str, Any]:
        return {
            "target": target,
            "concurrency": c,
            "reps": 1,
            "ttfb_p50_ms": 5.0 + added,
            "ttfb_p99_ms": 7.0 + added,
            "cpu_us_per_stream": 1000 * ratio,
            "redis_cpu_us_per_stream": 40.0 if target == "redis" else 0.0,
            "added_ttfb_p50_ms": added,
            "added_ttfb_p99_ms": 2 * added,
            "cpu_ratio": ratio,
        }

    layer = {"wall_p50_us": 0.0, "cpu_p50_us": 0.0, "redis_cpu_us": 9.0}
    return {
        "machine": {"redis": "Redis server v=7.0.15"},
        "raw": [{"target": "redis", "contended": contended, "other_core": 0.2 * contended}],
        "summary": [
            row("none", 1, 0.0, 1.0),
            row("memory", 1, 0.1, 1.02),
            row("redis", 1, 0.6, 1.08),
            row("none", 16, 0.0, 1.0),
            row("memory", 16, 0.2, 1.03),
            row("redis", 16, 3.0, 1.25),
        ],
        "calls": {
            "calls": 3000,
            "rounds": 3,
            "raw": {**layer, "wall_p50_us": 40.0, "cpu_p50_us": 12.0},
            "coredis": {**layer, "wall_p50_us": 150.0, "cpu_p50_us": 110.0},
            "connection": {**layer, "wall_p50_us": 170.0, "cpu_p50_us": 128.0},
            "admit": {**layer, "wall_p50_us": 200.0, "cpu_p50_us": 150.0},
            **QUIET,
        },
    }


def test_the_limits_section_shows_each_target_against_issue_34() -> None:
    text = "\n".join(report.limits_section({"limits": limits_result()}))
    assert "`.venv/bin/python -m bench.run_all --only limits`" in text
    redis = "| `[limits]`, Redis backend |"
    assert f"{redis} 1 | 5.60 / 7.60 | +0.60 / +1.20 | 1,080 | 1.08× | 40.0 |" in text
    assert f"{redis} 16 | 8.00 / 10.00 | +3.00 / +6.00 | 1,250 | 1.25× | 40.0 |" in text
    assert "added TTFB p50 at c=1 ≤ 1 ms: +0.60 ms, met" in text
    assert "1.08× (c=1) / 1.25× (c=16), met at c=1; **not met** at c=16" in text
    # one call, layer by layer: each layer's figure and what it adds over the one inside
    assert "| raw RESP `EVALSHA` on a plain trio socket | 40.0 | — | 12.0 | — | 9.0 |" in text
    assert "| coredis alone (`Script` on a bare `coredis.Redis`) | 150.0 | +110.0 |" in text
    assert "| the Redis limiter's whole `admit` | 200.0 | +30.0 | 150.0 | +22.0 |" in text
    assert "is 20 % of a whole admission's wall time" in text
    assert report.limits_section({}) == []


def test_the_issue_34_table_has_every_target_with_its_verdict_and_command() -> None:
    res: dict[str, Any] = {
        "limits": limits_result(),
        "websocket": {
            "cpu": [
                {"transport": "socket", "concurrency": 1, "marginal_vs_sse": 0.98},
                {"transport": "socket", "concurrency": 4, "marginal_vs_sse": 1.2},
                {"transport": "sse", "concurrency": 1, "marginal_vs_sse": 1.0},
            ]
        },
    }
    lines = report.issue34_targets(res)
    assert lines[0] == "## Issue 34 targets"
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ")}
    assert len(rows) == 1 + 10  # the header and issue 34's ten targets
    limits = rows["`[limits]` on Redis: added TTFB p50, c=1 (ms)"]
    assert "+0.60 ms (c=1) | ≤ 1 ms | met | `.venv/bin/python -m bench.run_all --only limits`" in (
        limits
    )
    cpu = rows["`[limits]` on Redis: CPU per stream vs no limits"]
    assert "met at c=1; **not met** at c=16" in cpu
    ws = rows["Responses WebSocket: CPU per event vs SSE"]
    assert "0.98× (c=1); 1.20× (c=4) | ≤ 1.0× | met at c=1; **not met** at c=4" in ws
    assert "| — | ≤ 1.4× | not measured |" in rows["pass-through CPU per stream vs the stock relay"]
    # a verdict over contended cells says so
    res["limits"] = limits_result(contended=True)
    contended = "\n".join(report.issue34_targets(res))
    assert "met (*contended*)" in contended


def test_raw_resp_framing() -> None:
    assert resp_command("EVALSHA", "ab", 1, "k") == (
        b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
    )
    reply = b"*3\r\n$0\r\n\r\n:12\r\n*2\r\n$-1\r\n+OK\r\n"
    assert resp_end(reply) == len(reply)
    for cut in range(len(reply)):
        assert resp_end(reply[:cut]) == -1
    assert resp_end(b"-NOSCRIPT No matching script\r\n") == 30
