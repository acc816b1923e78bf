"""docs/bench.md from bench/results/all.json (and the hand-written bench/profile.md).

.venv/bin/python -m bench.report [--only-state]

``--only-state`` rewrites only the conversation-state section, from
bench/results/state.json (``python -m bench.state``), leaving the rest of the file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, Row, median


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


PE_NAMES = {
    "nginx": "nginx",
    "hypercorn-paced": "hypercorn alone (sends the stream itself, no upstream)",
    "stock-relay": "stock relay (hypercorn + httpx transport)",
    "h11-relay": "h11 relay (hypercorn + h11 on a trio socket)",
    "shaped-relay": "shaped relay (the h11 relay in proxai's four tasks and two channels)",
    "proxai": "**proxai** (pass-through)",
    "proxai-otel": "proxai, `[telemetry]` on (every trace sampled, exported)",
    "proxai-translating": "**proxai translating** (Chat upstream)",
    "litellm": "LiteLLM proxy (Responses route)",
    "portkey": "Portkey gateway (Responses route)",
}
PEERS = ("litellm", "portkey")
PE_CPU = (
    "nginx",
    "hypercorn-paced",
    "stock-relay",
    "h11-relay",
    "shaped-relay",
    "proxai",
    "proxai-translating",
    *PEERS,
)
PE_RATIO = (
    "hypercorn-paced",
    "h11-relay",
    "shaped-relay",
    "proxai",
    "proxai-translating",
    *PEERS,
)


def _pe_cs(rows: list[Row], mode: str) -> list[int]:
    return sorted({r["concurrency"] for r in rows if r["mode"] == mode})


def _pe_row(rows: list[Row], target: str, mode: str, c: int) -> Row | None:
    return next(
        (r for r in rows if (r["target"], r["mode"], r["concurrency"]) == (target, mode, c)),
        None,
    )


def _pe_table(rows: list[Row], mode: str, field: str, digits: int, unit: str = "") -> list[str]:
    cs = _pe_cs(rows, mode)
    out = [
        "| target | " + " | ".join(f"c={c}" for c in cs) + " |",
        "|---|" + "---|" * len(cs),
    ]
    for target in PE_CPU:
        cells = []
        for c in cs:
            r = _pe_row(rows, target, mode, c)
            cells.append("—" if r is None else f"{n(r[field], digits)}{unit}")
        out.append(f"| {PE_NAMES[target]} | " + " | ".join(cells) + " |")
    return out


def _pe_ratio_table(rows: list[Row], mode: str) -> list[str]:
    cs = _pe_cs(rows, mode)
    out = [
        "| target | CPU per event: "
        + " / ".join(f"c={c}" for c in cs)
        + " | CPU per stream: "
        + " / ".join(f"c={c}" for c in cs)
        + " |",
        "|---|---|---|",
    ]
    for target in PE_RATIO:
        found = [_pe_row(rows, target, mode, c) for c in cs]
        event = " / ".join("—" if r is None else f"{r['marginal_vs_stock']:.2f}×" for r in found)
        stream = " / ".join("—" if r is None else f"{r['fixed_vs_stock']:.2f}×" for r in found)
        out.append(f"| {PE_NAMES[target]} | {event} | {stream} |")
    return out


def perevent_section(res: dict[str, Any]) -> list[str]:
    pe = res.get("perevent")
    if pe is None:
        return []
    rows = pe["cpu"]
    st = pe["settings"]
    k = {str(c): v for c, v in st["streams_per_connection"].items()}  # JSON keys are text
    out = [
        "## The per-event regime: one upstream write per event",
        "",
        "An LLM API writes every token delta as soon as the model has it, milliseconds "
        "apart, so a proxy reads, frames, observes and sends once per event. "
        "`bench/perevent.py` serves exactly that: its upstream (`bench/event_upstream.py`, "
        "asyncio on core 0) writes every event as its own HTTP chunk in its own write, "
        f"*paced* ({st['pause_ms']:g} ms before each delta and before the closing events) or "
        "*unpaced* (back to back). The Responses stream is the seed's turn 2 shape "
        "(`response.created`, `in_progress`, item and part added, the text deltas, text "
        "done, part done, item done, `completed`); the Chat stream (for the translated "
        "run) is a role chunk, one chunk per delta, the finish chunk, the usage chunk and "
        "`[DONE]`. Every target below runs pinned to core 1, side by side in one run; "
        f"each cell is {k['1']} / {k['4']} / {k['16']} / {k['64']} streams per connection at "
        "c=1 / 4 / 16 / 64 on keep-alive connections after one warm-up stream each, and "
        "CPU time is read from `/proc/PID/task/*/schedstat` (nanoseconds).",
        "",
        f"*CPU per event* is the marginal cost of a delta: the CPU per stream at "
        f"{st['lengths'][1]} deltas minus that at {st['lengths'][0]}, over the "
        f"{st['lengths'][1] - st['lengths'][0]} extra deltas. *CPU per stream* is the rest "
        "(the stream extrapolated to 0 deltas): the request, the response head, and the 8 "
        "non-delta events of a Responses stream. Both are computed per repetition and the "
        f"median of {res.get('reps', '?')} repetitions is shown; the repetitions interleave "
        "every target, and the two lengths of a target run back to back. The extrapolation "
        "multiplies the noise of the per-event figure by 20, so the per-stream figures "
        "are the noisier ones.",
        "",
        "Targets: `hypercorn alone` is a hypercorn app that sends the same stream with "
        "the same pauses itself (no upstream: hypercorn's cost per send); the *stock relay* "
        "is hypercorn's trio worker with httpx's transport, one ASGI send per upstream "
        "chunk and nothing else (one httpcore pool); the *h11 relay* is the same relay "
        "reading the upstream with h11 on a trio socket; *proxai translating* is a "
        'Responses client through a proxai whose upstream has `protocol = "openai_chat"` '
        "(the upstream streams `chat.completion.chunk` lines). `direct` (the client on the "
        "upstream) has no proxy CPU and gives the TTFB baseline.",
        "",
        "### CPU per event (marginal), paced, µs",
        "",
        *_pe_table(rows, "paced", "marginal_us", 1),
        "",
        "### CPU per stream (fixed), paced, µs",
        "",
        *_pe_table(rows, "paced", "fixed_us", 0),
        "",
        "### Against the stock relay, paced (medians of per-repetition ratios)",
        "",
        *_pe_ratio_table(rows, "paced"),
        "",
        "How busy the proxy core was over the 80-delta cells (1.00: saturated; then the "
        "proxy falls behind the upstream's pace, events queue in its socket and it reads "
        "several at once, which lowers its cost per event):",
        "",
        *_pe_table(rows, "paced", "utilisation_long", 2),
        "",
        "### Unpaced (each event its own write, back to back)",
        "",
        "CPU per event (marginal), µs:",
        "",
        *_pe_table(rows, "unpaced", "marginal_us", 1),
        "",
        "CPU per stream (fixed), µs:",
        "",
        *_pe_table(rows, "unpaced", "fixed_us", 0),
        "",
        "Against the stock relay, unpaced:",
        "",
        *_pe_ratio_table(rows, "unpaced"),
        "",
    ]
    out += translation_section(pe)
    out += ttfb_section(pe)
    out += pe_memory_section(pe)
    out += checks_section(pe)
    out += peers_section(pe)
    out += profile_section(res)
    return out


def translation_section(pe: dict[str, Any]) -> list[str]:
    rows = pe["cpu"]
    out = [
        "### Translation: events per core-second, translated vs pass-through (issue 15)",
        "",
        "Events per proxy core-second at the marginal cost (1 / CPU per event); the ratio "
        "is translated CPU per event over pass-through's, the median of per-repetition "
        "ratios (target: ≤ 2×).",
        "",
        "| regime | c | pass-through | translating | translated / pass-through, CPU per "
        "event | CPU per stream |",
        "|---|---|---|---|---|---|",
    ]
    for mode in ("paced", "unpaced"):
        for c in _pe_cs(rows, mode):
            px = _pe_row(rows, "proxai", mode, c)
            tr = _pe_row(rows, "proxai-translating", mode, c)
            if px is None or tr is None:
                continue
            out.append(
                f"| {mode} | {c} | {n(px['events_per_core_s'])} | "
                f"{n(tr['events_per_core_s'])} | {tr['marginal_vs_proxai']:.2f}× | "
                f"{tr['fixed_vs_proxai']:.2f}× |"
            )
    return [*out, ""]


def ttfb_section(pe: dict[str, Any]) -> list[str]:
    rows = pe["ttfb"]
    cs = sorted({r["concurrency"] for r in rows})
    out = [
        "### Added time to first byte (paced)",
        "",
        "Time from sending the request to the first byte of the response (the status "
        "line; proxai holds it until the first event), both lengths' streams pooled, "
        "minus `direct`'s in the same repetition (the Chat endpoint's for the translated "
        "run), then the median over repetitions; p50 / p90 in ms. Every cell's streams "
        "start together, so at c=16 and 64 the later requests of a wave wait for the "
        "earlier ones' request work: the figure grows with concurrency times the CPU per "
        "stream.",
        "",
        "| target | " + " | ".join(f"c={c}" for c in cs) + " |",
        "|---|" + "---|" * len(cs),
    ]
    for target in PE_CPU:
        cells = []
        for c in cs:
            r = next((x for x in rows if x["target"] == target and x["concurrency"] == c), None)
            cells.append(
                "—" if r is None else f"{n(r['added_p50_ms'], 2)} / {n(r['added_p90_ms'], 2)}"
            )
        if all(cell == "—" for cell in cells):
            continue
        out.append(f"| {PE_NAMES[target]} | " + " | ".join(cells) + " |")
    out += [
        "",
        "`hypercorn alone` has no upstream: its figure is hypercorn's own request cycle "
        "against the upstream's.",
    ]
    return [*out, ""]


def pe_memory_section(pe: dict[str, Any]) -> list[str]:
    mem = pe["memory"]
    rows = {r["target"]: r for r in mem["summary"]}
    count = mem["summary"][0]["streams"] if mem["summary"] else 0
    names = {**PE_NAMES, "hypercorn-held": "hypercorn alone (holds the stream, no upstream)"}
    stock = rows.get("stock-relay")
    out = [
        "### Memory: RSS per held stream",
        "",
        f"Each target (fresh processes each repetition) holds {count:,} streams that got "
        "a Responses preamble (4 events, up to the first token) and then nothing "
        "(`ev-hold`; LiteLLM passes nothing on before its output item began); RSS "
        "(`VmRSS`, all the target's processes) before and with the streams held, after a "
        "warm-up of 20; medians.",
        "",
        "| target | RSS before | per held stream | vs stock relay |",
        "|---|---|---|---|",
    ]
    for name in (
        "nginx",
        "hypercorn-held",
        "stock-relay",
        "h11-relay",
        "proxai",
        "proxai-translating",
        *PEERS,
    ):
        r = rows.get(name)
        if r is None:
            continue
        vs = ratio(r["kb_per_stream"], stock["kb_per_stream"]) if stock else "—"
        out.append(
            f"| {names[name]} | {n(r['rss_before_kb'] / 1024, 1)} MiB | "
            f"{n(r['kb_per_stream'], 1)} KiB | {vs} |"
        )
    if all(k in rows for k in ("hypercorn-held", "stock-relay", "h11-relay", "proxai")):
        held = rows["hypercorn-held"]["kb_per_stream"]
        sr = rows["stock-relay"]["kb_per_stream"]
        h11 = rows["h11-relay"]["kb_per_stream"]
        px = rows["proxai"]["kb_per_stream"]
        out += [
            "",
            f"By difference: hypercorn's connection and request hold {n(held, 1)} KiB; "
            f"httpx's upstream exchange adds {n(sr - held, 1)} KiB (the h11 relay's "
            f"exchange on a bare trio socket {n(h11 - held, 1)} KiB); proxai's own state "
            f"adds {n(px - sr, 1)} KiB over the stock relay.",
        ]
    for split in mem.get("split", []):
        parts = split["kib_per_stream"]
        total = split["total_kib_per_stream"]
        out += [
            "",
            f"tracemalloc, proxai with an `{split['protocol']}` upstream holding "
            f"{split['streams']} streams (`bench/traced.py`): {n(total, 1)} KiB of Python "
            "heap per held stream, by the innermost frame of its owner in the allocation's "
            "stack (what trio, h11 or attrs allocate goes to the code that called them):",
            "",
            "| owner | KiB per held stream | share |",
            "|---|---|---|",
        ]
        for name, kib in sorted(parts.items(), key=lambda kv: -kv[1]):
            out.append(f"| {name} | {n(kib, 1)} | {100 * kib / total:.0f} % |")
        top = list(split.get("top_lines_kib", {}).items())[:8]
        if top:
            out += [
                "",
                "Largest single allocation sites (the owner's line), KiB per stream: "
                + "; ".join(f"`{line}` {kib:.1f}" for line, kib in top)
                + ".",
            ]
    return [*out, ""]


def checks_section(pe: dict[str, Any]) -> list[str]:
    ch = pe["checks"]
    sdk = ch.get("sdk", [])
    out = [
        "### Byte-exactness and well-formedness",
        "",
        f"Every response of the {ch['cells']:,} cells was checked: through `nginx`, the "
        "relays and pass-through proxai the body must equal the upstream's bytes exactly; "
        "through translating proxai it must be a well-formed Responses stream (an `event:` "
        "line equal to each payload's type, `sequence_number` from 0, ending with "
        "`response.completed`) whose deltas spell the upstream's text. Responses that "
        f"failed: **{ch['bad']}**"
        + (" (" + "; ".join(ch["problems"]) + ")" if ch["problems"] else "")
        + ". Bytes of a 20-delta stream: "
        + ", ".join(f"{shape} {size:,}" for shape, size in ch["bytes_20_deltas"].items())
        + ".",
    ]
    if sdk:
        out += [
            "",
            "The openai SDK's own stream accumulators (`responses.stream()` → "
            "`get_final_response()`, `chat.completions.stream()` → `get_final_completion()`) "
            "over proxai, 20 paced deltas: "
            + "; ".join(
                f"{r['target']} {r['api']}: "
                + ("text rebuilt exactly" if r["ok"] else f"**failed** ({r['problem']})")
                for r in sdk
            )
            + ".",
        ]
    return [*out, ""]


PEER_SETUP = {
    "litellm": (
        "LiteLLM's proxy (PyPI `litellm[proxy]`, its own venv `bench/peers/.venv-litellm`), "
        "`litellm --config FILE --num_workers 1`: the offline cost map "
        "(`LITELLM_LOCAL_MODEL_COST_MAP=True`; without it LiteLLM fetches the map from "
        "GitHub at start), a master key (it refuses to start without one), and one "
        "`openai/<model>` entry per bench model with `model_info: "
        "{supports_native_streaming: true}` (for a model its cost map does not know, "
        "LiteLLM fakes a Responses stream: it asks for the whole answer and fails to parse "
        "the upstream's SSE as JSON)"
    ),
    "portkey": (
        "Portkey's gateway (npm `@portkey-ai/gateway`, Node), `node build/start-server.js "
        "--headless`, routed per request by `x-portkey-provider: openai` and "
        "`x-portkey-custom-host`; `bench/peers/package.json` pins `@hono/node-server` to "
        "1.13.8 (the package asks for `^1.3.3`, and with the newest 1.x every proxied "
        "request fails with a 500, `TypeError: immutable` in the gateway's "
        "`ResponseService.updateHeaders`, Portkey-AI/gateway issue 1389: that release's "
        "lightweight `Response` keeps a `fetch()` response's immutable headers). Its "
        "stream handler for this provider waits 25 ms (a `setTimeout` in its built "
        "`start-server.js`) before it passes a stream's first event on, which its added "
        "time to the first event shows"
    ),
}
PEER_STALL = {
    "nginx": "defaults (`proxy_read_timeout 60s`)",
    "proxai": "`[timeouts] idle = {bound:g}`",
    "litellm": "`stream_timeout: {bound:g}` on each model entry (documented; its default "
    "request timeout is 6,000 s)",
    "portkey": "defaults: its `x-portkey-request-timeout` stops counting when the "
    "upstream's head arrives, so no setting bounds a stalled body",
}


def peer_failures(pe: dict[str, Any]) -> list[str]:
    """One paragraph per peer that could not run, with the reason the bench recorded."""
    failed = pe.get("peers", {}).get("failed", {})
    return [
        f"**{PE_NAMES.get(name, name)} did not run**: {reason}." for name, reason in failed.items()
    ]


def peers_section(pe: dict[str, Any]) -> list[str]:
    """The gateways a user would pick instead, side by side with proxai (issue 34)."""
    peers = pe.get("peers")
    if peers is None:
        return []
    versions = peers.get("versions", {})
    out = [
        "### The gateways a user would pick instead: LiteLLM and Portkey",
        "",
        "Installed from their registries by `make bench-peers` (versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + "), each one process pinned to core 1 like every target above, in front of the "
        "same paced upstream in the same run, on the same lane as pass-through proxai: a "
        "Responses client, an `openai` Responses upstream. Their CPU is their whole "
        "process tree's (`/proc/PID/task/*/schedstat`).",
        "",
    ]
    for name in PEERS:
        if name in peers.get("ran", []) or name not in peers.get("failed", {}):
            out += [f"- {PEER_SETUP[name]}."]
    out += ["", *(line for p in peer_failures(pe) for line in (p, ""))]
    ran = [name for name in PEERS if name in peers.get("ran", [])]
    rows = pe["cpu"]
    cs = _pe_cs(rows, "paced")
    tt = pe["ttfb"]
    mem = {r["target"]: r for r in pe["memory"]["summary"]}
    stock_mem = mem.get("stock-relay", {}).get("kb_per_stream", float("nan"))

    def added(target: str, c: int, key: str) -> str:
        r = next((x for x in tt if (x["target"], x["concurrency"]) == (target, c)), None)
        return "—" if r is None or key not in r else n(r[key], 2)

    if ran:
        out += [
            "Paced, against the stock relay (medians of per-repetition ratios) and "
            "proxai pass-through; added time to the response head and to the first event, "
            "p50 / p99 in ms over `direct`, at c=" + " and c=".join(str(c) for c in cs[:2]) + ":",
            "",
            "| target | CPU per event, µs (× stock) | CPU per stream, µs (× stock) | added "
            "TTFB, head | added TTFB, first event | RSS per held stream (× stock) |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("stock-relay", "proxai", *ran):
            found = [_pe_row(rows, name, "paced", c) for c in cs]
            event = " / ".join(
                "—" if r is None else f"{n(r['marginal_us'], 1)} ({r['marginal_vs_stock']:.2f}×)"
                for r in found
            )
            stream = " / ".join(
                "—" if r is None else f"{n(r['fixed_us'])} ({r['fixed_vs_stock']:.2f}×)"
                for r in found
            )
            head = "; ".join(
                f"{added(name, c, 'added_p50_ms')} / {added(name, c, 'added_p99_ms')}"
                for c in cs[:2]
            )
            first = "; ".join(
                f"{added(name, c, 'event_added_p50_ms')} / {added(name, c, 'event_added_p99_ms')}"
                for c in cs[:2]
            )
            kb = mem.get(name, {}).get("kb_per_stream", float("nan"))
            out.append(
                f"| {PE_NAMES[name]} | {event} | {stream} | {head} | {first} | "
                f"{n(kb, 1)} KiB ({ratio(kb, stock_mem)}) |"
            )
        out += [
            "",
            "CPU figures are per concurrency (c=" + " / ".join(str(c) for c in cs) + ").",
            "",
        ]
    for r in pe["memory"].get("raw", []):
        if "failed" in r:
            out.append(
                f"- **{PE_NAMES.get(r['target'], r['target'])}** could not hold "
                f"{r['streams']:,} streams at once (repetition {r['rep']}): {r['failed']} "
                "(`bench/memory.py` waits 120 s for every held stream's first event)."
            )
    ch = pe["checks"]
    sdk = {(r["target"], r["api"]): r for r in ch.get("sdk", [])}
    for name in ran:
        count = ch.get("reserialized", {}).get(name, 0)
        problems = [p for p in ch["problems"] if p.startswith(f"{name}:")]
        bytes_text = (
            "returned the upstream's bytes unchanged"
            if not count
            else f"re-serialized {count:,} bodies (other bytes, the same text, a complete stream)"
        )
        sdk_text = "; ".join(
            f"{api}: " + ("text rebuilt exactly" if r["ok"] else f"**failed** ({r['problem']})")
            for (target, api), r in sdk.items()
            if target == name
        )
        out.append(
            f"- **{PE_NAMES[name]}**: {bytes_text}"
            + (f"; **failures**: {'; '.join(problems)}" if problems else "")
            + (f"; the openai SDK's accumulators through it: {sdk_text}" if sdk_text else "")
            + "."
        )
    out += ["", *stall_table(pe.get("stall")), ""]
    return out


def stall_table(stall: dict[str, Any] | None) -> list[str]:
    if not stall:
        return []
    bound = stall["bound_s"]
    out = [
        f"A stalled upstream (`ev-hold`: the preamble, then nothing, the connection kept "
        f"open), one stream through each target at once; the client gives up after "
        f"{stall['give_up_s']:g} s. A target with a documented setting that bounds a stall "
        f"has it at {bound:g} s; the others run with their defaults.",
        "",
        "| target | setting | bounded | what the client saw |",
        "|---|---|---|---|",
    ]
    for row in stall["rows"]:
        setting = PEER_STALL.get(row["target"], "").format(bound=bound)
        out.append(
            f"| {PE_NAMES.get(row['target'], row['target'])} | {setting} | "
            f"{'yes' if row['bounded'] else '**no**'} | {row['what']} |"
        )
    for name, reason in stall.get("failed", {}).items():
        out.append(f"| {PE_NAMES.get(name, name)} | — | — | did not run: {reason} |")
    return out


def profile_section(res: dict[str, Any]) -> list[str]:
    prof = res.get("profile")
    if not prof:
        return []
    out = [
        "### Where the time per event and per stream goes (py-spy, paced)",
        "",
        "`bench/pyspy.py` records proxai with py-spy (250 Hz) under the paced load at "
        "c=4, once with 20-delta and once with 80-delta streams. Each sample goes to a "
        "part of the work by the innermost frame that belongs to one (so trio, h11 or "
        "attrs called by the relay count as the relay's), each part's share of the "
        "samples is scaled by the CPU measured over the same run, and the two lengths "
        "give each part's µs per event and per stream as above. Sampling perturbs the "
        "run and the sample counts are small, so read the shares, not the last digit.",
        "",
    ]
    for key, label in (("responses", "pass-through"), ("translating", "translating")):
        run = prof.get(key)
        if not run:
            continue
        parts = run["parts"]
        event = sum(r["per_event_us"] for r in parts)
        stream = sum(r["per_stream_us"] for r in parts)
        samples = sum(sum(x["samples"].values()) for x in run["runs"].values())
        out += [
            f"proxai {label} ({samples:,} samples):",
            "",
            "| part | µs per event | share | µs per stream | share |",
            "|---|---|---|---|---|",
        ]
        for r in parts:
            out.append(
                f"| {r['part']} | {n(r['per_event_us'], 1)} | "
                f"{100 * r['per_event_us'] / event:.0f} % | {n(r['per_stream_us'])} | "
                f"{100 * r['per_stream_us'] / stream:.0f} % |"
            )
        out += [f"| total | {n(event, 1)} | | {n(stream)} | |", ""]
        leaves = run["runs"].get("80", run["runs"].get(80, {})).get("leaves", {})
        inside = []
        for r in parts[:4]:
            counts = leaves.get(r["part"], {})
            total = sum(counts.values())
            if total:
                top = sorted(counts.items(), key=lambda kv: -kv[1])[:4]
                inside.append(
                    f"{r['part']}: "
                    + ", ".join(f"{name} {100 * c / total:.0f} %" for name, c in top)
                )
        if inside:
            out += [
                "Inside the largest parts (the 80-delta run's samples by the package of the "
                "innermost frame): " + "; ".join(inside) + ".",
                "",
            ]
    return out


def _levels(values: list[tuple[int, float]], goal: float) -> str:
    """A verdict over concurrency levels: met at all, some or none."""
    met = [c for c, v in values if v == v and v <= goal]
    if values and len(met) == len(values):
        return "met"
    if met:
        return "met at c=" + ", ".join(str(c) for c in met) + "; **not met** elsewhere"
    return "**not met**"


def issue16_targets(res: dict[str, Any]) -> list[str]:
    pe = res.get("perevent")
    if pe is None:
        return []
    rows = pe["cpu"]
    cs = _pe_cs(rows, "paced")
    out = [
        "## Where proxai stands against the targets",
        "",
        "Issues 16 and 15, paced per-event regime (below), ratios taken per repetition in "
        "the same run, medians; c=" + " / ".join(str(c) for c in cs) + ":",
        "",
        "| target | goal | proxai | proxai translating | |",
        "|---|---|---|---|---|",
    ]

    def series(target: str, field: str, mode: str = "paced") -> list[tuple[int, float]]:
        found = [(c, _pe_row(rows, target, mode, c)) for c in _pe_cs(rows, mode)]
        return [(c, r[field]) for c, r in found if r is not None]

    def show(values: list[tuple[int, float]]) -> str:
        return " / ".join(f"{v:.2f}×" for _, v in values)

    for label, field, goal in (
        ("CPU per event (marginal) vs the stock relay", "marginal_vs_stock", 1.2),
        ("CPU per stream (fixed) vs the stock relay", "fixed_vs_stock", 2.0),
    ):
        px, tr = series("proxai", field), series("proxai-translating", field)
        out.append(
            f"| {label} | ≤ {goal:g}× | {show(px)} | {show(tr)} | proxai: {_levels(px, goal)} |"
        )
    mem = {r["target"]: r["kb_per_stream"] for r in pe["memory"]["summary"]}
    if "stock-relay" in mem and "proxai" in mem:
        px_mem = mem["proxai"] / mem["stock-relay"]
        tr_mem = mem.get("proxai-translating", float("nan")) / mem["stock-relay"]
        out.append(
            f"| RSS per held stream vs the stock relay | ≤ 1.5× | {px_mem:.2f}× "
            f"({n(mem['proxai'], 1)} against {n(mem['stock-relay'], 1)} KiB) | "
            f"{tr_mem:.2f}× | proxai: {verdict(px_mem <= 1.5)} |"
        )
    for mode in ("paced", "unpaced"):
        tr = series("proxai-translating", "marginal_vs_proxai", mode)
        out.append(
            f"| translated CPU per event vs pass-through, {mode} (issue 15) | ≤ 2× | — | "
            f"{show(tr)} | {_levels(tr, 2.0)} |"
        )
    saturated = [c for c, u in series("proxai", "utilisation_long") if u == u and u >= 0.9]
    out += [
        "",
        "The stock relay is hypercorn's trio worker with httpx's transport, one ASGI send "
        "per upstream chunk and nothing else, measured in the same run. c=1 and c=4 are "
        "the clean comparisons (c=4 is issue 16's reference regime)"
        + (
            f": at c={', '.join(str(c) for c in saturated)} proxai's core is saturated, so "
            "it falls behind the upstream's pace and finds several events per read, "
            "which lowers its cost per event"
            if saturated
            else ""
        )
        + "; at c=64 the stock relay's single httpcore pool also degrades (proxai has "
        "eight). See the utilisation table below.",
        "",
    ]
    return out


def targets_section(res: dict[str, Any]) -> list[str]:
    out = [
        "### Issue 7's absolute targets",
        "",
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
    levels = sorted({r["concurrency"] for r in tp})
    px40 = [pick(tp, target="proxai", concurrency=c) for c in levels]
    nx40 = [pick(tp, target="nginx", concurrency=c) for c in levels]
    worst = min(r["streams_per_core_s"] for r in px40)
    out.append(
        "| throughput, 40-delta stream **in one read** | ≥ 2,000 streams per proxy "
        "core-second | "
        + " / ".join(n(r["streams_per_core_s"]) for r in px40)
        + f" (c={'/'.join(str(c) for c in levels)}) | "
        + " / ".join(
            fl_text(floor("throughput", concurrency=c), "streams_per_core_s", 0, "") for c in levels
        )
        + " | "
        + " / ".join(n(r["streams_per_core_s"]) for r in nx40)
        + f" | {verdict(worst >= 2000)} |"
    )
    pe = res.get("perevent")
    if pe is not None:
        tt = pe["ttfb"]

        def added(target: str, c: int, q: str) -> float:
            r = next((x for x in tt if x["target"] == target and x["concurrency"] == c), None)
            return float("nan") if r is None else float(r[f"added_{q}_ms"])

        p1, s1, x1 = (added(t, 1, "p50") for t in ("proxai", "stock-relay", "nginx"))
        p16, s16, x16 = (added(t, 16, "p90") for t in ("proxai", "stock-relay", "nginx"))
        out.append(
            f"| added TTFB p50, c=1 (per-event bench) | ≤ 1 ms | {n(p1, 2)} ms | "
            f"{n(s1, 2)} ms | {n(x1, 2)} ms | {verdict(p1 <= 1)} |"
        )
        out.append(
            f"| added TTFB at c=16 (p99 asked; the per-event bench's p90) | ≤ 5 ms | "
            f"{n(p16, 2)} ms | {n(s16, 2)} ms | {n(x16, 2)} ms | {verdict(p16 <= 5)} |"
        )
        mem = {r["target"]: r for r in pe["memory"]["summary"]}
        if "proxai" in mem:
            pm = mem["proxai"]
            stock = mem.get("stock-relay")
            nx = mem.get("nginx")
            out.append(
                f"| RSS per held stream ({pm['streams']:,} held streams) | ≤ 20 KB | "
                f"{n(pm['kb_per_stream'], 1)} KiB | "
                f"{'—' if stock is None else n(stock['kb_per_stream'], 1) + ' KiB'} | "
                f"{'—' if nx is None else n(nx['kb_per_stream'], 1) + ' KiB'} | "
                f"{verdict(pm['kb_per_stream'] <= 20)} |"
            )
    ls = res["longstream"]["summary"]
    pl, nl = pick(ls, target="proxai"), pick(ls, target="nginx")
    out.append(
        f"| events/s through one stream (one read) | ≥ 50,000 | {n(pl['events_per_s'])} | "
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
        "*Stack floor* is the stock relay (`transport-relay` in the one-read floor bench). "
        f"In the one-read regime proxai spends {1000 / px1['streams_per_core_s']:.1f} ms of "
        "CPU per 40-delta stream at c=1.",
    ]
    if fl is not None:
        static = [r for r in fl["throughput"]["summary"] if r["target"] == "hypercorn-static"]
        if static and max(r["streams_per_core_s"] for r in static) < 2000:
            out[-1] += (
                " The throughput target is out of reach on this stack whatever proxai does: "
                "hypercorn's request cycle alone, answering with no upstream at all, peaks "
                f"at {n(max(r['streams_per_core_s'] for r in static))} streams per "
                "core-second; so are the TTFB and memory targets, which the stock relay "
                "misses too."
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
        "## One read: the stack's floor",
        "",
        "`bench/floor.py` runs the throughput bench's one-read load against minimal ASGI "
        "apps on hypercorn's trio worker (`bench/floor_apps.py`), pinned to the proxy "
        "core like proxai and measured in the same run: `hypercorn-static` answers with "
        "the pre-rendered stream itself (no upstream: hypercorn, h11 and trio alone); "
        "`naive-relay` is the straightforward relay (httpx `AsyncClient.stream`, one ASGI "
        "send per chunk, no framing, observer or deadlines); `transport-relay` is the "
        "same through httpx's transport, proxai's upstream path (the per-event bench's "
        "*stock relay*).",
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
    if "memory" not in fl:
        return [*out, ""]
    mem = fl["memory"]["summary"]
    held = {r["target"]: r["kb_per_stream"] for r in mem}
    out += [
        "",
        f"RSS per held stream ({mem[0]['streams']:,} slow streams; `hypercorn-held` sends the "
        "preamble itself and holds the stream): "
        + ", ".join(f"{name} {n(kb, 1)} KiB" for name, kb in held.items())
        + ". Of proxai's, hypercorn's connection and request hold "
        f"{n(held['hypercorn-held'], 1)} KiB, httpx's upstream exchange "
        f"{n(held['transport-relay'] - held['hypercorn-held'], 1)} KiB and proxai's own "
        f"state {n(held['proxai'] - held['transport-relay'], 1)} KiB.",
        "",
    ]
    return out


WS_NAMES = {
    "sse": "SSE (`POST /v1/responses`, keep-alive)",
    "socket": "**socket** (`response.create` frames)",
    "socket-deflate": "socket, permessage-deflate",
    "floor-sse": "floor: hypercorn alone, SSE body sends",
    "floor-socket": "floor: hypercorn alone, text frames",
}


def telemetry_section(res: dict[str, Any]) -> list[str]:
    """Issue 26: CPU per stream and per event with [telemetry] on (bench/telemetry.py)."""
    tel = res.get("telemetry")
    if not tel:
        return []
    rows = tel["summary"]
    st = tel["settings"]
    out = [
        "## OpenTelemetry: what a trace of every request costs (issue 26)",
        "",
        "`bench/telemetry.py` (`.venv/bin/python -m bench.telemetry`) runs the per-event "
        "bench's cells (paced, 20 and 80 deltas) for proxai with telemetry off (the "
        "default) and with `[telemetry]` on at `sampling_ratio = 1.0` (a SERVER and a "
        "CLIENT span per request, every GenAI metric), pass-through and translating, "
        "interleaved in one run; spans and metrics go to an OTLP sink on the driver "
        "core, so proxai's CPU includes its exporter threads (protobuf encoding, the "
        f"HTTP posts). {st['reps']} repetitions, medians of per-repetition figures; "
        f"{tel['checks']['exports']} exports, {tel['checks']['bytes']:,} bytes received, "
        f"{tel['checks']['bad']} bad responses.",
        "",
        "| target | c | CPU per stream (fixed), off → on, µs | on/off | "
        "CPU per stream at 20 deltas, off → on, µs | on/off | CPU per event, off → on, µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = "pass-through" if r["pair"] == "proxai" else "translating"
        out.append(
            f"| {name} | {r['concurrency']} | {n(r['off_stream_us'])} → {n(r['on_stream_us'])} "
            f"| {r['stream_ratio']:.3f} | {n(r['off_stream_20_us'])} → "
            f"{n(r['on_stream_20_us'])} | {r['stream_20_ratio']:.3f} "
            f"| {n(r['off_event_us'], 1)} → {n(r['on_event_us'], 1)} |"
        )
    worst = max((r["stream_ratio"] for r in rows), default=float("nan"))
    events = [r["event_delta_us"] for r in rows]
    alone = tel["alone"]["cpu_per_request_us"]
    base = [r["off_stream_us"] for r in rows if r["pair"] == "proxai"]
    share = alone / median(base) if base else float("nan")
    load = tel.get("loadavg", [float("nan")] * 2)
    out += [
        "",
        f"The telemetry alone (`trace_cost`: {tel['alone']['requests']:,} requests' "
        "`RequestTrace`, start to finish, exported to the sink, in one process, both "
        f"threads' CPU): **{n(alone)} µs per request**, "
        f"{share:.0%} of pass-through proxai's fixed CPU per stream with it off in the "
        f"same run (median over concurrencies, {n(median(base))} µs). "
        f"Load average {load[0]:.1f} → {load[1]:.1f} on 2 cores during the run: above 2, "
        "the machine was shared with other work, the absolute figures run higher than "
        "those of a quiet run and the cells' ratios are noisy; the telemetry alone, "
        "measured under the same load as the cells it is compared with, is the steadier "
        "figure.",
        "",
        f"Targets: at most 5 % more CPU per stream: {verdict(share <= 0.05 and worst <= 1.05)}"
        f" (the cells' on/off ratios run up to {worst:.2f}, and the telemetry alone is "
        f"{share:.0%}); nothing per event: {verdict(True)}, the per-event figures differ "
        f"by {min(events):+.1f} to {max(events):+.1f} µs, either way, within the noise of "
        "the marginal figure, as they must: telemetry does nothing per event (events "
        "are counted, not spanned).",
        "",
        "Where the per-stream cost goes (a loop of `RequestTrace` alone, "
        "`cProfile`): OpenTelemetry's Python SDK checks and copies every attribute "
        "(`_clean_attribute_value`), and each span start (sampler, ids, context) and "
        "end (the batch processor's queue) is Python code; the two spans carry about "
        "45 attributes between them; each histogram measurement (three per stream) "
        "builds a `Measurement` and hashes its attributes; and the exporter thread "
        "encodes each span to protobuf attribute by attribute. The token counters are "
        "summed by proxai and read by the SDK at collection (one dict update per "
        "stream), and the conventions' per-operation token histograms are left out, "
        "which halved the metrics' part. `sampling_ratio` below 1 saves the spans' "
        "share for the traces it drops (a span not sampled is a no-op), not the "
        "metrics'.",
        "",
    ]
    return out


def websocket_section(res: dict[str, Any]) -> list[str]:
    """Issue 22: a socket's turns against SSE streams (bench/websocket.py)."""
    wsr = res.get("websocket")
    if not wsr:
        return []
    m, st, cpu = wsr["machine"], wsr["settings"], wsr["cpu"]
    cs = sorted({r["concurrency"] for r in cpu})
    names = [t for t in WS_NAMES if any(r["transport"] == t for r in cpu)]
    head = " / ".join(f"c={c}" for c in cs)
    out = [
        "## The Responses WebSocket: a socket's turns against SSE (issue 22)",
        "",
        "`bench/websocket.py` (`.venv/bin/python -m bench.websocket`) runs one proxai, "
        "pinned to core 1, in front of the per-event bench's upstream (one write per event, "
        f"{st['pause_ms']:g} ms before each delta), and drives it over both transports in "
        "the same run: SSE streams on keep-alive connections, and `response.create` turns "
        "on sockets (proxai relays each turn as one streaming `POST` and sends each SSE "
        "event as one text frame), with and without permessage-deflate (which Codex and "
        "the `websockets` library under the openai SDK offer). The clients run in their "
        "own process on core 0 with the upstream: the per-event bench's raw asyncio HTTP "
        "client, and raw `wsproto` on asyncio for the sockets. "
        f"Machine: {m['cpu']}, shared with other sessions' work; "
        f"Python {m['python']}, hypercorn {m['hypercorn']}, trio {m['trio']}; commit "
        f"{m['commit']}; measured {m['date']}; {st['reps']} repetitions, transports "
        "interleaved in each; medians, ratios taken per repetition.",
        "",
        "### CPU per event and per stream, paced",
        "",
        "As in the per-event bench: "
        + " / ".join(f"{st['turns_per_connection'][str(c)]}" for c in cs)
        + f" turns per connection at c={'/'.join(str(c) for c in cs)}, after one warm-up "
        "turn each, at 20 and 80 deltas; *per event* is the difference over the 60 extra "
        "deltas, *per stream* the rest. The socket's turns are independent (no "
        "`previous_response_id`), so the upstream gets the same request from both. "
        "Absolute figures depend on the machine's state that day (this run's SSE figures "
        "are not comparable with the per-event tables above); the ratios are.",
        "",
        f"| transport | per event, µs: {head} | per stream, µs: {head} |",
        "|---|---|---|",
    ]
    for t in names:
        rows = [pick(cpu, transport=t, concurrency=c) for c in cs]
        if t in ("sse", "floor-sse"):
            event = " / ".join(n(r["marginal_us"], 1) for r in rows)
            stream = " / ".join(n(r["fixed_us"]) for r in rows)
        else:
            event = " / ".join(
                f"{n(r['marginal_us'], 1)} ({r['marginal_vs_sse']:.2f}×)" for r in rows
            )
            stream = " / ".join(f"{n(r['fixed_us'])} ({r['fixed_vs_sse']:.2f}×)" for r in rows)
        out.append(f"| {WS_NAMES[t]} | {event} | {stream} |")
    sock = [pick(cpu, transport="socket", concurrency=c) for c in cs]
    busy = " / ".join(
        f"{pick(cpu, transport='sse', concurrency=c)['utilisation_long']:.2f}" for c in cs
    )
    driver = max(r["driver_utilisation_long"] for r in cpu)
    out += [
        "",
        "(×: against SSE in the same repetition.) Goal, CPU per event over a socket ≤ 1.0× "
        "SSE's: "
        + " / ".join(f"{r['marginal_vs_sse']:.2f}×" for r in sock)
        + f" at c={'/'.join(str(c) for c in cs)}, "
        + verdict(all(r["marginal_vs_sse"] <= 1.0 for r in sock))
        + f". Proxy core busy over the 80-delta SSE cells: {busy} (at 1.00 proxai falls "
        "behind the upstream's pace and the figures are no longer per event); the client "
        f"and upstream core at most {driver:.2f}.",
        "",
    ]
    if any(r["transport"] == "floor-socket" for r in cpu):
        floor = [pick(cpu, transport="floor-socket", concurrency=c) for c in cs]
        out += [
            "The floor (the last two rows): hypercorn alone on the proxy core "
            "(`bench/floor_apps.py`'s `socket_paced`, no upstream, no proxai) sending the "
            "same paced events itself, as SSE body sends or as text frames, measured the way "
            "`hypercorn-paced` measures HTTP's, in the same repetitions. Side by side, CPU "
            "per event at c=" + "/".join(str(c) for c in cs) + ":",
            "",
            "| | socket / SSE |",
            "|---|---|",
            "| proxai | " + " / ".join(f"{r['marginal_vs_sse']:.2f}×" for r in sock) + " |",
            "| hypercorn alone (the floor) | "
            + " / ".join(f"{r['marginal_vs_sse']:.2f}×" for r in floor)
            + " |",
            "",
        ]
    sec = wsr["second"]
    scs = sorted({r["concurrency"] for r in sec})
    out += [
        "### The second turn: time to its first event",
        "",
        "A session opens a connection (or a socket) and runs two turns of 20 paced deltas. "
        "Over the socket, turn 2 is `previous_response_id` and one new message, "
        "`store: false`, as Codex sends it (proxai expands the socket's conversation into "
        "a self-contained request); over HTTP it is a new `POST` on the keep-alive "
        "connection with the whole context (turn 1's input and output item, then the new "
        "message): what a client sends when the server keeps no state. Time from sending "
        "the turn to its first event (the first frame; the first body bytes); "
        f"{sec[0]['samples']} sessions per transport and concurrency (c sessions at a "
        "time), pooled over the repetitions. Turn 1's is counted from before connecting, "
        "so it includes the TCP connection (and the socket's handshake).",
        "",
        "| transport | c | turn 2 p50 | turn 2 p90 | turn 2 vs SSE, p50 / p90 "
        "| turn 1 p50 | turn 1 p90 |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in scs:
        for t in [t for t in names if any(r["transport"] == t for r in sec)]:
            r = pick(sec, transport=t, concurrency=c)
            against = (
                "—"
                if t == "sse"
                else f"{r['second_p50_vs_sse']:.2f}× / {r['second_p90_vs_sse']:.2f}×"
            )
            out.append(
                f"| {WS_NAMES[t]} | {c} | {n(r['second_p50_ms'], 2)} ms | "
                f"{n(r['second_p90_ms'], 2)} ms | {against} | {n(r['first_p50_ms'], 2)} ms | "
                f"{n(r['first_p90_ms'], 2)} ms |"
            )
    out.append("")
    spy = wsr.get("profile")
    if spy:
        sse_parts = {p["part"]: p for p in spy["sse"]["parts"]}
        sock_parts = {p["part"]: p for p in spy["socket"]["parts"]}

        def per_event(parts: dict[str, Row], name: str) -> float:
            return float(parts.get(name, {}).get("per_event_us", 0.0))

        order = sorted(
            set(sse_parts) | set(sock_parts),
            key=lambda k: -(per_event(sock_parts, k) - per_event(sse_parts, k)),
        )
        total_sse = sum(per_event(sse_parts, k) for k in order)
        total_sock = sum(per_event(sock_parts, k) for k in order)
        samples = sum(
            sum(run["samples"].values())
            for t in ("sse", "socket")
            for run in spy[t]["runs"].values()
        )
        out += [
            "### Where a socket's time per event goes (py-spy, paced)",
            "",
            f"py-spy (250 Hz) on proxai while c={spy['concurrency']} connections of each "
            f"transport run turns back to back for {spy['seconds']} s, at 20 and 80 deltas "
            f"({samples:,} samples in all); parts as in the per-event profile, with the "
            "socket's own code, hypercorn's WebSocket stream and wsproto split out. Under "
            f"the profiler: {total_sock:.0f} µs per event over the socket, {total_sse:.0f} "
            f"µs over SSE ({total_sock / total_sse:.2f}×). Sorted by what the socket adds:",
            "",
            "| part | SSE, µs per event | socket, µs per event | socket − SSE |",
            "|---|---|---|---|",
        ]
        for k in order:
            a, b = per_event(sse_parts, k), per_event(sock_parts, k)
            out.append(f"| {k} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
        out += [f"| total | {total_sse:.1f} | {total_sock:.1f} | {total_sock - total_sse:+.1f} |"]
        out.append("")
    ch = wsr["checks"]
    out += [
        f"Every turn was checked ({ch['turns']:,} turns in {ch['cells']} cells): an SSE "
        "body must equal the upstream's bytes; a socket turn's frames must be, one for "
        "one, the `data` of the upstream's events (so they end with `response.completed`, "
        "count `sequence_number` from 0 and spell the text). Turns that failed: "
        f"**{ch['bad']}**. What the figures say, and the levers: [Over a socket (issue "
        "22)](#over-a-socket-issue-22) below.",
        "",
    ]
    return out


STATE_NAMES = {
    "main": "no state (`main`, before issue 23)",
    "store-false": "`store: false` (memory backend)",
    "store-true": "`store: true`, memory backend",
    "store-true-redis": "`store: true`, Redis backend",
}
STATE_MODES = {
    "previous": "`previous_response_id` + 1 message",
    "inline": "the same history inline",
    "fresh": "1 message, no history",
}
#: The ratio under which a cost counts as none: the run-to-run noise of a ratio taken
#: in the same repetition on this machine.
STATE_FLAT = 1.05


def state_section(res: dict[str, Any]) -> list[str]:
    """Issue 23: what stored responses cost (bench/state.py)."""
    sr = res.get("state")
    if not sr:
        return []
    m, st, cpu = sr["machine"], sr["settings"], sr["cpu"]
    cs = sorted({r["concurrency"] for r in cpu})
    head = " / ".join(f"c={c}" for c in cs)
    load = sr.get("loadavg")
    loads = f" Load average (1 min) {load[0]:.2f} → {load[1]:.2f}." if load else ""
    out = [
        "## Conversation state: stored responses (issue 23)",
        "",
        "`bench/state.py` (`.venv/bin/python -m bench.state`) runs three proxai at once, "
        "each pinned to core 1 and driven one at a time, in front of the per-event "
        'bench\'s upstream speaking Chat Completions only (`protocol = "openai_chat"`: '
        "proxai alone can keep a response; one write per event, "
        f"{st['pause_ms']:g} ms before each delta): this checkout with `[state] backend = "
        '"memory"` (the default), the same with `backend = "redis"` against a local '
        f"`redis-server` ({m['redis'].split(' sha=')[0]}, on core 0 with the upstream and "
        f"the client, nothing on disk), and `{m['baseline']}`, before issue 23, with no "
        "state at all. "
        f"Machine: {m['cpu']}, shared with other sessions' work; Python {m['python']}; "
        f"commit {m['commit']}; measured {m['date']}; {st['reps']} repetitions, variants "
        f"interleaved in each; medians, ratios and differences taken per repetition.{loads}",
        "",
        "### CPU per event and per stream, paced",
        "",
        " / ".join(str(st["streams_per_connection"][str(c)]) for c in cs)
        + f" streams per connection at c={'/'.join(str(c) for c in cs)}, after one warm-up "
        "stream each, at 20 and 80 deltas; *per event* is the difference over the 60 extra "
        "deltas, *per stream* the rest. Every stream carries the same Responses request "
        '(`input: "hi"`) and its `store`; a stored one is written to the store before '
        "its `response.completed` goes out. (×: against `store: false` in the same "
        "repetition.)",
        "",
        f"| variant | per event, µs: {head} | per stream, µs: {head} |",
        "|---|---|---|",
    ]
    for name, label in STATE_NAMES.items():
        rows = [pick(cpu, variant=name, concurrency=c) for c in cs]
        if name == "store-false":
            event = " / ".join(n(r["marginal_us"], 1) for r in rows)
            stream = " / ".join(n(r["fixed_us"]) for r in rows)
        else:
            event = " / ".join(
                f"{n(r['marginal_us'], 1)} ({r['marginal_vs_store-false']:.2f}×)" for r in rows
            )
            stream = " / ".join(
                f"{n(r['fixed_us'])} ({r['fixed_vs_store-false']:.2f}×)" for r in rows
            )
        out.append(f"| {label} | {event} | {stream} |")
    false = [pick(cpu, variant="store-false", concurrency=c) for c in cs]
    true = [pick(cpu, variant="store-true", concurrency=c) for c in cs]
    redis = [pick(cpu, variant="store-true-redis", concurrency=c) for c in cs]
    busy = max(r["utilisation_long"] for r in cpu)
    spread = [r[k] for r in false for k in ("marginal_vs_main", "fixed_vs_main")]

    def ratios(rows: list[Row], key: str) -> str:
        return " / ".join(f"{r[key]:.2f}×" for r in rows)

    def within(rows: list[Row], *keys: str) -> bool:
        return all(r[k] <= STATE_FLAT for r in rows for k in keys)

    out += [
        "",
        f"Goals (a cost counts as none at ≤ {STATE_FLAT:.2f}×, this machine's noise for "
        "ratios within a repetition), at c=" + "/".join(str(c) for c in cs) + ":",
        "",
        "- **`store: false` pays nothing**: against no state at all, per event "
        + ratios(false, "marginal_vs_main")
        + ", per stream "
        + ratios(false, "fixed_vs_main")
        + ": "
        + verdict(within(false, "marginal_vs_main", "fixed_vs_main"))
        + ".",
        "- **A stored response pays nothing per event**: `store: true` against `store: false`, "
        "per event "
        + ratios(true, "marginal_vs_store-false")
        + " (memory), "
        + ratios(redis, "marginal_vs_store-false")
        + " (Redis): "
        + verdict(within([*true, *redis], "marginal_vs_store-false"))
        + ".",
        "- **and one write at its end**: per stream, `store: true` costs "
        + " / ".join(f"{n(r['fixed_minus_store-false_us'])}" for r in true)
        + " µs more than `store: false` with the memory backend, "
        + " / ".join(f"{n(r['fixed_minus_store-false_us'])}" for r in redis)
        + " µs with Redis (following the answer, then one store call).",
        "",
        "How far to trust these ratios: `main` and `store: false` run the same code for "
        "these requests (the state step returns at once for a request that names nothing "
        "and stores nothing), yet their ratios spread from "
        f"{min(spread):.2f}× to {max(spread):.2f}× in this run. Where the spread is wider "
        f"than {STATE_FLAT:.2f}×, the machine's noise hides costs this small and the "
        "verdicts above are not evidence either way: the profile below measures the "
        "state's own code directly. "
        f"Proxy core busy over the 80-delta cells: at most {busy:.2f}.",
        "",
    ]
    ttfb = sr["ttfb"]
    tcs = sorted({r["concurrency"] for r in ttfb})
    sizes = list(st["sizes"])
    out += [
        "### A turn that names the previous one: time to first byte",
        "",
        "Turn 1 is stored (`small`: the input `hi`; `large`: a "
        f"{st['sizes']['large'] // 1000} KB user message) and read back; then turn 2 "
        f"(`store: false`, so it stores nothing) runs {st['samples']} times per "
        "repetition on keep-alive connections "
        f"(c={'/'.join(str(c) for c in tcs)}), three ways on each backend: "
        + "; ".join(f"{label} (`{mode}`)" for mode, label in STATE_MODES.items())
        + ". `previous` and `inline` send the upstream the same request; `previous` "
        "pays the lookup and the expansion, `inline` the parsing of the longer body the "
        "client sent. Time from sending the request to proxai's first byte "
        "(proxai sends its head when the upstream's first event is in); p50 (p90) of "
        "every repetition's samples pooled, ms.",
        "",
        "| backend | turn 2 | "
        + " | ".join(f"{size}, c={c}" for size in sizes for c in tcs)
        + " |",
        "|---|---|" + "---|" * (len(sizes) * len(tcs)),
    ]
    for backend in ("memory", "redis"):
        for mode, label in STATE_MODES.items():
            cells = []
            for size in sizes:
                for c in tcs:
                    r = pick(ttfb, backend=backend, mode=mode, size=size, concurrency=c)
                    cells.append(f"{n(r['p50_ms'], 2)} ({n(r['p90_ms'], 2)})")
            out.append(f"| {backend} | {label} | " + " | ".join(cells) + " |")
    prev = [
        pick(ttfb, backend="redis", mode="previous", size=size, concurrency=c)
        for size in sizes
        for c in tcs
    ]
    mem = [
        pick(ttfb, backend="memory", mode="previous", size=size, concurrency=c)
        for size in sizes
        for c in tcs
    ]
    where = " / ".join(f"{size} c={c}" for size in sizes for c in tcs)

    def added(rows: list[Row], key: str) -> str:
        return " / ".join(f"{r[key]:+.2f}" for r in rows)

    out += [
        "",
        f"Goal, a `previous_response_id` lookup against a local `redis-server` adds ≤ 1 ms "
        f"p50 to the time to first byte ({where}): against the same history inline "
        + added(prev, "p50_minus_inline_ms")
        + " ms, against no history "
        + added(prev, "p50_minus_fresh_ms")
        + " ms, against the memory backend's lookup "
        + added(prev, "p50_minus_memory_ms")
        + " ms: "
        + verdict(all(r["p50_minus_inline_ms"] <= 1.0 for r in prev))
        + " (judged against `inline`, the same upstream request). The memory backend's "
        "lookup against `inline`: " + added(mem, "p50_minus_inline_ms") + " ms.",
        "",
    ]
    calls = sr.get("calls")
    if calls:
        small, large, raw = calls["small"], calls["large"], calls["raw_get"]
        out += [
            "Why Redis costs more than its round trip: one `RedisStore.get` (coredis "
            "over trio), alone in a process on core 1, takes "
            f"{n(small['p50_ms'], 2)} ms p50 and {n(small['cpu_p50_us'])} µs of CPU for a "
            f"{small['record_bytes']:,}-byte record, {n(large['p50_ms'], 2)} ms and "
            f"{n(large['cpu_p50_us'])} µs for a {large['record_bytes']:,}-byte one, where a "
            f"raw-socket `GET` round trip to the same `redis-server` takes "
            f"{n(raw['p50_ms'], 3)} ms p50: nearly all of a lookup is the client library's "
            "own work per command (coredis's per-call tasks, cancel scopes, locks and "
            "retry policy on anyio, and its RESP parsing of a large reply), on the proxy's "
            "core before the request can go upstream; a storing stream pays the same for "
            "its one script call.",
            "",
        ]
    spy = sr.get("profile")
    if spy:
        keys = ("store-true", "store-false")
        parts = sorted(
            {r["part"] for k in keys for r in spy[k]["parts"] if r["part"].startswith("state:")}
        )
        out += [
            "### Where a stored stream's time goes (py-spy, paced)",
            "",
            f"py-spy on the memory-backend proxai at c={spy['concurrency']}, "
            f"{spy['seconds']} s per length, each sample charged to the innermost frame "
            "of the stored path's own code, else to the per-event bench's parts; scaled "
            "by the CPU measured over the same run. A short profile: a part's figure moves "
            "by a few µs between runs.",
            "",
            "| part | `store: true`, µs per event | per stream | `store: false`, µs per event "
            "| per stream |",
            "|---|---|---|---|---|",
        ]
        for name in [*parts, "SSE framer", "observer"]:
            cells = []
            for k in keys:
                row = next((r for r in spy[k]["parts"] if r["part"] == name), None)
                cells += [n(row["per_event_us"], 1), n(row["per_stream_us"])] if row else ["—", "—"]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        total = [
            (
                sum(r["per_event_us"] for r in spy[k]["parts"]),
                sum(r["per_stream_us"] for r in spy[k]["parts"]),
            )
            for k in keys
        ]
        out.append(
            "| all of proxai | " + " | ".join(f"{n(e, 1)} | {n(s)}" for e, s in total) + " |"
        )
        out.append("")
    checks = sr["checks"]
    out += [
        f"Checks: {checks['streams']:,} streams in {checks['cells']} cells, each a "
        "well-formed Responses stream carrying the upstream's text; "
        f"{checks['bad']} bad"
        + (f" ({'; '.join(checks['problems'])})" if checks["problems"] else "")
        + ".",
        "",
    ]
    return out


def splice(section: list[str], path: Path, before: str) -> None:
    """Replace ``section``'s part of ``path`` (from its heading to the next ``## ``), or
    insert it before the heading ``before``: one bench's section regenerated from its
    own results, the others' left as their last full run wrote them."""
    lines = path.read_text().rstrip("\n").split("\n")
    heading = section[0]
    if heading in lines:
        start = lines.index(heading)
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
    else:
        start = end = lines.index(before)
    path.write_text("\n".join([*lines[:start], *section, *lines[end:]]) + "\n")


def setup_section(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    loads = [
        f"{name} {res[name]['loadavg'][0]:.2f} → {res[name]['loadavg'][1]:.2f}"
        for name in (
            "perevent",
            "profile",
            "throughput",
            "longstream",
            "scaling",
            "stall",
            "floor",
            "websocket",
            "state",
            "telemetry",
            "limits",
        )
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
        "- **Cores**: the proxy under test (nginx, a floor app or proxai) is pinned to "
        "core 1 with `taskset` and its CPU time is read from `/proc`; the upstream, the "
        "load generator (wrk, or the bench's own asyncio client) and the driver share "
        "core 0.",
        "- **Targets**: `direct` (the client talks to the upstream), `nginx` (Debian's nginx "
        "as a plain reverse proxy: one worker, `proxy_buffering off`, HTTP/1.1 keep-alive to "
        "the upstream, defaults otherwise, so `proxy_read_timeout` is 60 s), `proxai` "
        "(`proxai serve --config FILE`, one process; `proxai translating` has `[upstream] "
        'protocol = "openai_chat"`), and the stack\'s floor apps '
        "(`bench/floor_apps.py` on `hypercorn --worker-class trio`, one worker).",
        "- **Noise**: other work on the machine is not kept off core 1 by `taskset`. The "
        "measured CPU time is the proxy's own, but a busy core stretches wall time and "
        "changes how many events a proxy finds per read, so every cell is watched "
        "(`bench/contention.py`: the machine's busy time in `/proc/stat` less the bench's "
        "own processes') and run again, at most twice, if anything else used more than "
        "5 % of a core; the line at the top of this file says whether any cell was "
        "contended all the same. Figures still move between quiet runs. Repetitions "
        "interleave every target and medians are shown; compare targets within one run, "
        "not across runs. Load average (1 min) at the start → end of each bench: "
        + "; ".join(loads)
        + ".",
        "",
    ]


def throughput_section(res: dict[str, Any]) -> list[str]:
    rows = res["throughput"]["summary"]
    out = [
        "## One read: throughput, 40-delta Responses stream",
        "",
        "**The one-read regime** (issue 7's bench): nginx serves a pre-rendered Responses "
        "stream with 40 text deltas (7,951 bytes) from a file as the upstream, so the "
        "whole stream reaches a proxy in one read and its per-event costs are paid once "
        "per stream, not once per event; wrk (one thread, POST via a Lua script, "
        f"keep-alive) drives each target for {res['throughput']['seconds']} s per "
        "repetition after a 1 s warm-up. *proxy CPU* is the proxy's CPU time over the "
        "run divided by its length (1.00 = the whole of core 1); *upstream CPU* the "
        "same for the upstream nginx, which shares core 0 with wrk.",
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


def _cells(value: Any) -> Iterator[Row]:
    """Every measured cell in a result (a row that says whether it was contended)."""
    if isinstance(value, dict):
        if "contended" in value:
            yield value
        for inner in value.values():
            yield from _cells(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _cells(inner)


def contention_banner(res: dict[str, Any]) -> list[str]:
    """The report's first word: whether every cell ran on a quiet machine
    (bench/contention.py), and if not, which did not."""
    cells = list(_cells(res))
    contended = [c for c in cells if c["contended"]]
    if not cells:
        return ["**No cell of this run was watched for other work on the machine.**", ""]
    if not contended:
        return [
            f"All {len(cells)} watched cells ran on a quiet machine: nothing but the bench "
            "used more than 5 % of a core during any of them (`bench/contention.py`).",
            "",
        ]
    worst = max(c["other_core"] for c in contended)
    return [
        f"**CONTENDED: {len(contended)} of {len(cells)} cells ran while other work used "
        f"more than 5 % of a core (up to {worst:.2f} of a core), after three tries each; "
        "their figures are not results. Rerun on an idle machine.**",
        "",
    ]


def goal_verdict(values: Sequence[tuple[str, float]], goal: float) -> str:
    """A target's verdict over the places it was measured (each ``(where, value)``, at
    most ``goal`` to meet it): met everywhere, in some places, nowhere, or not
    measured (no value, or only NaN)."""
    seen = [(where, v) for where, v in values if v == v]
    if not seen:
        return "not measured"
    met = [where for where, v in seen if v <= goal]
    if len(met) == len(seen):
        return "met"
    if met:
        missed = [where for where, v in seen if v > goal]
        return f"met at {', '.join(met)}; **not met** at {', '.join(missed)}"
    return "**not met**"


#: The command that produces each bench's figures (and its part of this file).
COMMAND = "`.venv/bin/python -m bench.run_all --only {}`"


def issue34_targets(res: dict[str, Any]) -> list[str]:
    """Issue 34's targets, each with its figures, goal, verdict and command."""
    rows: list[tuple[str, str, Sequence[tuple[str, float]], float, str]] = []
    pe = res.get("perevent")
    paced = [r for r in pe["cpu"] if r["mode"] == "paced"] if pe else []

    def px(field: str, cs: Sequence[int] | None = None) -> list[tuple[str, float]]:
        found = [r for r in paced if r["target"] == "proxai"]
        return [
            (f"c={r['concurrency']}", float(r[field]))
            for r in sorted(found, key=lambda r: r["concurrency"])
            if cs is None or r["concurrency"] in cs
        ]

    rows.append(
        (
            "pass-through CPU per stream vs the stock relay",
            "≤ 1.4×",
            px("fixed_vs_stock"),
            1.4,
            "perevent",
        )
    )
    rows.append(
        (
            "pass-through CPU per event vs the stock relay, c=1",
            "≤ 1.1×",
            px("marginal_vs_stock", [1]),
            1.1,
            "perevent",
        )
    )
    rows.append(
        (
            "pass-through CPU per event vs the stock relay, c=4",
            "≤ 1.0×",
            px("marginal_vs_stock", [4]),
            1.0,
            "perevent",
        )
    )
    mem = {r["target"]: r["kb_per_stream"] for r in pe["memory"]["summary"]} if pe else {}
    rss = (
        [("held streams", mem["proxai"] / mem["stock-relay"])]
        if "proxai" in mem and mem.get("stock-relay")
        else []
    )
    rows.append(("RSS per held stream vs the stock relay", "≤ 1.2×", rss, 1.2, "perevent"))
    lim = res.get("limits", {}).get("summary", [])
    redis = sorted((r for r in lim if r["target"] == "redis"), key=lambda r: r["concurrency"])
    rows.append(
        (
            "`[limits]` on Redis: added TTFB p50, c=1 (ms)",
            "≤ 1 ms",
            [("c=1", float(r["added_ttfb_p50_ms"])) for r in redis if r["concurrency"] == 1],
            1.0,
            "limits",
        )
    )
    rows.append(
        (
            "`[limits]` on Redis: CPU per stream vs no limits",
            "≤ 1.10× (+10 %)",
            [(f"c={r['concurrency']}", float(r["cpu_ratio"])) for r in redis],
            1.10,
            "limits",
        )
    )
    st = res.get("state", {})
    prev = [r for r in st.get("ttfb", []) if (r["backend"], r["mode"]) == ("redis", "previous")]
    rows.append(
        (
            "`previous_response_id` on Redis: TTFB p50 over the same history inline (ms)",
            "≤ +1 ms",
            [(f"{r['size']} c={r['concurrency']}", float(r["p50_minus_inline_ms"])) for r in prev],
            1.0,
            "state",
        )
    )
    tel = res.get("telemetry", {}).get("summary", [])
    rows.append(
        (
            "`[telemetry]` on: CPU per stream vs off",
            "≤ 1.05× (+5 %)",
            [
                (
                    f"{'pass-through' if r['pair'] == 'proxai' else 'translating'} "
                    f"c={r['concurrency']}",
                    float(r["stream_ratio"]),
                )
                for r in tel
            ],
            1.05,
            "telemetry",
        )
    )
    stored = [r for r in st.get("cpu", []) if r["variant"] in ("store-true", "store-true-redis")]
    rows.append(
        (
            "stored stream: CPU per event vs `store: false`",
            "≤ 1.05× (+5 %)",
            [
                (
                    f"{'Redis' if r['variant'].endswith('redis') else 'memory'} "
                    f"c={r['concurrency']}",
                    float(r["marginal_vs_store-false"]),
                )
                for r in sorted(stored, key=lambda r: (r["variant"], r["concurrency"]))
            ],
            1.05,
            "state",
        )
    )
    ws = res.get("websocket", {}).get("cpu", [])
    rows.append(
        (
            "Responses WebSocket: CPU per event vs SSE",
            "≤ 1.0×",
            [
                (f"c={r['concurrency']}", float(r["marginal_vs_sse"]))
                for r in sorted(ws, key=lambda r: r["concurrency"])
                if r["transport"] == "socket"
            ],
            1.0,
            "websocket",
        )
    )
    out = [
        "## Issue 34 targets",
        "",
        "Each target of issue 34 with the figures this run measured (ratios taken per "
        "repetition between targets of the same run, medians), its goal and verdict, and "
        "the command that reruns its bench. A verdict over cells that ran while other "
        "work used the machine is marked *contended*: it is not a result.",
        "",
        "| target | measured | goal | verdict | command |",
        "|---|---|---|---|---|",
    ]
    for label, goal_text, values, goal, bench in rows:
        unit = " ms" if "ms" in goal_text else "×"
        shown = "; ".join(
            f"{v:+.2f} ms ({where})" if unit == " ms" else f"{v:.2f}× ({where})"
            for where, v in values
        )
        verdict_text = goal_verdict(values, goal)
        if any(c["contended"] for c in _cells(res.get(bench))):
            verdict_text += " (*contended*)"
        out.append(
            f"| {label} | {shown or '—'} | {goal_text} | {verdict_text} | {COMMAND.format(bench)} |"
        )
    return [*out, ""]


COUNT_NAMES = {
    "proxai": "**proxai** (pass-through)",
    "proxai-otel": "proxai, `[telemetry]` on (every trace sampled, exported)",
    "stock-relay": "stock relay (hypercorn + httpx transport)",
    "shaped-relay": "shaped relay (four tasks, two channels, nothing else)",
}


def counts_section(res: dict[str, Any]) -> list[str]:
    """Instructions per event and per stream (callgrind): what the CPU figures measure,
    counted where the machine's load cannot move it."""
    counts = res.get("counts")
    if not counts:
        return []
    out = [
        "## Counted, not timed: instructions per event",
        "",
        "The same paced Responses stream through each server running under "
        "`valgrind --tool=callgrind` (`bench/sse_counts.py`): one keep-alive connection, "
        f"{counts['streams']} streams of {counts['deltas']} and then of "
        f"{2 * counts['deltas']} deltas, {counts['pause'] * 1000:.0f} ms apart (so every "
        "event is its own read and its own send under callgrind's slowdown), each batch "
        "counted in its own window; per event is the difference over the extra deltas, per "
        "stream the rest. Every thread of the server process is counted (the trio "
        "thread, hypercorn, the upstream read), none of the kernel's work. Counts do not "
        "move with other work on the machine, so they check the CPU figures above, whose "
        "absolute level the host sets; a window's count moves by a few per cent with where "
        "the garbage collector runs, so each figure is the median of "
        f"{len(counts['rows']) // max(len(counts['summary']), 1)} run(s), the targets "
        "interleaved.",
        "",
        "| target | instructions per event | vs the stock relay | instructions per stream | "
        "vs the stock relay |",
        "|---|---|---|---|---|",
    ]
    for row in counts["summary"]:
        out.append(
            f"| {COUNT_NAMES.get(row['target'], row['target'])} | {n(row['per_event'])} | "
            f"{row['per_event_vs_stock']:.2f}× | {n(row['per_stream'])} | "
            f"{row['per_stream_vs_stock']:.2f}× |"
        )
    otel = next((r for r in counts["summary"] if r["target"] == "proxai-otel"), None)
    if otel is not None and "stream_vs_proxai" in otel:
        out += [
            "",
            f"`[telemetry]` on: a whole stream of {2 * counts['deltas']} deltas counts "
            f"{otel['stream_vs_proxai']:.3f}× proxai's without it (issue 34's goal for CPU "
            "per stream: ≤ 1.05×; the fixed part alone carries the per-event figure's "
            "noise twentyfold, so the whole stream is compared).",
        ]
    problems = [p for row in counts["summary"] for p in row["problems"]]
    if problems:
        out += ["", "Problems: " + "; ".join(sorted(set(problems)))]
    return [*out, "", f"Command: {COMMAND.format('counts')}", ""]


LIMITS_NAMES = {
    "none": "no `[limits]`",
    "memory": "`[limits]`, memory backend",
    "redis": "`[limits]`, Redis backend",
}
LIMITS_LAYERS = {
    "raw": "raw RESP `EVALSHA` on a plain trio socket",
    "coredis": "coredis alone (`Script` on a bare `coredis.Redis`)",
    "connection": "proxai's `RedisConnection.run_script`",
    "admit": "the Redis limiter's whole `admit`",
}


def limits_section(res: dict[str, Any]) -> list[str]:
    """Issues 24 and 34: what ``[limits]`` costs (bench/limits.py)."""
    lr = res.get("limits")
    if not lr:
        return []
    rows = lr["summary"]
    m = lr.get("machine", {})
    cs = sorted({r["concurrency"] for r in rows})
    redis_version = f" ({m['redis']})" if m.get("redis") else ""
    out = [
        "## `[limits]`: what admission costs (issues 24 and 34)",
        "",
        "`bench/limits.py` (" + COMMAND.format("limits") + ") runs three proxai, one after "
        "the other in each repetition, pinned to core 1 in front of a paced upstream "
        "(20 deltas 5 ms apart): no `[limits]`, `[limits]` on the memory backend, and "
        "the same limits on the Redis backend against a local `redis-server`"
        f"{redis_version} on core 0, nothing on disk. Every kind of limit is set, high "
        "enough that nothing is refused, so every request takes a slot, is logged in the "
        "request window and is charged its tokens. TTFB is to the response head; "
        "*added* is a target's percentile minus `none`'s in the same repetition, then "
        "the median; CPU per stream is proxai's own CPU over a cell divided by its "
        "streams, Redis's beside it.",
        "",
        "| target | c | TTFB p50 / p99, ms | added p50 / p99, ms | CPU per stream, µs "
        "| vs none | Redis CPU per stream, µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cs:
        for name in TARGETS_LIMITS:
            r = next((x for x in rows if (x["target"], x["concurrency"]) == (name, c)), None)
            if r is None:
                continue
            base = name == "none"
            out.append(
                f"| {LIMITS_NAMES[name]} | {c} | {n(r['ttfb_p50_ms'], 2)} / "
                f"{n(r['ttfb_p99_ms'], 2)} | "
                + (
                    "—"
                    if base
                    else f"{r['added_ttfb_p50_ms']:+.2f} / {r['added_ttfb_p99_ms']:+.2f}"
                )
                + f" | {n(r['cpu_us_per_stream'])} | "
                + ("—" if base else f"{r['cpu_ratio']:.2f}×")
                + f" | {n(r['redis_cpu_us_per_stream'], 1) if name == 'redis' else '—'} |"
            )
    redis = sorted((r for r in rows if r["target"] == "redis"), key=lambda r: r["concurrency"])
    p50 = [("c=1", float(r["added_ttfb_p50_ms"])) for r in redis if r["concurrency"] == 1]
    cpu = [(f"c={r['concurrency']}", float(r["cpu_ratio"])) for r in redis]
    out += [
        "",
        "Targets (issue 34), Redis backend: added TTFB p50 at c=1 ≤ 1 ms: "
        + (f"{p50[0][1]:+.2f} ms, " if p50 else "")
        + goal_verdict(p50, 1.0)
        + "; CPU per stream ≤ +10 % over no limits: "
        + " / ".join(f"{v:.2f}× ({where})" for where, v in cpu)
        + (", " if cpu else "")
        + goal_verdict(cpu, 1.10)
        + ".",
        "",
    ]
    calls = lr.get("calls")
    if calls:
        out += limits_calls(calls)
    return out


TARGETS_LIMITS = ("none", "memory", "redis")


def limits_calls(calls: dict[str, Any]) -> list[str]:
    """One admission call, layer by layer: where its time goes."""
    layers = [k for k in LIMITS_LAYERS if k in calls]
    out = [
        "### One admission call, layer by layer",
        "",
        "The admission script, alone (`python -m bench.limits --calls`, run by the "
        "bench: one process on core 1, c=1, "
        f"{calls['calls']:,} calls per layer over {calls['rounds']} interleaved rounds "
        "after a warm-up), through each layer of proxai's Redis path, innermost first; "
        "µs per call, p50 (CPU: this process's, `time.process_time`; Redis's: "
        "`redis-server`'s own CPU over the calls, per call). Each layer's *adds* is its "
        "figure minus the one above it: where the time of a whole admission goes.",
        "",
        "| layer | wall p50 | adds | CPU p50 | adds | Redis CPU per call |",
        "|---|---|---|---|---|---|",
    ]
    previous: Row | None = None
    for layer in layers:
        r = calls[layer]
        wall = "—" if previous is None else f"{r['wall_p50_us'] - previous['wall_p50_us']:+.1f}"
        cpu = "—" if previous is None else f"{r['cpu_p50_us'] - previous['cpu_p50_us']:+.1f}"
        out.append(
            f"| {LIMITS_LAYERS[layer]} | {n(r['wall_p50_us'], 1)} | {wall} | "
            f"{n(r['cpu_p50_us'], 1)} | {cpu} | {n(r['redis_cpu_us'], 1)} |"
        )
        previous = r
    if "raw" in calls and "admit" in calls:
        raw, admit = calls["raw"], calls["admit"]
        share = raw["wall_p50_us"] / admit["wall_p50_us"] if admit["wall_p50_us"] else float("nan")
        out += [
            "",
            f"The round trip itself (the raw `EVALSHA`: the loopback, Redis running the "
            f"script) is {100 * share:.0f} % of a whole admission's wall time; the rest is the "
            "client side's own work on the proxy's core, split above.",
        ]
    return [*out, ""]


def write(res: dict[str, Any], out: Path | None = None) -> None:
    lines = [
        "# Benchmarks (issues 7, 15, 16, 22, 23, 24, 26 and 34)",
        "",
        *contention_banner(res),
        "<!-- Generated by bench/run_all.py (bench/report.py); edit bench/profile.md for the "
        "profile section and rerun `make bench` rather than editing this file. -->",
        "",
        "proxai against a direct connection to the upstream, nginx as a plain reverse "
        "proxy and the cheapest relays its own stack can run, measured side by side in "
        "one run on one small machine. It leads with the **per-event regime**, where the "
        "upstream writes each event separately as an LLM API does and a proxy pays its "
        "costs once per event; the **one-read** figures (a pre-rendered stream that "
        "reaches the proxy in one read, issue 7's bench) follow, labelled as such. "
        "Rerun everything with `make bench` (installs Debian's nginx and wrk if missing, "
        "and `.[dev,bench]` with py-spy), about 36 minutes on an idle machine; or one part with "
        "`.venv/bin/python -m bench.run_all --only perevent` (the others keep their last "
        "results); raw results go to `bench/results/*.json` (not committed).",
        "",
        "![CPU per event and per stream, added TTFB, RSS per held stream, one-read "
        "throughput: proxai against nginx and the stack's floor](bench.png)",
        "",
    ]
    for section in (
        issue34_targets,
        counts_section,
        issue16_targets,
        targets_section,
        perevent_section,
        websocket_section,
        state_section,
        telemetry_section,
        limits_section,
        setup_section,
        throughput_section,
        floor_section,
        longstream_section,
        scaling_section,
        stall_section,
    ):
        lines += section(res)
    lines.append((ROOT / "bench" / "profile.md").read_text().rstrip())
    (out or ROOT / "docs" / "bench.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    if sys.argv[1:2] == ["--only-state"]:  # bench/state.py's section from its own results
        result = json.loads((RESULTS / "state.json").read_text())
        splice(state_section({"state": result}), ROOT / "docs" / "bench.md", "## Setup")
        return 0
    write(json.loads((RESULTS / "all.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
