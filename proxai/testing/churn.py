"""A churn soak: ``proxai serve`` under bursts, hang-ups and stalls, with a short keep-alive.

What it stresses is the upstream pools: every connection opened, reused, abandoned
and swept, the idle sweep running every half ``keepalive_expiry`` while requests
take and drop connections. proxai runs as its own process (``proxai serve``, as in
production, on its own core); the scripted upstream and the clients run here. One
scripted server plays two upstreams: ``default`` (Responses) and ``local`` (Chat
Completions, for translated requests), both with the same short keep-alive. The mix:

- bursts of ``burst`` short requests, with pauses of up to two keep-alive expiries
  between them: ``short`` (the seed's turn 1, which must arrive byte for byte),
  ``whole`` (a JSON body, byte for byte) and ``translated`` (a Responses client on the
  Chat upstream: its text and ``response.completed``);
- all along, ``hangups`` (16) streams whose clients hang up after 0.1 to 0.4 s (``hangup``, and
  ``translated_hangup`` on the Chat upstream), each dropping its connection while
  others expire and are swept, and 4 streams stalled mid-arguments that proxai must
  end with ``error`` + ``response.failed`` (``stalled``).

Throughout, ``/readyz`` must answer 200, and proxai's own gauges
(``proxai_upstream_connections``) must show no closed connection still listed and at
most ``max_idle_connections`` idle ones. Afterwards, with no client connected: every
request answered as it must be and recorded as it must be (``proxai_requests_total``),
no background task failure, the pools empty, and proxai's open file descriptors as
before the load (after a warm-up of the same load), not counting the client
connections hypercorn (0.18) holds for its keep-alive timeout after their clients
closed them (its idle timer is not stopped when a client goes); its RSS is reported.

Used by ``bench/churn.py`` (10 minutes) and by the test suite (a few seconds).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from ..outcome import OutcomeKind
from .seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from .upstream import RecordedRequest, Script, ScriptedUpstream, Stall, chat_chunk

__all__ = ["KINDS", "ChurnReport", "churn"]

KINDS = ("short", "whole", "translated", "hangup", "translated_hangup", "stalled")
#: The Chat upstream's models (routed to ``local``); the seed's model goes to ``default``.
LOCAL_MODEL, LOCAL_SLOW_MODEL = "local-model", "local-slow"
TIMEOUTS = {"first_byte": 10.0, "idle": 5.0, "tool_arguments": 1.0, "total": 120.0}

TURN1 = turn_bytes(TURN1_EVENTS)
_WHOLE = Script.json({"id": "resp_churn", "object": "response", "status": "completed"})
_CHAT_TEXT = [
    chat_chunk({"role": "assistant", "content": "It is "}),
    chat_chunk({"content": "sunny."}),
    chat_chunk({}, finish="stop"),
    b"data: [DONE]\n\n",
]
_CHAT_SLOW = [chat_chunk({"role": "assistant", "content": ""})] + [
    chat_chunk({"content": f"word {i} "}) for i in range(20)
]
_OUTCOMES = {
    "short": OutcomeKind.COMPLETED,
    "whole": OutcomeKind.COMPLETED,
    "translated": OutcomeKind.COMPLETED,
    "hangup": OutcomeKind.CLIENT_DISCONNECTED,
    "translated_hangup": OutcomeKind.CLIENT_DISCONNECTED,
    "stalled": OutcomeKind.STALLED_TOOL_ARGUMENTS,
}


@attrs.define
class PoolPeak:
    """The largest figures proxai's gauges showed of one upstream's pools."""

    idle: float = 0.0
    closed: float = 0.0  # closed connections still listed: a leak


@attrs.define
class ChurnReport:
    """What a churn soak did and what it left."""

    seconds: float
    keepalive_expiry: float
    max_idle: int
    results: Counter[str] = attrs.field(factory=Counter)  # "<kind>:ok" / "<kind>:<problem>"
    outcomes: Counter[str] = attrs.field(factory=Counter)  # proxai_requests_total, by outcome
    samples: int = 0  # looks at /readyz and /metrics during the load
    not_ready: int = 0  # those where /readyz was not 200
    first_not_ready: float | None = None  # seconds into the load
    peaks: dict[str, PoolPeak] = attrs.field(factory=dict)
    ready_after: int = 0
    pools_after: dict[str, dict[str, float]] = attrs.field(factory=dict)
    background_failures: float = 0.0
    errors_logged: list[str] = attrs.field(factory=list)  # proxai's ERROR lines (the first 5)
    #: proxai's open fds but the client connections hypercorn still holds (it keeps one
    #: its client closed until its keep-alive timeout: see HYPERCORN_LINGER).
    fds_before: int = 0
    fds_after: int = 0
    upstream_fds_after: int = 0  # upstream connections proxai still has open
    client_fds_after: int = 0  # client connections hypercorn still holds (not counted above)
    rss_before: int = 0
    rss_after: int = 0
    rss_peak: int = 0
    #: (seconds into the load, RSS) at each sample: growth that levels off is the
    #: allocator's high-water mark, growth that keeps on is memory kept per request.
    rss_timeline: list[tuple[float, int]] = attrs.field(factory=list)

    @property
    def requests(self) -> int:
        return sum(self.results.values())

    @property
    def failures(self) -> dict[str, int]:
        return {k: v for k, v in self.results.items() if not k.endswith(":ok")}

    def expected_outcomes(self) -> dict[str, int]:
        """What proxai's records should say, given what the clients sent."""
        expected: Counter[str] = Counter()
        for key, count in self.results.items():
            expected[_OUTCOMES[key.split(":", 1)[0]].value] += count
        return dict(expected)

    def problems(self) -> list[str]:
        """Everything that is not as it must be (empty: the soak passed)."""
        found = []
        if self.failures:
            found.append(f"client-side failures: {self.failures}")
        if dict(self.outcomes) != self.expected_outcomes():
            found.append(f"outcomes {dict(self.outcomes)} != {self.expected_outcomes()}")
        if self.not_ready:
            found.append(
                f"/readyz was not 200 in {self.not_ready} of {self.samples} samples, "
                f"first {self.first_not_ready or 0:.2f} s into the load"
            )
        if self.ready_after != 200:
            found.append(f"/readyz answered {self.ready_after} after the load")
        if self.background_failures:
            found.append(f"{self.background_failures:.0f} background task failures")
        if self.errors_logged:
            found.append(f"proxai logged errors: {self.errors_logged}")
        for name, peak in sorted(self.peaks.items()):
            if peak.closed:
                found.append(f"{name}: up to {peak.closed:.0f} closed connections still listed")
            if peak.idle > self.max_idle:
                found.append(
                    f"{name}: up to {peak.idle:.0f} idle connections (max {self.max_idle})"
                )
        for name, pool in sorted(self.pools_after.items()):
            if any(pool.values()):
                found.append(f"{name}: pools not empty after the load: {pool}")
        if self.fds_after != self.fds_before or self.upstream_fds_after:
            found.append(
                f"proxai's open fds: {self.fds_before} before, {self.fds_after} after "
                f"({self.upstream_fds_after} upstream connections)"
            )
        return found

    def summary(self) -> str:
        mib = 1024 * 1024
        peaks = "; ".join(
            f"{n}: idle {p.idle:.0f}, closed but listed {p.closed:.0f}"
            for n, p in sorted(self.peaks.items())
        )
        return "\n".join(
            [
                f"{self.requests} requests in {self.seconds:.1f} s "
                f"({self.requests / max(self.seconds, 1e-9):.0f}/s), keepalive_expiry "
                f"{self.keepalive_expiry} s, max_idle_connections {self.max_idle}",
                "client results: " + ", ".join(f"{k}={v}" for k, v in sorted(self.results.items())),
                "proxai outcomes: "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())),
                f"/readyz: 200 in {self.samples - self.not_ready} of {self.samples} samples "
                f"during the load, {self.ready_after} after it",
                f"pool peaks during the load: {peaks or 'none'}",
                f"pools after the load: {self.pools_after}",
                f"background task failures: {self.background_failures:.0f}; "
                f"errors logged: {len(self.errors_logged)}",
                f"proxai's open fds (no client connected): {self.fds_before} before, "
                f"{self.fds_after} after, {self.upstream_fds_after} of them upstream "
                f"connections (and {self.client_fds_after} client connections hypercorn "
                f"still held)",
                f"proxai's RSS: {self.rss_before / mib:.1f} MiB before, "
                f"{self.rss_peak / mib:.1f} MiB at most, {self.rss_after / mib:.1f} MiB after "
                f"({(self.rss_after - self.rss_before) / mib:+.1f} MiB)",
                f"proxai's RSS during the load: {self._rss_quarters()}",
            ]
        )

    def _rss_quarters(self) -> str:
        timeline = self.rss_timeline
        if not timeline:
            return "no sample"
        picks = [timeline[min(len(timeline) - 1, len(timeline) * q // 4)] for q in (1, 2, 3, 4)]
        return ", ".join(f"{rss / 1024 / 1024:.1f} MiB at {at:.0f} s" for at, rss in picks)


# -- the upstream and the clients ----------------------------------------------------------


def _script(request: RecordedRequest) -> Script:
    data = request.json()
    if request.target.endswith("/chat/completions"):
        if data.get("model") == LOCAL_SLOW_MODEL:
            return Script.sse(_CHAT_SLOW, delay=0.1)
        return Script.sse(_CHAT_TEXT)
    kind = data.get("metadata", {}).get("churn", "short")
    if kind == "whole":
        return _WHOLE
    if kind == "stalled":
        return Script.sse(TURN1_EVENTS[:6], then=[Stall()])
    if kind == "hangup":
        return Script.sse(TURN1_EVENTS, delay=0.1)
    return Script.sse(TURN1_EVENTS, chunk_size=257)


def _body(kind: str) -> dict[str, Any]:
    if kind in ("translated", "translated_hangup"):
        model = LOCAL_MODEL if kind == "translated" else LOCAL_SLOW_MODEL
        return {"model": model, "input": "Weather?", "stream": True}
    body: dict[str, Any] = {**TURN1_REQUEST, "metadata": {"churn": kind}}
    if kind == "whole":
        body["stream"] = False
    return body


def _ok(kind: str, received: bytes) -> bool:
    if kind == "short":
        return received == TURN1
    if kind == "whole":
        return received == _WHOLE.body
    if kind == "translated":
        return b"event: response.completed" in received and b'"text":"It is sunny."' in received
    if kind in ("hangup", "translated_hangup"):
        return received.startswith(b"event: response.created")
    return (  # stalled
        received.startswith(turn_bytes(TURN1_EVENTS[:6])) and b"event: response.failed" in received
    )


async def _one(
    client: httpx.AsyncClient, url: str, kind: str, report: ChurnReport, hang_up: float
) -> None:
    received = b""
    try:
        async with client.stream("POST", url, json=_body(kind)) as response:
            chunks = response.aiter_raw()
            async for chunk in chunks:
                received += chunk
                if kind.endswith("hangup"):
                    # the first bytes, then whatever comes until the client hangs up
                    with trio.move_on_after(hang_up):
                        async for more in chunks:
                            received += more
                    break
    except httpx.HTTPError as exc:
        report.results[f"{kind}:{type(exc).__name__}"] += 1
        return
    report.results[f"{kind}:{'ok' if _ok(kind, received) else 'wrong bytes'}"] += 1


async def _load(
    url: str,
    seconds: float,
    report: ChurnReport,
    rng: random.Random,
    burst: int,
    hangups: int,
    min_samples: int = 0,
) -> None:
    most = burst + hangups + 8
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    deadline = trio.current_time() + seconds
    # A loaded machine samples less often: the load goes on (up to twice as long) until
    # the sampler has looked ``min_samples`` times, so the figures always rest on them.
    cap = deadline + seconds

    def loading() -> bool:
        now = trio.current_time()
        return now < deadline or (report.samples < min_samples and now < cap)

    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def keep_going(kind: str) -> None:
            while loading():
                await _one(client, url, kind, report, rng.uniform(0.1, 0.4))

        async with trio.open_nursery() as nursery:
            for i in range(hangups):
                nursery.start_soon(keep_going, ("hangup", "translated_hangup")[i % 2])
            for _ in range(4):
                nursery.start_soon(keep_going, "stalled")
            while loading():
                async with trio.open_nursery() as bursting:
                    for i in range(burst):
                        kind = ("short", "whole", "translated")[i % 3]
                        bursting.start_soon(_one, client, url, kind, report, 0.0)
                # A pause of up to two expiries: the next burst meets the connections of
                # this one as they expire and are swept.
                await trio.sleep(rng.uniform(0, 2) * report.keepalive_expiry)


# -- proxai, its process and what it says --------------------------------------------------


def _config(upstream_url: str, keepalive_expiry: float, max_idle: int) -> str:
    pool = f"keepalive_expiry = {keepalive_expiry}\nmax_idle_connections = {max_idle}\n"
    timeouts = "".join(f"{k} = {v}\n" for k, v in TIMEOUTS.items())
    return (
        '[server]\nhost = "127.0.0.1"\nport = 0\n\n'
        f"[timeouts]\n{timeouts}\n"
        f'[upstream]\nbase_url = "{upstream_url}"\napi_key = "sk-churn"\n{pool}\n'
        f'[upstreams.local]\nbase_url = "{upstream_url}"\nprotocol = "openai_chat"\n{pool}\n'
        f'[[routes]]\nmodel = "local-*"\nupstreams = ["local"]\n\n'
        f'[[routes]]\nmodel = "gpt-*"\nupstreams = ["default"]\n'
    )


@attrs.define
class _Proxai:
    url: str
    pid: int
    log: Path
    upstream_port: int

    def fds(self) -> Counter[str]:
        """proxai's open file descriptors by kind: ``client`` (a connection accepted from
        a client), ``upstream`` (a connection to the upstream), ``other`` (listening
        sockets, pipes, files). Sockets are told apart by their ports (Linux's
        /proc/<pid>/net/tcp)."""
        ports: dict[str, tuple[int, int]] = {}  # socket inode: (local port, remote port)
        for table in ("tcp", "tcp6"):
            for line in Path(f"/proc/{self.pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
                ports[fields[9]] = (local, remote)
        own_port = int(self.url.rsplit(":", 1)[1])
        kinds: Counter[str] = Counter()
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            local, remote = ports.get(target.removeprefix("socket:[").rstrip("]"), (0, 0))
            if remote == self.upstream_port:
                kinds["upstream"] += 1
            elif local == own_port and remote:
                kinds["client"] += 1
            else:
                kinds["other"] += 1
        return kinds

    def rss(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def errors(self) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [line for line in lines if " ERROR " in line][:5]


@asynccontextmanager
async def _serve(config: str, upstream_port: int) -> AsyncIterator[_Proxai]:
    """``proxai serve`` on ``config``, listening; stopped (SIGTERM) on exit."""
    with tempfile.TemporaryDirectory(prefix="proxai-churn-") as folder:
        path, log = Path(folder) / "proxai.toml", Path(folder) / "proxai.log"
        path.write_text(config)
        with log.open("wb") as out:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "proxai", "serve", "--config", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=out,
            )
            try:
                with trio.fail_after(30):
                    while b"listening on " not in (text := log.read_bytes()):
                        if process.poll() is not None:
                            raise RuntimeError(f"proxai serve exited: {text.decode()}")
                        await trio.sleep(0.05)
                url = text.split(b"listening on ", 1)[1].split()[0].rstrip(b",").decode()
                yield _Proxai(url, process.pid, log, upstream_port)
            finally:
                process.terminate()
                with trio.move_on_after(15):
                    await process.wait()
                if process.poll() is None:
                    process.kill()
                    await process.wait()


def _metrics(text: str) -> tuple[Counter[str], dict[str, dict[str, float]], float]:
    """From /metrics: requests by outcome, pool gauges by upstream and state, and
    background task failures."""
    outcomes: Counter[str] = Counter()
    pools: dict[str, dict[str, float]] = {}
    failures = 0.0
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels_text, value = rest.rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in labels_text.split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if name == "proxai_requests_total":
            outcomes[labels["outcome"]] += int(float(value))
        elif name == "proxai_upstream_connections":
            pools.setdefault(labels["upstream"], {})[labels["state"]] = float(value)
        elif name == "proxai_background_failures_total":
            failures += float(value)
    return outcomes, pools, failures


async def _look(proxai: _Proxai) -> tuple[int, Counter[str], dict[str, dict[str, float]], float]:
    """/readyz's status, then what /metrics says (see :func:`_metrics`)."""
    async with httpx.AsyncClient(timeout=30) as client:
        ready = await client.get(proxai.url + "/readyz")
        return ready.status_code, *_metrics((await client.get(proxai.url + "/metrics")).text)


async def _sample(proxai: _Proxai, report: ChurnReport) -> None:
    """Look at /readyz, the gauges and proxai's RSS every 0.25 s, until cancelled."""
    started = trio.current_time()
    async with httpx.AsyncClient(timeout=30) as client:
        while True:
            await trio.sleep(0.25)
            ready = await client.get(proxai.url + "/readyz")
            _, pools, report.background_failures = _metrics(
                (await client.get(proxai.url + "/metrics")).text
            )
            report.samples += 1
            rss = proxai.rss()
            report.rss_peak = max(report.rss_peak, rss)
            report.rss_timeline.append((trio.current_time() - started, rss))
            if ready.status_code != 200:
                report.not_ready += 1
                if report.first_not_ready is None:
                    report.first_not_ready = trio.current_time() - started
            for name, pool in pools.items():
                peak = report.peaks.setdefault(name, PoolPeak())
                peak.idle = max(peak.idle, pool.get("idle", 0.0))
                peak.closed = max(peak.closed, pool.get("closed", 0.0))


async def _settle(upstream: ScriptedUpstream, quiet: float) -> None:
    """Wait ``quiet`` seconds (the idle connections expire and are swept), then until
    the upstream has seen every connection closed (a hang guard, not a measure)."""
    await trio.sleep(quiet)
    with trio.move_on_after(30):
        await upstream.wait_open_connections(0)


async def churn(
    seconds: float,
    *,
    keepalive_expiry: float = 0.1,
    max_idle: int = 256,
    burst: int = 120,
    hangups: int = 16,
    warmup: float = 2.0,
    seed: int = 0,
    min_samples: int = 0,
) -> ChurnReport:
    """Run the churn soak for ``seconds`` after ``warmup`` seconds of the same load (the
    figures then compare two steady states), and on until ``/readyz`` and ``/metrics``
    were sampled ``min_samples`` times (at most twice ``seconds``); see the module's
    docstring."""
    report = ChurnReport(seconds, keepalive_expiry, max_idle)
    rng = random.Random(seed)
    upstream = ScriptedUpstream(_script)
    quiet = 3 * keepalive_expiry + 0.2
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.serve)
        config = _config(upstream.base_url, keepalive_expiry, max_idle)
        async with _serve(config, upstream.port) as proxai:
            url = proxai.url + "/v1/responses"
            if warmup:
                warming = ChurnReport(warmup, keepalive_expiry, max_idle)
                await _load(url, warmup, warming, rng, burst, hangups)
                await _settle(upstream, quiet)
            fds = proxai.fds()
            report.fds_before, report.rss_before = fds["other"] + fds["upstream"], proxai.rss()
            _, before, _, _ = await _look(proxai)
            started = trio.current_time()
            async with trio.open_nursery() as sampling:
                sampling.start_soon(_sample, proxai, report)
                await _load(url, seconds, report, rng, burst, hangups, min_samples)
                sampling.cancel_scope.cancel()
            report.seconds = trio.current_time() - started
            await _settle(upstream, quiet)
            fds = proxai.fds()
            report.fds_after, report.rss_after = fds["other"] + fds["upstream"], proxai.rss()
            report.upstream_fds_after, report.client_fds_after = fds["upstream"], fds["client"]
            report.ready_after, after, report.pools_after, report.background_failures = await _look(
                proxai
            )
            report.outcomes = after - before
            report.errors_logged = proxai.errors()
        nursery.cancel_scope.cancel()
    return report
