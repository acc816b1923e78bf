"""Where ``[telemetry]``'s CPU goes, counted: calls and instructions per request, on
against off, that do not depend on the machine's load (issue 34 item 3).

    .venv/bin/python -m bench.telemetry_profile [--requests 200] [--deltas 20] [--top 30]
    .venv/bin/python -m bench.telemetry_profile --steps [--requests 200]
    .venv/bin/python -m bench.telemetry_profile --callgrind [--requests 50]
    .venv/bin/python -m bench.telemetry_profile --encoding

Streaming Responses requests (``--deltas`` text deltas each, bench/streams.py's stream)
go one after another through :class:`~proxai.testing.memory_proxy.MemoryProxy`, with
``[telemetry]`` off and on (``sampling_ratio = 1.0``, exporting over OTLP/HTTP to a sink
in another process, so the exporters' threads do all their work: protobuf encoding and
HTTP requests). Each configuration runs in a fresh process at N and 2N requests, and the
difference over N is the cost of one request: startup, shutdown and the single metric
collection of a run cancel out. Spans are exported when a batch of 512 is full and at
shutdown, not on the 5 s timer (see ``_UNTIMED``), so one POST per 512 spans is in
the figure, as at the bench's rates.

- default: cProfile over every thread of the process (the trio thread and the SDK's
  exporter threads, each profiled from its start), total function calls per request
  (Python and builtin), and the functions that telemetry adds, by calls (own times
  are left out: they are as loaded as the machine, and a thread's waits count in them);
- ``--steps``: the calls of each step of one request's trace (its spans' starts, the
  attributes, the ends, the metrics, the exporter's encoding of its spans), counted in
  this process without a proxy around it;
- ``--callgrind``: the whole process under ``valgrind --tool=callgrind``, instructions
  per request (every thread);
- ``--encoding``: instructions per request of encoding a full batch (512 spans, 256
  requests' traces) to OTLP protobuf, by the SDK's encoder and by proxai's, under
  callgrind (one and three encodings of the batch, the difference over two).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import marshal
import math
import os
import pstats
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from bench.streams import Variant, request_body, responses_events, variant_of
from bench.telemetry import sink, spans_received, telemetry_tables, traced_request

_Key = tuple[str, int, str]
_Stats = dict[_Key, tuple[int, int, float, float, Any]]


_SCRIPTS: dict[bytes, Any] = {}


def _responder(request: Any) -> Any:
    """The stream the request's model names, built once (the upstream's work is no
    proxy's: only the in-memory transport's is left in the counts)."""
    from proxai.testing.upstream import Script

    script = _SCRIPTS.get(request.body)
    if script is None:
        script = _SCRIPTS[request.body] = Script.sse(responses_events(variant_of(request.body)))
    return script


async def _drive(requests: int, deltas: int, endpoint: str | None) -> None:
    from proxai.testing.memory_proxy import MemoryProxy

    telemetry = None
    if endpoint is not None:
        telemetry = {"enabled": True, "endpoint": endpoint, "sampling_ratio": 1.0}
    body = request_body(Variant(deltas), "responses")
    async with MemoryProxy(_responder, telemetry=telemetry) as proxy:
        for _ in range(requests):
            exchange = await proxy.request(body)
            assert exchange.status == 200 and exchange.body.endswith(b"\n\n"), exchange


def _profile_threads(profiles: list[cProfile.Profile]) -> None:
    """Every thread started from now on runs under a profiler of its own."""
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]


def child(mode: str, requests: int, deltas: int, endpoint: str | None, out: str) -> None:
    """One run, in this (fresh) process: ``mode`` is ``cprofile`` or ``plain``."""
    # Imports are no request's cost: done before the profiler starts.
    app: Any = importlib.import_module("proxai.service.app")
    # The lifespan's flush waits for every span: bounded (5 s), it was cut short under
    # callgrind, and how many spans were encoded depended on the machine's speed.
    app.TELEMETRY_FLUSH_SECONDS = math.inf
    if endpoint is not None:
        importlib.import_module("proxai.ops.telemetry")
    if mode == "plain":
        trio.run(_drive, requests, deltas, endpoint)
        return
    profiles: list[cProfile.Profile] = []
    _profile_threads(profiles)
    main = cProfile.Profile()
    main.enable()
    trio.run(_drive, requests, deltas, endpoint)
    main.disable()
    stats = pstats.Stats(main)
    for profile in profiles:
        stats.add(profile)
    stats.dump_stats(out)


#: Exports only when a batch is full (512 spans) and at shutdown, as at any rate above
#: ~100 spans/s, instead of on the SDK's timers: a timed export's count per request
#: would be set by how slow the profiler makes the run (callgrind's ~50x most).
_UNTIMED = {"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_METRIC_EXPORT_INTERVAL": "3600000"}


def _spawn(argv: list[str], prefix: Sequence[str] = ()) -> None:
    subprocess.run(
        [*prefix, sys.executable, "-m", "bench.telemetry_profile", *argv],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0", **_UNTIMED},
    )


def _load(path: str) -> _Stats:
    with open(path, "rb") as f:
        stats: _Stats = marshal.load(f)
    return stats


def _diff(large: _Stats, small: _Stats, n: int) -> dict[_Key, tuple[float, float]]:
    """Per request: calls and own seconds of each function."""
    out = {}
    for key, (_, calls, own, _, _) in large.items():
        base = small.get(key, (0, 0, 0.0, 0.0, None))
        out[key] = ((calls - base[1]) / n, (own - base[2]) / n)
    return out


def _where(key: _Key) -> str:
    path, line, name = key
    if path == "~":
        return name
    short = re.sub(r".*/site-packages/", "", path)
    short = re.sub(r".*/(proxai|bench)/", r"\1/", short)
    return f"{short}:{line}({name})"


def _group(key: _Key) -> str:
    path = key[0]
    for mark, group in (
        ("opentelemetry/exporter", "otel exporter"),
        ("opentelemetry/sdk", "otel sdk"),
        ("opentelemetry/", "otel api"),
        ("google/protobuf", "protobuf"),
        ("requests/", "requests/urllib3/http"),
        ("urllib3/", "requests/urllib3/http"),
        ("http/client", "requests/urllib3/http"),
        ("proxai/ops/telemetry", "proxai telemetry"),
        ("proxai/ops/genai", "proxai telemetry"),
        ("proxai/ops/labels", "proxai telemetry"),
        ("threading.py", "threading"),
    ):
        if mark in path:
            return group
    if path == "~":
        return "builtins"
    return "rest"


def cprofile_report(requests: int, deltas: int, top: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, sink() as endpoint:
        runs: dict[tuple[str, int], _Stats] = {}
        for side in ("off", "on"):
            for n in (requests, 2 * requests):
                out = str(Path(tmp) / f"{side}-{n}.prof")
                argv = ["--child", "cprofile", "--requests", str(n), "--deltas", str(deltas)]
                argv += ["--out", out] + (["--endpoint", endpoint] if side == "on" else [])
                _spawn(argv)
                runs[side, n] = _load(out)
    per = {
        side: _diff(runs[side, 2 * requests], runs[side, requests], requests)
        for side in ("off", "on")
    }
    totals = {side: sum(c for c, _ in per[side].values()) for side in per}
    print(f"function calls per request ({deltas} deltas, cProfile, every thread):")
    for side in ("off", "on"):
        print(f"  {side}: {totals[side]:.0f}")
    added = totals["on"] - totals["off"]
    print(f"  on - off: {added:.0f} ({added / totals['off']:.1%} of off)")
    delta: dict[_Key, float] = {}
    for key in per["on"].keys() | per["off"].keys():
        delta[key] = per["on"].get(key, (0.0, 0.0))[0] - per["off"].get(key, (0.0, 0.0))[0]
    groups: dict[str, float] = {}
    for key, calls in delta.items():
        groups[_group(key)] = groups.get(_group(key), 0.0) + calls
    print("on - off by group, calls per request:")
    for group, calls in sorted(groups.items(), key=lambda g: -g[1]):
        print(f"  {calls:8.1f}  {group}")
    print(f"top {top} added functions, calls per request:")
    for key, calls in sorted(delta.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {calls:8.1f}  {_where(key)}")


def steps_report(requests: int) -> None:
    """Calls per request of each step of a request's trace, in this process (the
    request as ``bench.telemetry.trace_cost`` makes it: a SERVER and a CLIENT span,
    every metric), and of the exporter's encoding of its two spans."""
    from proxai.config_file import load_config
    from proxai.ops import telemetry as module

    counts: dict[str, int] = {}
    step: list[str | None] = [None]

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call") and step[0] is not None:
            counts[step[0]] = counts.get(step[0], 0) + 1

    def counted(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer, step[0] = step[0], label
            try:
                return inner(*args, **kwargs)
            finally:
                step[0] = outer

        setattr(owner, name, wrapper)

    with sink() as endpoint:
        config = load_config(None, overrides=telemetry_tables(endpoint))
        telemetry = module.Telemetry(config, ["gpt-5.4"])
        _count_steps(telemetry, requests, counts, step, count, counted)
    print(f"calls per request of each step ({requests} requests):")
    for label, calls in counts.items():
        print(f"  {calls / requests:7.1f}  {label}")
    print(f"  {sum(counts.values()) / requests:7.1f}  in all")


def _count_steps(
    telemetry: Any,
    requests: int,
    counts: dict[str, int],
    step: list[str | None],
    count: Callable[..., None],
    counted: Callable[[Any, str, str], None],
) -> None:
    from proxai.ops import telemetry as module

    encode = _encoder()

    ended: list[Any] = []
    processor: Any = getattr(telemetry, "_processor", None)  # absent before issue 34
    if processor is None:
        provider: Any = telemetry._tracer_provider
        processor = provider._active_span_processor._span_processors[0]
    processor.on_end = ended.append
    counted(module.Telemetry, "request", "SERVER span started")
    counted(module.RequestTrace, "attempt_started", "CLIENT span started, its headers")
    counted(module.RequestTrace, "_record_metrics", "metrics recorded")
    counted(module, "attempt_attributes", "attributes built")
    counted(module, "server_attributes", "attributes built")
    counted(module.RequestTrace, "finish", "spans ended (the rest of finish)")
    headers = [(b"content-type", b"application/json")]

    def one() -> None:
        traced_request(telemetry, headers)

    for _ in range(20):
        one()
    ended.clear()
    sys.setprofile(count)
    for _ in range(requests):
        one()
    step[0] = "spans encoded (exporter thread)"
    encode(ended)
    step[0] = None
    sys.setprofile(None)
    telemetry.shutdown()


def _sdk_encoder(spans: list[Any]) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans(spans).SerializePartialToString())


def _encoder(*, sdk: bool = False) -> Callable[[list[Any]], bytes]:
    """The exporter's encoding of a batch: proxai's own (issue 34), or the SDK's (before,
    or when asked)."""
    if sdk:
        return _sdk_encoder
    try:
        from proxai.ops.otlp_spans import encode_spans
    except ImportError:
        return _sdk_encoder
    return encode_spans


def _instructions(argv: list[str], out: str) -> int:
    _spawn(
        argv,
        ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={out}"],
    )
    text = Path(out).read_text()
    match = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    assert match is not None, "no totals in the callgrind output"
    return int(match.group(1))


def callgrind_report(requests: int, deltas: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, sink(count_spans=True) as endpoint:
        per: dict[str, float] = {}
        for side in ("off", "on"):
            counts = []
            for n in (requests, 2 * requests):
                argv = ["--child", "plain", "--requests", str(n), "--deltas", str(deltas)]
                argv += ["--endpoint", endpoint] if side == "on" else []
                before = spans_received()
                counts.append(_instructions(argv, str(Path(tmp) / f"{side}-{n}.out")))
                if side == "on":  # every request's two spans encoded and sent
                    got = spans_received() - before
                    assert got == 2 * n, f"{got} spans exported of {2 * n}"
            per[side] = (counts[1] - counts[0]) / requests
    print(f"instructions per request ({deltas} deltas, callgrind, whole process):")
    for side in ("off", "on"):
        print(f"  {side}: {per[side]:.0f}")
    added = per["on"] - per["off"]
    print(f"  on - off: {added:.0f} ({added / per['off']:.1%} of off)")


def _batch() -> list[Any]:
    """A full batch of proxai's spans: 256 traced requests', as the processor gets them."""
    from proxai.config_file import load_config
    from proxai.ops.telemetry import Telemetry

    config = load_config(None, overrides=telemetry_tables("http://127.0.0.1:9"))
    telemetry = Telemetry(config, ["gpt-5.4"])
    ended: list[Any] = []
    processor: Any = telemetry._processor
    processor.on_end = ended.append
    for _ in range(256):
        traced_request(telemetry, [(b"content-type", b"application/json")])
    return ended


def encode_child(which: str, times: int) -> None:
    """Encode a full batch ``times`` times (after one warm-up) with ``which`` encoder."""
    batch = _batch()
    encode = _encoder(sdk=which == "sdk")
    encode(batch)
    for _ in range(times):
        encode(batch)


def encoding_report() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("instructions per request of encoding a full batch (512 spans, callgrind):")
        for which in ("sdk", "proxai"):
            counts = []
            for times in (1, 3):
                argv = ["--child", "encode", "--encoder", which, "--requests", str(times)]
                counts.append(_instructions(argv, str(Path(tmp) / f"{which}-{times}.out")))
            print(f"  {which}: {(counts[1] - counts[0]) / (2 * 256):.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--steps", action="store_true", help="calls of each step, in process")
    parser.add_argument(
        "--encoding", action="store_true", help="the encoder's instructions, SDK's and proxai's"
    )
    parser.add_argument("--child", choices=("cprofile", "plain", "encode"), help=argparse.SUPPRESS)
    parser.add_argument("--encoder", choices=("sdk", "proxai"), help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "encode":
        encode_child(args.encoder, args.requests)
    elif args.child:
        child(args.child, args.requests, args.deltas, args.endpoint, args.out or "")
    elif args.encoding:
        encoding_report()
    elif args.steps:
        steps_report(args.requests)
    elif args.callgrind:
        callgrind_report(args.requests, args.deltas)
    else:
        cprofile_report(args.requests, args.deltas, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
