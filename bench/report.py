"""docs/bench.md from bench/results/all.json (and the hand-written bench/profile.md).

.venv/bin/python -m bench.report
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from bench.common import RESULTS, ROOT, Row


def n(value: float, digits: int = 0) -> str:
    if value != value:  # NaN
        return "—"
    return f"{value:,.{digits}f}"


def ratio(a: float, b: float) -> str:
    if a != a or b != b or not b:
        return "—"
    r = a / b
    return f"{r:.2f}×" if r >= 0.095 else f"1/{b / a:,.0f}" if a else "0"


def pick(rows: list[Row], **keys: Any) -> Row:
    return next(r for r in rows if all(r[k] == v for k, v in keys.items()))


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def targets_section(res: dict[str, Any]) -> list[str]:
    out = ["## Where proxai stands against the targets", ""]
    out += [
        "| target | goal | proxai (median) | stack floor | nginx, same run | |",
        "|---|---|---|---|---|---|",
    ]
    fl = res.get("floor")

    def floor(part: str, **keys: Any) -> Row | None:
        if fl is None or part not in fl:
            return None
        rows = [r for r in fl[part]["summary"] if r["target"] == "transport-relay"]
        return next((r for r in rows if all(r[k] == v for k, v in keys.items())), None)

    def fl_text(row: Row | None, field: str, digits: int, unit: str) -> str:
        return "—" if row is None else f"{n(row[field], digits)}{unit}"

    tp = res["throughput"]["summary"]
    px40 = [pick(tp, target="proxai", concurrency=c) for c in (1, 16, 64)]
    nx40 = [pick(tp, target="nginx", concurrency=c) for c in (1, 16, 64)]
    worst = min(r["streams_per_core_s"] for r in px40)
    out.append(
        "| throughput, 40-delta stream | ≥ 2,000 streams per proxy core-second | "
        + " / ".join(n(r["streams_per_core_s"]) for r in px40)
        + " (c=1/16/64) | "
        + " / ".join(
            fl_text(floor("throughput", concurrency=c), "streams_per_core_s", 0, "")
            for c in (1, 16, 64)
        )
        + " | "
        + " / ".join(n(r["streams_per_core_s"]) for r in nx40)
        + f" | {verdict(worst >= 2000)} |"
    )
    lat = res["latency"]["summary"]
    p1, n1 = pick(lat, target="proxai", concurrency=1), pick(lat, target="nginx", concurrency=1)
    p16, n16 = pick(lat, target="proxai", concurrency=16), pick(lat, target="nginx", concurrency=16)
    out.append(
        f"| added TTFB p50, c=1 | ≤ 1 ms | {n(p1['added_ttfb_p50_ms'], 2)} ms | "
        f"{fl_text(floor('latency', concurrency=1), 'added_ttfb_p50_ms', 2, ' ms')} | "
        f"{n(n1['added_ttfb_p50_ms'], 2)} ms | {verdict(p1['added_ttfb_p50_ms'] <= 1)} |"
    )
    out.append(
        f"| added TTFB p99, c=16 | ≤ 5 ms | {n(p16['added_ttfb_p99_ms'], 2)} ms | "
        f"{fl_text(floor('latency', concurrency=16), 'added_ttfb_p99_ms', 2, ' ms')} | "
        f"{n(n16['added_ttfb_p99_ms'], 2)} ms | {verdict(p16['added_ttfb_p99_ms'] <= 5)} |"
    )
    mem = res["memory"]["summary"]
    pm, nm = pick(mem, target="proxai"), pick(mem, target="nginx")
    out.append(
        f"| RSS per held stream ({pm['streams']:,} slow streams) | ≤ 20 KB | "
        f"{n(pm['kb_per_stream'], 1)} KiB | "
        f"{fl_text(floor('memory'), 'kb_per_stream', 1, ' KiB')} | "
        f"{n(nm['kb_per_stream'], 1)} KiB | "
        f"{verdict(pm['kb_per_stream'] <= 20)} |"
    )
    ls = res["longstream"]["summary"]
    pl, nl = pick(ls, target="proxai"), pick(ls, target="nginx")
    out.append(
        f"| events/s through one stream | ≥ 50,000 | {n(pl['events_per_s'])} | "
        f"— | {n(nl['events_per_s'])} | {verdict(pl['events_per_s'] >= 50_000)} |"
    )
    sc = res["scaling"]
    if sc.get("skipped"):
        out.append("| scaling with workers | near-linear | not measured (see below) | | | — |")
    else:
        c = max(r["concurrency"] for r in sc["summary"])
        one = pick(sc["summary"], workers=1, concurrency=c)["streams_per_s"]
        two = pick(sc["summary"], workers=2, concurrency=c)["streams_per_s"]
        out.append(
            f"| scaling, `--workers 2` vs 1 (c={c}) | near-linear (≈ 2×) | {ratio(two, one)} "
            f"| | | {verdict(two / one >= 1.7)} |"
        )
    st = pick(res["stall"]["summary"], target="proxai")
    sn = pick(res["stall"]["summary"], target="nginx")
    nginx_got = (
        f"still open when the bench gave up after {sn['gave_up_after']:.0f} s"
        if sn["gave_up_after"]
        else f"{sn['ending']} after {n(sn['seconds'], 1)} s"
    )
    out.append(
        f"| stall mid-arguments | an error the SDK raises, not a hang | `error` + "
        f"`response.failed` after {n(st['seconds'], 2)} s | — | {nginx_got} | "
        f"{verdict(st['events'][-2:] == ['error', 'response.failed'])} |"
    )
    px1 = pick(tp, target="proxai", concurrency=1)
    out += [
        "",
        "*Stack floor* is the cheapest relay this stack can run (`transport-relay`: hypercorn's "
        "trio worker and httpx's transport, one ASGI send per upstream chunk, nothing else), "
        "measured in the floor bench below. "
        f"proxai spends {1000 / px1['streams_per_core_s']:.1f} ms of CPU per 40-delta stream "
        "at c=1.",
    ]
    if fl is not None:
        beyond = []
        static = [r for r in fl["throughput"]["summary"] if r["target"] == "hypercorn-static"]
        if static and max(r["streams_per_core_s"] for r in static) < 2000:
            beyond.append(
                "throughput (hypercorn's request cycle alone, answering with no upstream at "
                f"all, peaks at {n(max(r['streams_per_core_s'] for r in static))} streams per "
                "core-second)"
            )
        ttfb1 = floor("latency", concurrency=1)
        if ttfb1 is not None and ttfb1["added_ttfb_p50_ms"] > 1:
            beyond.append("added TTFB at c=1")
        held = floor("memory")
        if held is not None and held["kb_per_stream"] > 20:
            beyond.append("memory per held stream")
        if beyond:
            out[-1] += (
                " The floor itself misses the targets for "
                + ", ".join(beyond)
                + ": those are out of reach on hypercorn + httpx whatever proxai does. The "
                "floor section below splits proxai's time and memory between the stack and "
                "proxai's own work."
            )
    return [*out, ""]


def floor_section(res: dict[str, Any]) -> list[str]:
    if "floor" not in res:
        return []
    fl = res["floor"]
    tp = fl["throughput"]["summary"]
    cs = sorted({r["concurrency"] for r in tp})
    names = ["hypercorn-static", "naive-relay", "transport-relay", "proxai"]
    out = [
        "## The stack's floor: where the time per stream goes",
        "",
        "`bench/floor.py` runs the same loads against minimal ASGI apps on hypercorn's trio "
        "worker (`bench/floor_apps.py`), pinned to the proxy core like proxai and measured "
        "in the same run: `hypercorn-static` answers with the pre-rendered stream itself (no "
        "upstream: hypercorn, h11 and trio alone); `naive-relay` is the straightforward relay "
        "(httpx `AsyncClient.stream`, one ASGI send per chunk, no framing, observer or "
        "deadlines); `transport-relay` is the same through httpx's transport, proxai's "
        "upstream path. Nothing can relay a stream on this stack for less than "
        "`transport-relay` costs.",
        "",
        "| target | " + " | ".join(f"c={c}" for c in cs) + " | CPU per stream, c=1 |",
        "|---|" + "---|" * len(cs) + "---|",
    ]
    for name in names:
        rows = [pick(tp, target=name, concurrency=c) for c in cs]
        out.append(
            f"| {name} | "
            + " | ".join(n(r["streams_per_core_s"]) for r in rows)
            + f" | {n(1000 / rows[0]['streams_per_core_s'], 2)} ms |"
        )
    out += [
        "",
        "Streams per proxy core-second, medians. Split per stream (CPU ms, from the "
        "figures above):",
        "",
        "| part | " + " | ".join(f"c={c}" for c in cs) + " |",
        "|---|" + "---|" * len(cs),
    ]

    def ms(name: str, c: int) -> float:
        return 1000 / float(pick(tp, target=name, concurrency=c)["streams_per_core_s"])

    parts: list[tuple[str, Callable[[int], float]]] = [
        ("hypercorn's request cycle (static app)", lambda c: ms("hypercorn-static", c)),
        (
            "httpx's upstream exchange (transport relay − static)",
            lambda c: ms("transport-relay", c) - ms("hypercorn-static", c),
        ),
        (
            "proxai's own work (proxai − transport relay)",
            lambda c: ms("proxai", c) - ms("transport-relay", c),
        ),
    ]
    for label, value in parts:
        out.append(f"| {label} | " + " | ".join(f"{value(c):.2f}" for c in cs) + " |")
    if "latency" in fl:
        lat = fl["latency"]["summary"]
        out += [
            "",
            "Added time to first byte on the latency bench's paced stream (ms, medians):",
            "",
            "| target | c | added TTFB p50 | added TTFB p99 |",
            "|---|---|---|---|",
        ]
        for r in lat:
            if r["target"] != "direct":
                out.append(
                    f"| {r['target']} | {r['concurrency']} | {n(r['added_ttfb_p50_ms'], 2)} | "
                    f"{n(r['added_ttfb_p99_ms'], 2)} |"
                )
    mem = fl["memory"]["summary"]
    held = {r["target"]: r["kb_per_stream"] for r in mem}
    out += [
        "",
        f"RSS per held stream ({mem[0]['streams']:,} slow streams; `hypercorn-held` sends the "
        "first event itself and holds the stream): "
        + ", ".join(f"{name} {n(kb, 1)} KiB" for name, kb in held.items())
        + ". Of proxai's, hypercorn's connection and request hold "
        f"{n(held['hypercorn-held'], 1)} KiB, httpx's upstream exchange "
        f"{n(held['transport-relay'] - held['hypercorn-held'], 1)} KiB and proxai's own "
        f"state {n(held['proxai'] - held['transport-relay'], 1)} KiB.",
        "",
    ]
    return out


def setup_section(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    loads = [
        f"{name} {res[name]['loadavg'][0]:.2f} → {res[name]['loadavg'][1]:.2f}"
        for name in ("throughput", "latency", "memory", "longstream", "scaling", "stall", "floor")
        if name in res and "loadavg" in res[name]
    ]
    return [
        "## Setup",
        "",
        f"- **Machine**: {m['cpu']}; {m['os']}, Linux {m['kernel']}.",
        f"- **Versions**: Python {m['python']}, proxai {m['proxai']} (commit {m['commit']}), "
        f"trio {m['trio']}, hypercorn {m['hypercorn']}, httpx {m['httpx']}, "
        f"httpcore {m['httpcore']}, h11 {m['h11']}, orjson {m['orjson']}; "
        f"{m['nginx']}, {m['wrk']}.",
        f"- **Measured** {m['date']}; every figure is the median of {res['reps']} repetitions "
        "(targets interleaved within each repetition), ratios are taken between targets "
        "measured in the same run.",
        "- **Cores**: the proxy under test (nginx or proxai) is pinned to core 1 with "
        "`taskset` and its CPU time is read from `/proc`; the upstream, the load generator "
        "(wrk, or the bench's own asyncio client) and the driver share core 0.",
        "- **Targets**: `direct` (the client talks to the upstream), `nginx` (Debian's nginx "
        "as a plain reverse proxy: one worker, `proxy_buffering off`, HTTP/1.1 keep-alive to "
        "the upstream, defaults otherwise, so `proxy_read_timeout` is 60 s), `proxai` "
        "(`proxai serve --config FILE`, one process).",
        "- **Noise**: the machine may be shared (nothing else was meant to run during this "
        "one). Load average (1 min) at the start → end of each bench: " + "; ".join(loads) + ". "
        "The throughput and scaling benches keep both cores busy themselves (the proxy "
        "on one, wrk and the upstream on the other), the others mostly one; the medians "
        "absorb short disturbances, not all.",
        "",
    ]


def throughput_section(res: dict[str, Any]) -> list[str]:
    rows = res["throughput"]["summary"]
    out = [
        "## Throughput: 40-delta Responses stream",
        "",
        "nginx serves a pre-rendered Responses stream with 40 text deltas (7,951 bytes) from "
        "a file as the upstream; wrk (one thread, POST via a Lua script, keep-alive) drives "
        f"each target for {res['throughput']['seconds']} s per repetition after a 1 s "
        "warm-up. *proxy CPU* is the proxy's CPU time over the run divided by its length "
        "(1.00 = the whole of core 1); *upstream CPU* the same for the upstream nginx, "
        "which shares core 0 with wrk.",
        "",
        "| target | c | streams/s | proxy CPU | streams per proxy core-second | "
        "upstream CPU | latency p50 / p99 (wrk, last byte) | vs direct (streams/s) | "
        "vs nginx (per core-second) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted({r["concurrency"] for r in rows}):
        direct = pick(rows, target="direct", concurrency=c)
        nginx = pick(rows, target="nginx", concurrency=c)
        for r in (direct, nginx, pick(rows, target="proxai", concurrency=c)):
            proxy = r["target"] != "direct"
            out.append(
                f"| {r['target']} | {c} | {n(r['streams_per_s'])} | "
                f"{n(r['proxy_cpu_share'], 2) if proxy else '—'} | "
                f"{n(r['streams_per_core_s']) if proxy else '—'} | "
                f"{n(r['upstream_cpu_share'], 2)} | "
                f"{n(r['p50_ms'], 2)} / {n(r['p99_ms'], 2)} ms | "
                f"{ratio(r['streams_per_s'], direct['streams_per_s']) if proxy else ''} | "
                + (
                    ratio(r["streams_per_core_s"], nginx["streams_per_core_s"])
                    if r["target"] == "proxai"
                    else ""
                )
                + " |"
            )
    errors = sum(r["errors"] for r in rows)
    out += [
        "",
        "Where *proxy CPU* is well below 1.00 the proxy is not the bottleneck: `direct` and "
        "`nginx` are bounded by core 0 (wrk plus the upstream), so their streams/s "
        "understate them and only the per-core-second figure compares proxies. proxai "
        "uses all of core 1 from c=1 on.",
        "",
        f"Non-2xx responses over all runs: {errors}.",
        "",
    ]
    return out


def latency_section(res: dict[str, Any]) -> list[str]:
    rows = res["latency"]["summary"]
    out = [
        "## Latency: added time to first and last byte (paced stream)",
        "",
        "The upstream (`bench/upstream.py paced`: proxai's `ScriptedUpstream`, plain "
        "Python, on core 0) sends the head and `response.created` + `output_item.added` + "
        "the first delta at once, the other 19 deltas 5 ms apart, then the closing "
        "events: about 95 ms per stream. A raw asyncio client on keep-alive connections "
        "(400 requests per repetition at c=16, 100 at c=1, after 2 warm-up requests per "
        "connection) times each request: *TTFB* is the first byte of the response (the "
        "status line), *last byte* the end of the chunked body. The upstream's own timing "
        "(and its jitter under load) is the `direct` row; *added* is a proxy's percentile "
        "minus direct's in the same repetition, then the median over repetitions.",
        "",
        "| target | c | TTFB p50 | TTFB p99 | added p50 | added p99 | last byte p50 | "
        "last byte p99 | added p50 | added p99 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted({r["concurrency"] for r in rows}):
        for name in ("direct", "nginx", "proxai"):
            r = pick(rows, target=name, concurrency=c)
            added = name != "direct"

            def a(field: str, r: Row = r, added: bool = added) -> str:
                return n(r[f"added_{field}"], 2) if added else "—"

            out.append(
                f"| {name} | {c} | {n(r['ttfb_p50_ms'], 2)} | {n(r['ttfb_p99_ms'], 2)} | "
                f"{a('ttfb_p50_ms')} | {a('ttfb_p99_ms')} | {n(r['last_byte_p50_ms'], 1)} | "
                f"{n(r['last_byte_p99_ms'], 1)} | {a('last_byte_p50_ms')} | "
                f"{a('last_byte_p99_ms')} |"
            )
    out += [
        "",
        "All times in ms. A small negative *added* figure means the proxy's run was a "
        "little faster than direct's in that repetition: the noise floor of this "
        "measurement (the Python upstream and the client share core 0). Time to the first "
        "*event* (first body byte), p50 / p99: "
        + "; ".join(
            f"{r['target']} c={r['concurrency']}: {n(r['first_event_p50_ms'], 2)} / "
            f"{n(r['first_event_p99_ms'], 2)}"
            for r in rows
        )
        + ".",
        "",
    ]
    return out


def memory_section(res: dict[str, Any]) -> list[str]:
    rows = res["memory"]["summary"]
    streams = rows[0]["streams"]
    out = [
        "## Memory: RSS per held stream",
        "",
        f"The upstream (`bench/upstream.py slow`) sends the head and `response.created`, "
        f"then nothing. For each proxy (fresh processes each repetition) a warm-up holds 20 "
        f"streams and lets them go; then the proxy's RSS (all its processes, `VmRSS`) is "
        f"read, {streams:,} streams are opened and held until each has its first event, "
        f"and the RSS is read again. `direct` has no proxy and no row.",
        "",
        "| target | RSS before | RSS with streams held | per held stream | vs nginx |",
        "|---|---|---|---|---|",
    ]
    nginx = pick(rows, target="nginx")
    for r in rows:
        out.append(
            f"| {r['target']} | {n(r['rss_before_kb'] / 1024, 1)} MiB | "
            f"{n(r['rss_held_kb'] / 1024, 1)} MiB | {n(r['kb_per_stream'], 1)} KiB | "
            f"{ratio(r['kb_per_stream'], nginx['kb_per_stream']) if r is not nginx else ''} |"
        )
    return [*out, ""]


def longstream_section(res: dict[str, Any]) -> list[str]:
    rows = res["longstream"]["summary"]
    first = rows[0]
    out = [
        "## One long stream",
        "",
        f"nginx serves one Responses stream of {first['events']:,} events (almost all small "
        f"text deltas; {first['bytes'] / 1e6:.1f} MB) from a file. One client reads it "
        "through each target; every byte is checked to arrive, and the event count is "
        "divided by the time from sending the request to the last byte.",
        "",
        "| target | seconds | events/s | MB/s | proxy CPU s | vs direct | vs nginx |",
        "|---|---|---|---|---|---|---|",
    ]
    direct, nginx = pick(rows, target="direct"), pick(rows, target="nginx")
    for r in rows:
        out.append(
            f"| {r['target']} | {n(r['seconds'], 3)} | {n(r['events_per_s'])} | "
            f"{n(r['mb_per_s'], 1)} | {n(r['proxy_cpu_s'], 2)} | "
            f"{ratio(r['events_per_s'], direct['events_per_s']) if r is not direct else ''} | "
            f"{ratio(r['events_per_s'], nginx['events_per_s']) if r['target'] == 'proxai' else ''}"
            " |"
        )
    return [*out, ""]


def scaling_section(res: dict[str, Any]) -> list[str]:
    sc = res["scaling"]
    out = ["## Scaling with `--workers`", ""]
    if sc.get("skipped"):
        return [*out, f"Not measured: {sc['skipped']}", ""]
    out += [
        "Same upstream and wrk load as the throughput bench. One worker is pinned to "
        "core 1; two workers run on both cores (the machine has only two), sharing core 0 "
        "with wrk and the upstream, so two workers cannot reach 2× here and streams/s is "
        "the figure to compare.",
        "",
        "| workers | cores | c | streams/s | proxy CPU | streams per proxy core-second | "
        "vs 1 worker |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sc["summary"]:
        one = pick(sc["summary"], workers=1, concurrency=r["concurrency"])
        out.append(
            f"| {r['workers']} | {r['cores']} | {r['concurrency']} | {n(r['streams_per_s'])} | "
            f"{n(r['proxy_cpu_share'], 2)} | {n(r['streams_per_core_s'])} | "
            f"{ratio(r['streams_per_s'], one['streams_per_s'])} |"
        )
    return [*out, ""]


def stall_section(res: dict[str, Any]) -> list[str]:
    st = res["stall"]
    out = [
        "## The stall: upstream silent mid-arguments",
        "",
        "The upstream (`bench/upstream.py stall`) sends `response.created`, a "
        "`function_call` item and three `function_call_arguments.delta` events, then "
        "nothing, keeping the connection open. proxai runs with `[timeouts] "
        f"tool_arguments = {st['tool_arguments']}`; nginx with its defaults. The client "
        f"gives up after {st['give_up']:.0f} s. {st['summary'][0]['reps']} streams per "
        "target, all at once; all streams of a target got the same: "
        f"{'yes' if all(r['same_for_all'] for r in st['summary']) else 'NO'}.",
        "",
        "| target | status | what the client got | after |",
        "|---|---|---|---|",
    ]
    for r in st["summary"]:
        extra = ""
        if r.get("error_code"):
            extra = f" (`{r['error_code']}`: “{r['error_message']}”)"
        if r["gave_up_after"]:
            after = f"nothing after the deltas (at {n(r['seconds'], 3)} s); the bench gave up"
            after += f" after {r['gave_up_after']:.0f} s"
        else:
            after = f"{n(r['seconds'], 2)} s"
        out.append(f"| {r['target']} | {r['status']} | {r['what']}{extra} | {after} |")
    return [*out, ""]


def write(res: dict[str, Any]) -> None:
    lines = [
        "# Benchmarks (issue 7)",
        "",
        "<!-- Generated by bench/run_all.py (bench/report.py); edit bench/profile.md for the "
        "profile section and rerun `make bench` rather than editing this file. -->",
        "",
        "proxai against a direct connection to the upstream and against nginx as a plain "
        "reverse proxy, measured side by side in one run on one small machine. Rerun "
        "everything with `make bench` (installs Debian's nginx and wrk if missing, and "
        "`.[dev,bench]`); or one part with `.venv/bin/python -m bench.run_all --only "
        "latency` (the others keep their last results); raw results go to "
        "`bench/results/*.json` (not committed).",
        "",
        "![streams per proxy core-second and added TTFB, nginx vs proxai](bench.png)",
        "",
    ]
    for section in (
        targets_section,
        setup_section,
        throughput_section,
        latency_section,
        memory_section,
        longstream_section,
        scaling_section,
        stall_section,
        floor_section,
    ):
        lines += section(res)
    lines.append((ROOT / "bench" / "profile.md").read_text().rstrip())
    (ROOT / "docs" / "bench.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    write(json.loads((RESULTS / "all.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
