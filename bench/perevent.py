"""The per-event bench: an upstream that writes each event as its own chunk (issue 16).

    .venv/bin/python -m bench.perevent [--reps 3] [--quick]

An LLM API writes every token delta as soon as the model has it, milliseconds apart,
so a proxy reads, frames, observes and sends once per event; the throughput bench's
pre-rendered stream reaches a proxy in one read and hides those costs. Here the
upstream (``bench/event_upstream.py``, asyncio on core 0) writes one event per write:
*paced* (2 ms before each delta and before the closing events) or *unpaced* (back to
back). Every target is measured side by side in one run, pinned to core 1:

- ``direct``: the client talks to the upstream (``direct-chat``: its Chat endpoint);
- ``nginx``: a plain reverse proxy (``proxy_buffering off``);
- ``proxai``: pass-through, a Responses client over an ``openai`` upstream;
- ``proxai-translating``: a Responses client over an ``openai_chat`` upstream (the
  upstream sends ``chat.completion.chunk`` lines, proxai translates them);
- the stack's floor (``bench/floor_apps.py``, hypercorn's trio worker):
  ``hypercorn-paced`` sends the stream itself (no upstream), ``stock-relay`` is
  hypercorn + httpx's transport with one ASGI send per chunk, ``h11-relay`` reads the
  upstream with h11 on a trio socket instead of httpx, ``shaped-relay`` is that relay in
  proxai's shape (four tasks, two channels per request), doing nothing else.

Each cell runs ``k`` streams per connection on ``c`` keep-alive connections (after one
warm-up stream each) and reads the proxy's CPU time from ``/proc/PID/task/*/schedstat``.
Two stream lengths (20 and 80 deltas) give the CPU per event (the marginal cost of a
delta: the difference over 60) and the CPU per stream (the rest, extrapolated to 0
deltas: head, request, the 8 non-delta events of a Responses stream). Concurrency 1, 4,
16 and 64; repetitions interleave every target; medians. The added time to the first
byte is taken from the paced cells against ``direct`` in the same repetition.

Every response is checked: pass-through bodies must equal the upstream's bytes, the
translated ones must be a well-formed Responses stream carrying the same text; then
the openai SDK's stream accumulators read one stream of each kind.

Memory: RSS per held stream (``ev-hold``: the preamble's four events, then nothing), fresh
processes per repetition; and once, under tracemalloc (``bench/traced.py``), whose
code allocated what a held stream keeps in proxai.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import attrs

from bench import gateways, memory, streams
from bench.common import (
    DRIVER_CORE,
    ROOT,
    Row,
    Target,
    connect,
    cpu_ns,
    exchange,
    free_port,
    have_tools,
    hypercorn_app,
    log,
    median,
    nginx_proxy,
    pin_driver,
    post_request,
    proxai,
    save,
    stop,
    taskset,
    wait_port,
    workdir,
)
from bench.contention import quiet
from bench.latency import percentile
from bench.streams import Variant
from bench.traced import OTHER, owner

PAUSE = 0.002
LENGTHS = (20, 80)
CONCURRENCY = (1, 4, 16, 64)
MODES = {"paced": PAUSE, "unpaced": 0.0}
#: streams per connection at each concurrency: one to three seconds per paced cell
STREAMS_PER_CONNECTION = {1: 12, 4: 6, 16: 3, 64: 2}
STOCK = "stock-relay"
ORDER = (
    "direct",
    "direct-chat",
    "nginx",
    "hypercorn-paced",
    STOCK,
    "h11-relay",
    "shaped-relay",
    "proxai",
    "proxai-translating",
    *gateways.NAMES,
)
PASS_THROUGH = ("nginx", STOCK, "h11-relay", "shaped-relay", "proxai")
MEMORY_TARGETS = (
    "nginx",
    "hypercorn-held",
    STOCK,
    "h11-relay",
    "shaped-relay",
    "proxai",
    "proxai-translating",
    *gateways.NAMES,
)
#: The stall check's targets; each with the stall bound below where a documented
#: setting gives one (proxai ``[timeouts] idle``, LiteLLM ``stream_timeout``), nginx
#: and Portkey with their defaults (nginx: ``proxy_read_timeout 60s``; Portkey's
#: ``request_timeout`` ends when the upstream's head arrives, nothing bounds its body).
STALL_TARGETS = ("nginx", "proxai", *gateways.NAMES)
STALL_BOUND = 20.0
STALL_GIVE_UP = 75.0  # outlasts nginx's 60 s
#: Runs ``proxai`` from another checkout (argv[1]) for a same-run A/B (bench/ab.py).
B_LAUNCHER = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from proxai.cli import main; sys.exit(main(sys.argv[1:]))"
)
#: Generous deadlines: at c=64 the Python relays queue events for a while.
TIMEOUTS = {"idle": 600.0, "first_byte": 600.0, "total": 3600.0}


def telemetry_table(endpoint: str) -> list[str]:
    """``[telemetry]`` on, every trace sampled, exporting to ``endpoint``."""
    return ["[telemetry]", "enabled = true", f'endpoint = "{endpoint}"', "sampling_ratio = 1.0"]


@attrs.frozen
class Lane:
    """A target as the per-event bench drives it."""

    target: Target
    pids: tuple[int, ...]
    path: bytes  # what the client requests
    client_shape: str  # the API the client speaks (what it receives)
    upstream_shape: str  # the API the upstream streams
    direct: str  # the direct lane to subtract for added TTFB
    headers: bytes = b""  # more request header lines (Portkey's routing)
    log: Path | None = None  # a peer's output (what a failure report quotes)

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def peer(self) -> bool:
        """One of the gateways a user would pick instead (bench/gateways.py)."""
        return self.name in gateways.NAMES

    def request(self, body: bytes) -> bytes:
        return post_request(self.target.port, self.path, body, self.headers)

    @property
    def translated(self) -> bool:
        return self.client_shape != self.upstream_shape


RESPONSES, CHAT = b"/v1/responses", b"/v1/chat/completions"


def event_upstream() -> tuple[subprocess.Popen[bytes], int]:
    """``bench/event_upstream.py`` on the driver core: (process, port)."""
    process = subprocess.Popen(
        taskset(str(DRIVER_CORE), [sys.executable, "-m", "bench.event_upstream"]),
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    wait_port(port)
    return process, port


def peer_models() -> list[str]:
    """Every model the bench asks a peer for (LiteLLM lists each one)."""
    variants = [Variant(d, p) for d in (2, *LENGTHS) for p in MODES.values()]
    return [v.model for v in (*variants, Variant(hold=True))]


@contextmanager
def lanes(
    names: Sequence[str],
    upstream: int,
    *,
    failed: dict[str, str] | None = None,
    stall_bound: float | None = None,
) -> Iterator[list[Lane]]:
    """Start the proxies of ``names`` in front of the upstream; yield them as lanes.

    A peer (bench/gateways.py) that is not installed or does not start is left out,
    and why goes into ``failed``. ``stall_bound``: proxai's ``[timeouts] idle`` and
    LiteLLM's ``stream_timeout`` (the stall check); else the bench's long deadlines."""
    failed = {} if failed is None else failed
    with workdir() as wd, ExitStack() as stack:
        processes: list[Any] = []
        stack.callback(stop, processes)
        out: list[Lane] = []
        for name in names:
            port, pid = free_port(), None
            path, client, up, direct = RESPONSES, "responses", "responses", "direct"
            headers = b""
            if name in gateways.NAMES and (reason := gateways.missing(name)):
                failed[name] = reason
                continue
            if name == "direct":
                port = upstream
            elif name == "direct-chat":
                port, path, client, up, direct = upstream, CHAT, "chat", "chat", "direct-chat"
            elif name == "nginx":
                processes.append(nginx_proxy(wd, port, upstream))
            elif name == "proxai":
                timeouts = TIMEOUTS if stall_bound is None else {"idle": stall_bound}
                processes.append(proxai(wd, port, upstream, timeouts=timeouts))
            elif name == "litellm":
                processes.append(
                    gateways.litellm(wd, port, upstream, peer_models(), stream_timeout=stall_bound)
                )
            elif name == "portkey":
                processes.append(gateways.portkey(wd, port))
                headers = gateways.portkey_headers(upstream)
            elif name == "proxai-b":  # an A/B: the proxai of the checkout at $PROXAI_B
                launcher = [sys.executable, "-c", B_LAUNCHER, os.environ["PROXAI_B"]]
                processes.append(
                    proxai(wd, port, upstream, timeouts=TIMEOUTS, argv_prefix=launcher)
                )
            elif name == "proxai-translating":
                processes.append(
                    proxai(wd, port, upstream, timeouts=TIMEOUTS, protocol="openai_chat")
                )
                up, direct = "chat", "direct-chat"
            elif name.startswith(
                "proxai-otel"
            ):  # [telemetry] on, to $PROXAI_OTLP (bench/telemetry.py)
                protocol = "openai_chat" if name.endswith("-translating") else None
                extra = telemetry_table(os.environ["PROXAI_OTLP"])
                processes.append(
                    proxai(wd, port, upstream, timeouts=TIMEOUTS, protocol=protocol, extra=extra)
                )
                if protocol:
                    up, direct = "chat", "direct-chat"
            elif name == "proxai-b-translating":  # the A/B's B, translating
                launcher = [sys.executable, "-c", B_LAUNCHER, os.environ["PROXAI_B"]]
                processes.append(
                    proxai(
                        wd,
                        port,
                        upstream,
                        timeouts=TIMEOUTS,
                        protocol="openai_chat",
                        argv_prefix=launcher,
                    )
                )
                up, direct = "chat", "direct-chat"
            else:
                app = {
                    "hypercorn-paced": "paced",
                    "hypercorn-held": "held",
                    STOCK: "transport",
                    "h11-relay": "h11relay",
                    "shaped-relay": "shaped",
                }[name]
                processes.append(hypercorn_app(app, port, upstream))
            if processes and name not in ("direct", "direct-chat"):
                pid = processes[-1].pid
            log_file = gateways.log_path(wd, name, port) if name in gateways.NAMES else None
            target = Target(name, port, pid)
            out.append(Lane(target, (), path, client, up, direct, headers, log_file))
        started = []
        for lane in out:
            try:  # a loaded machine starts them slowly; LiteLLM takes 10-20 s alone
                wait_port(lane.target.port, timeout=120.0 if lane.peer else 60.0)
            except RuntimeError:
                if not lane.peer:
                    raise
                tail = gateways.log_tail(lane.log)
                failed[lane.name] = f"did not listen within 120 s; its log ends: {tail}"
                continue
            started.append(lane)
        time.sleep(0.3)  # hypercorn forks its worker after binding
        yield [attrs.evolve(lane, pids=tuple(lane.target.pids())) for lane in started]


# -- checks ---------------------------------------------------------------------------


def check_responses(body: bytes, text: str) -> str | None:
    """Why ``body`` is not a well-formed Responses stream carrying ``text`` (None: it is).

    Every event has an ``event:`` line equal to its payload's type, sequence numbers
    count from 0, the deltas spell ``text`` and the stream ends with
    ``response.completed``.
    """
    if not body.endswith(b"\n\n"):
        return "does not end at an event boundary"
    deltas: list[str] = []
    last: str | None = None
    for seq, frame in enumerate(body[:-2].split(b"\n\n")):
        event: str | None = None
        data: Any = None
        for line in frame.split(b"\n"):
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: "):
                data = json.loads(line[6:])
        if data is None or event != data.get("type"):
            return f"event {seq}: `event:` line {event!r} against {data!r}"
        if data.get("sequence_number") != seq:
            return f"event {seq}: sequence_number {data.get('sequence_number')}"
        if event == "response.output_text.delta":
            deltas.append(data["delta"])
        last = event
    if last != "response.completed":
        return f"ends with {last}"
    if "".join(deltas) != text:
        return "text differs"
    return None


def check(lane: Lane, variant: Variant, body: bytes) -> str | None:
    """Why a body received through ``lane`` is wrong (None: it is right). A peer may
    re-serialize the stream: :data:`bench.gateways.RESERIALIZED` if it carries the
    same text."""
    text = "".join(streams.answer(variant.deltas))
    if lane.translated:
        return check_responses(body, text)
    upstream = streams.body(variant, lane.upstream_shape)
    if lane.peer:
        return gateways.byte_verdict(body, upstream, lane.client_shape, text)
    if body != upstream:
        return "bytes differ from the upstream's"
    return None


def sdk_checks(by_name: dict[str, Lane]) -> list[Row]:
    """The openai SDK's accumulators over proxai (pass-through Responses and Chat,
    translated Responses) and the peers (Responses and Chat). Each must rebuild the
    text the upstream sent."""
    import openai

    out: list[Row] = []
    variant = Variant(20, PAUSE)
    text = "".join(streams.answer(variant.deltas))
    for name, api in (
        ("proxai", "responses"),
        ("proxai", "chat"),
        ("proxai-translating", "responses"),
        *((peer, api) for peer in gateways.NAMES for api in ("responses", "chat")),
    ):
        lane = by_name.get(name)
        if lane is None:
            continue
        headers = dict(line.split(": ", 1) for line in lane.headers.decode().split("\r\n") if line)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{lane.target.port}/v1",
            api_key="sk-client",
            max_retries=0,
            timeout=30,
            default_headers=headers,
        )
        problem = None
        try:
            if api == "responses":
                with client.responses.stream(model=variant.model, input="hi") as stream:
                    got = stream.get_final_response().output_text
            else:
                with client.chat.completions.stream(
                    model=variant.model, messages=[{"role": "user", "content": "hi"}]
                ) as chat:
                    got = chat.get_final_completion().choices[0].message.content or ""
            if got != text:
                problem = f"text {got!r}"
        except Exception as exc:  # the check reports any failure
            problem = f"{type(exc).__name__}: {exc}"
        out.append({"target": name, "api": api, "ok": problem is None, "problem": problem})
        log("perevent sdk", out[-1])
    return out


# -- one cell -------------------------------------------------------------------------


async def _cell(lane: Lane, variant: Variant, c: int, k: int) -> Row:
    port = lane.target.port
    shape = lane.client_shape
    request = lane.request(streams.request_body(variant, shape))
    warm = lane.request(streams.request_body(Variant(2, 0.0), shape))
    connections = await asyncio.gather(*(connect(port) for _ in range(c)))
    responses: list[Any] = []
    try:
        await asyncio.gather(*(exchange(r, w, warm, keep_body=False) for r, w in connections))
        await asyncio.sleep(0.05)  # the warm-up's tail (log, metrics) before the count
        cpu0, t0 = cpu_ns(lane.pids), time.perf_counter()

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(k):
                responses.append(await exchange(reader, writer, request))

        await asyncio.gather(*(run(r, w) for r, w in connections))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the last streams' tail
        cpu = (cpu_ns(lane.pids) - cpu0) / 1e9 if lane.pids else float("nan")
    finally:
        for _, writer in connections:
            writer.close()
    problems = [
        (
            f"incomplete (status {r.status}: {bytes(r.body[:160]).decode(errors='replace')})"
            if not r.complete or r.status != 200
            else check(lane, variant, bytes(r.body))
        )
        for r in responses
    ]
    bad = [p for p in problems if p and p != gateways.RESERIALIZED]
    return {
        "streams": len(responses),
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_per_stream_us": cpu / len(responses) * 1e6,
        "utilisation": cpu / wall,
        "ttfb_ms": [r.first_byte * 1000 for r in responses],
        "first_event_ms": [r.first_event * 1000 for r in responses],
        "bad": len(bad),
        "problem": bad[0] if bad else None,
        "reserialized": problems.count(gateways.RESERIALIZED),
    }


def cell(lane: Lane, mode: str, c: int, deltas: int, rep: int) -> Row:
    """One cell, on a quiet machine if it can be (:func:`bench.contention.quiet`)."""
    variant = Variant(deltas, MODES[mode])
    row: Row = {"target": lane.name, "mode": mode, "concurrency": c, "deltas": deltas, "rep": rep}
    measured, seen = quiet(
        lambda: asyncio.run(_cell(lane, variant, c, STREAMS_PER_CONNECTION[c])),
        f"perevent {lane.name} {mode} c={c} deltas={deltas}",
    )
    row.update(measured)
    row.update(contended=seen.contended, other_core=round(seen.other_core, 3))
    shown = {k: v for k, v in row.items() if not k.endswith("_ms")}
    log("perevent", {k: round(v, 4) if isinstance(v, float) else v for k, v in shown.items()})
    return row


# -- the stall ----------------------------------------------------------------------


async def _stall(lane: Lane, give_up: float) -> Row:
    """One held stream (``ev-hold``: the preamble, then the upstream says nothing and
    keeps the connection) through ``lane``, until the target ends it or ``give_up``."""
    reader, writer = await connect(lane.target.port)
    received = bytearray()
    last = [float("nan")]

    def on_body(data: bytes, at: float) -> None:
        if len(received) < 65536:  # capped: the client keeps what it needs to tell
            received.extend(data)
        last[0] = at

    response: Any = None
    t0 = time.perf_counter()
    try:
        request = lane.request(streams.request_body(Variant(hold=True), lane.client_shape))
        exchange_ = exchange(reader, writer, request, keep_body=False, on_body=on_body)
        response = await asyncio.wait_for(exchange_, timeout=give_up)
        ending = "complete" if response.complete else "closed"
    except TimeoutError:
        ending = "gave up"
    except ConnectionError:
        ending = "reset"
    finally:
        writer.close()
    return {
        "target": lane.name,
        "ended_s": time.perf_counter() - t0,  # when the target ended it (or the client)
        "status": response.status if response is not None else None,  # None: still open
        "ending": ending,
        "last_byte_s": last[0],
        "body": received.decode(errors="replace"),
    }


def stall_checks(
    upstream: int, give_up: float = STALL_GIVE_UP, bound: float = STALL_BOUND
) -> dict[str, Any]:
    """A stalled upstream stream through nginx, proxai and the peers, all at once: was
    it bounded, and what did the client see (:func:`bench.gateways.stall_verdict`)."""
    failed: dict[str, str] = {}
    with lanes(STALL_TARGETS, upstream, failed=failed, stall_bound=bound) as found:

        async def all_at_once() -> list[Row]:
            return list(await asyncio.gather(*(_stall(lane, give_up) for lane in found)))

        log(f"perevent stall: one held stream per target, giving up after {give_up:g} s")
        raw = asyncio.run(all_at_once())
    rows = []
    for row in raw:
        row.update(gateways.stall_verdict(row, give_up))
        row["body"] = row["body"][-600:]  # the stream's end is what tells
        log("perevent stall", {k: v for k, v in row.items() if k != "body"})
        rows.append(row)
    return {"rows": rows, "give_up_s": give_up, "bound_s": bound, "failed": failed}


# -- memory ---------------------------------------------------------------------------


def held_memory(
    reps: int, count: int, upstream: int, targets: Sequence[str] = MEMORY_TARGETS
) -> list[Row]:
    """RSS per held stream, fresh processes per repetition."""
    raw: list[Row] = []
    for rep in range(reps):
        with lanes(targets, upstream) as found:
            for lane in found:
                request = lane.request(streams.request_body(Variant(hold=True), "responses"))
                try:
                    row = {**memory.measure(lane.target, count, request), "rep": rep}
                except (TimeoutError, RuntimeError, OSError) as exc:
                    if not lane.peer:
                        raise
                    # what the peer did is the finding: recorded, not the end of the run
                    why = f"{type(exc).__name__} {exc}".strip()
                    row = {"target": lane.name, "rep": rep, "streams": count, "failed": why}
                log("perevent memory", row)
                raw.append(row)
    return raw


def memory_split(upstream: int, count: int, protocol: str | None) -> Row:
    """Who allocated the Python heap a held stream keeps in proxai (tracemalloc)."""
    with workdir() as wd:
        os.environ["TRACE_DIR"] = str(wd)
        port = free_port()
        process = proxai(
            wd,
            port,
            upstream,
            timeouts=TIMEOUTS,
            protocol=protocol,
            argv_prefix=[sys.executable, "-m", "bench.traced"],
        )
        del os.environ["TRACE_DIR"]
        try:
            wait_port(port)
            request = post_request(
                port, RESPONSES, streams.request_body(Variant(hold=True), "responses")
            )

            def signal_and_wait(name: str) -> Path:
                os.kill(process.pid, signal.SIGUSR1)
                path = wd / name
                deadline = time.monotonic() + 60
                while not path.exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no {name} from bench.traced")
                    time.sleep(0.05)
                return path

            def snapshot(n: int) -> tracemalloc.Snapshot:
                return tracemalloc.Snapshot.load(str(signal_and_wait(f"snap-{n}.pickle")))

            signal_and_wait("started")
            asyncio.run(memory.hold(port, 20, lambda: None, request))
            time.sleep(0.5)
            before = snapshot(0)
            after = asyncio.run(memory.hold(port, count, lambda: snapshot(1), request))
        finally:
            stop([process])
    parts: dict[str, float] = {}
    lines: dict[str, float] = {}  # the owner's own line, for the largest items
    for diff in after.compare_to(before, "traceback"):
        frames = list(reversed(diff.traceback))
        name = owner([frame.filename for frame in frames])
        parts[name] = parts.get(name, 0.0) + diff.size_diff
        where = next((f for f in frames if owner([f.filename]) == name), frames[0])
        short = where.filename.split("/site-packages/")[-1].removeprefix(f"{ROOT}/")
        line = f"{short}:{where.lineno}"
        lines[line] = lines.get(line, 0.0) + diff.size_diff
    total = sum(parts.values())
    top = sorted(lines.items(), key=lambda kv: -kv[1])[:25]
    return {
        "protocol": protocol or "openai",
        "streams": count,
        "kib_per_stream": {k: v / count / 1024 for k, v in sorted(parts.items())},
        "total_kib_per_stream": total / count / 1024,
        "top_lines_kib": {k: v / count / 1024 for k, v in top},
        "other": OTHER,
    }


# -- summaries ------------------------------------------------------------------------


def cpu_summary(raw: list[Row]) -> list[Row]:
    """Per target, mode and concurrency: marginal CPU per event and fixed CPU per
    stream (each per repetition from its two lengths, then the median), and ratios to
    the stock relay and to pass-through proxai taken per repetition."""
    short, long = LENGTHS

    def per_rep(target: str, mode: str, c: int) -> dict[int, tuple[float, float, float]]:
        out = {}
        for rep in {r["rep"] for r in raw}:
            cells = {
                r["deltas"]: r
                for r in raw
                if (r["target"], r["mode"], r["concurrency"], r["rep"]) == (target, mode, c, rep)
            }
            if short in cells and long in cells:
                a, b = cells[short]["cpu_per_stream_us"], cells[long]["cpu_per_stream_us"]
                marginal = (b - a) / (long - short)
                out[rep] = (marginal, a - short * marginal, cells[long]["utilisation"])
        return out

    summary = []
    keys = sorted(
        {(r["target"], r["mode"], r["concurrency"]) for r in raw if r["cpu_s"] == r["cpu_s"]},
        key=lambda k: (list(MODES).index(k[1]), k[2], ORDER.index(k[0])),
    )
    for target, mode, c in keys:
        mine = per_rep(target, mode, c)
        stock = per_rep(STOCK, mode, c)
        passthrough = per_rep("proxai", mode, c)
        row: Row = {
            "target": target,
            "mode": mode,
            "concurrency": c,
            "reps": len(mine),
            "marginal_us": median([m for m, _, _ in mine.values()]),
            "fixed_us": median([f for _, f, _ in mine.values()]),
            "utilisation_long": median([u for _, _, u in mine.values()]),
        }
        row["events_per_core_s"] = 1e6 / row["marginal_us"] if row["marginal_us"] > 0 else 0
        for label, base in (("stock", stock), ("proxai", passthrough)):
            common_reps = set(mine) & set(base)
            row[f"marginal_vs_{label}"] = median(
                [mine[r][0] / base[r][0] for r in common_reps if base[r][0] > 0]
            )
            row[f"fixed_vs_{label}"] = median(
                [mine[r][1] / base[r][1] for r in common_reps if base[r][1] > 0]
            )
        summary.append(row)
    return summary


def ttfb_summary(raw: list[Row], direct_of: dict[str, str]) -> list[Row]:
    """Added time to first byte, paced cells (both lengths pooled), against the direct
    lane of the same shape in the same repetition; p50, p90 and p99, medians over
    reps. The same for the first byte of the body (``event_``): a gateway may send the
    response head before it has the first event."""
    paced = [r for r in raw if r["mode"] == "paced"]
    quantiles = (50, 90, 99)
    out = []
    for c in sorted({r["concurrency"] for r in paced}):
        for target in ORDER:
            if target not in direct_of:
                continue
            figures: dict[str, list[float]] = {}
            for rep in sorted({r["rep"] for r in paced}):

                def samples(name: str, field: str, rep: int = rep, c: int = c) -> list[float]:
                    return [
                        s
                        for r in paced
                        if (r["target"], r["concurrency"], r["rep"]) == (name, c, rep)
                        for s in r[field]
                    ]

                for prefix, field in (("", "ttfb_ms"), ("event_", "first_event_ms")):
                    mine, base = samples(target, field), samples(direct_of[target], field)
                    if not mine or not base:
                        continue
                    for q in quantiles:
                        own, theirs = percentile(mine, q), percentile(base, q)
                        figures.setdefault(f"{prefix}ttfb_p{q}_ms", []).append(own)
                        figures.setdefault(f"{prefix}added_p{q}_ms", []).append(own - theirs)
            if "ttfb_p50_ms" not in figures:
                continue
            row: Row = {"target": target, "concurrency": c}
            row.update({key: median(values) for key, values in figures.items()})
            out.append(row)
    return out


def memory_summary(raw: list[Row]) -> list[Row]:
    out = []
    for name in MEMORY_TARGETS:
        rows = [r for r in raw if r["target"] == name and "failed" not in r]
        if rows:
            out.append(
                {
                    "target": name,
                    "streams": rows[0]["streams"],
                    "reps": len(rows),
                    "rss_before_kb": median([r["rss_before_kb"] for r in rows]),
                    "kb_per_stream": median([r["kb_per_stream"] for r in rows]),
                }
            )
    return out


# -- the run --------------------------------------------------------------------------


def run(
    reps: int,
    concurrency: Sequence[int] = CONCURRENCY,
    held_streams: int = 500,
    split_streams: int = 200,
    stall_give_up: float = STALL_GIVE_UP,
    stall_bound: float = STALL_BOUND,
) -> dict[str, Any]:
    started = time.monotonic()
    process, upstream = event_upstream()
    failed: dict[str, str] = {}  # peer -> why it is not in the run
    try:
        raw: list[Row] = []
        with lanes(ORDER, upstream, failed=failed) as started_lanes:
            found = []
            for lane in started_lanes:  # warm up (and check one paced stream of each)
                warm = cell(lane, "paced", 4, 2, -1)
                if lane.peer and warm["bad"] == warm["streams"]:
                    tail = gateways.log_tail(lane.log)
                    failed[lane.name] = f"every warm-up stream failed: {warm['problem']}" + (
                        f"; its log ends: {tail}" if tail else ""
                    )
                    continue
                found.append(lane)
            by_name = {lane.name: lane for lane in found}
            sdk = sdk_checks(by_name)
            for rep in range(reps):
                for mode in MODES:
                    for c in concurrency:
                        # rotate the order so that no target always runs first
                        shift = (rep + c) % len(found)
                        for lane in found[shift:] + found[:shift]:
                            if mode != "paced" and lane.name.startswith("direct"):
                                continue
                            for deltas in LENGTHS:
                                raw.append(cell(lane, mode, c, deltas, rep))
            direct_of = {lane.name: lane.direct for lane in found if lane.target.pid}
        cpu_wall = time.monotonic() - started
        measured = [t for t in MEMORY_TARGETS if t not in failed]
        held = held_memory(reps, held_streams, upstream, measured)
        stall = stall_checks(upstream, stall_give_up, stall_bound)
        split = [memory_split(upstream, split_streams, p) for p in (None, "openai_chat")]
    finally:
        stop([process])
    upstream_bytes = {
        shape: len(streams.body(Variant(d, PAUSE), shape))
        for shape in ("responses", "chat")
        for d in LENGTHS[:1]
    }
    return {
        "raw": raw,
        "cpu": cpu_summary(raw),
        "ttfb": ttfb_summary(raw, direct_of),
        "checks": {
            "cells": len(raw),
            "bad": sum(r["bad"] for r in raw),
            "problems": sorted({f"{r['target']}: {r['problem']}" for r in raw if r["problem"]}),
            "reserialized": {
                name: sum(r.get("reserialized", 0) for r in raw if r["target"] == name)
                for name in gateways.NAMES
                if name in by_name
            },
            "sdk": sdk,
            "bytes_20_deltas": upstream_bytes,
        },
        "memory": {"raw": held, "summary": memory_summary(held), "split": split},
        "stall": stall,
        "peers": {
            "failed": failed,
            "ran": [name for name in gateways.NAMES if name in by_name],
            "versions": gateways.versions(),
        },
        "settings": {
            "pause_ms": PAUSE * 1000,
            "lengths": list(LENGTHS),
            "concurrency": list(concurrency),
            "streams_per_connection": STREAMS_PER_CONNECTION,
            "held_streams": held_streams,
            "split_streams": split_streams,
            "cpu_wall_s": cpu_wall,
        },
    }


def quick() -> dict[str, Any]:
    """A smoke run: one rep, c=1 and 16, few held streams, a 2 s stall bound."""
    return run(1, (1, 16), 100, 50, stall_give_up=8.0, stall_bound=2.0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="one rep, c=1 and 16, few streams, a short stall"
    )
    args = parser.parse_args()
    if not have_tools("nginx", "taskset"):
        return 2
    pin_driver()
    result = quick() if args.quick else run(args.reps)
    save("perevent", result)
    for row in result["cpu"]:
        print({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
    for row in result["ttfb"]:
        print({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
    print(json.dumps(result["memory"]["summary"]), json.dumps(result["memory"]["split"]))
    print(json.dumps(result["checks"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
