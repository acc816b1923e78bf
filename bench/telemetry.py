"""What OpenTelemetry costs: CPU per stream and per event, telemetry on against off (issue 26).

    .venv/bin/python -m bench.telemetry [--reps 3] [--c 1 4 16] [--quick]

The per-event regime of ``bench/perevent.py`` (its upstream, cells and arithmetic):
``proxai`` with telemetry off (the default), ``proxai-otel`` with ``[telemetry]`` on and
``sampling_ratio = 1.0`` (every request a SERVER and a CLIENT span, every GenAI metric),
and both translating (``-translating``: a Responses client over a Chat upstream), side
by side in one run, interleaved, each at 20 and 80 paced deltas. The spans and metrics
go to a sink on the driver core (an HTTP server that reads each OTLP export and answers
200, as a collector does), so proxai's CPU includes its exporter threads' work: the
protobuf encoding and the HTTP requests. Targets: at most 5 % more CPU per stream, and
nothing per event (events are counted, not spanned).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.common import Row, loadavg, log, median, pin_driver, save, stop
from bench.contention import quiet
from bench.perevent import LENGTHS, cell, event_upstream, lanes

PAIRS = (("proxai", "proxai-otel"), ("proxai-translating", "proxai-otel-translating"))
CONCURRENCY = (1, 4, 16)
#: Per stream: at most this much more CPU with telemetry on.
STREAM_TARGET = 1.05


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that reads each export and says it took it."""

    exports = 0
    received = 0
    #: Spans received, when :func:`sink` is asked to count them (decoded here).
    spans = 0
    counting = False

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        type(self).exports += 1
        type(self).received += len(body)
        if type(self).counting and self.path.endswith("/v1/traces"):
            type(self).spans += _spans_in(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def _spans_in(body: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(body)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def spans_received() -> int:
    """Spans the sinks of this process have decoded (``sink(count_spans=True)``)."""
    return _Sink.spans


@contextmanager
def sink(*, count_spans: bool = False) -> Iterator[str]:
    """The sink on the driver core, in a thread of this process: its endpoint.
    ``count_spans`` decodes each trace export to count its spans (:func:`spans_received`),
    work the CPU benches leave out of the driver's core."""
    _Sink.counting = count_spans
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def summary(raw: list[Row]) -> list[Row]:
    """Per pair and concurrency: CPU per event (marginal) and per stream (fixed) of each
    side, and on/off taken per repetition, then the medians."""
    short, long = LENGTHS
    out = []
    for off, on in PAIRS:
        for c in sorted({r["concurrency"] for r in raw}):
            split: dict[str, dict[int, tuple[float, float]]] = {off: {}, on: {}}
            for name in (off, on):
                for rep in {r["rep"] for r in raw}:
                    cells = {
                        r["deltas"]: r["cpu_per_stream_us"]
                        for r in raw
                        if (r["target"], r["concurrency"], r["rep"]) == (name, c, rep)
                    }
                    if short in cells and long in cells:
                        marginal = (cells[long] - cells[short]) / (long - short)
                        split[name][rep] = (marginal, cells[short] - short * marginal)
            reps = sorted(set(split[off]) & set(split[on]))
            if not reps:
                continue
            row: Row = {"pair": off, "concurrency": c, "reps": len(reps)}
            for label, name in (("off", off), ("on", on)):
                row[f"{label}_event_us"] = median([split[name][r][0] for r in reps])
                row[f"{label}_stream_us"] = median([split[name][r][1] for r in reps])
                row[f"{label}_stream_20_us"] = median(
                    [
                        next(
                            x["cpu_per_stream_us"]
                            for x in raw
                            if (x["target"], x["concurrency"], x["rep"], x["deltas"])
                            == (name, c, r, short)
                        )
                        for r in reps
                    ]
                )
            row["stream_ratio"] = median(
                [split[on][r][1] / split[off][r][1] for r in reps if split[off][r][1] > 0]
            )
            row["stream_20_ratio"] = row["on_stream_20_us"] / row["off_stream_20_us"]
            row["event_delta_us"] = row["on_event_us"] - row["off_event_us"]
            out.append(row)
    return out


def telemetry_tables(endpoint: str) -> dict[str, dict[str, Any]]:
    """A configuration's tables for a telemetry-only process: every trace sampled and
    exported to ``endpoint``, an upstream that is never called."""
    return {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "telemetry": {"enabled": True, "endpoint": endpoint, "sampling_ratio": 1.0},
    }


def traced_request(telemetry: Any, headers: list[tuple[bytes, bytes]]) -> None:
    """One streamed request's whole trace through ``telemetry`` (a
    :class:`proxai.ops.telemetry.Telemetry`): its SERVER span, one attempt's CLIENT span
    and headers, and the end with a usage object, as the relay reports them."""
    from proxai.ops.genai import RequestFacts
    from proxai.outcome import AttemptRecord, Outcome, OutcomeKind
    from proxai.protocols.responses.reader import responses_usage

    usage = {
        "input_tokens": 120,
        "output_tokens": 45,
        "output_tokens_details": {"reasoning_tokens": 10},
    }
    outcome = Outcome("POST", "/v1/responses", request_id="req_0", model="gpt-5.4")
    trace = telemetry.request(headers, outcome)
    trace.facts = RequestFacts("POST", "chat")
    attempt = AttemptRecord("default", 0.001)
    trace.attempt_started(attempt, 0, headers)
    attempt.status = 200
    trace.attempt_done(attempt)
    outcome.kind, outcome.status, outcome.streaming = OutcomeKind.COMPLETED, 200, True
    outcome.first_byte_s, outcome.first_event_s, outcome.total_s = 0.2, 0.21, 0.5
    outcome.events, outcome.usage, outcome.tokens = 88, usage, responses_usage(usage)
    outcome.response_id, outcome.response_model = "resp_0", "gpt-5.4"
    outcome.finish_reasons = ["completed"]
    trace.finish(outcome)


def trace_cost(endpoint: str, requests: int = 2000) -> Row:
    """CPU per request of proxai's telemetry alone, in this process: a request's
    ``RequestTrace`` (a SERVER and a CLIENT span, the metrics) from start to finish,
    exported to ``endpoint``, the exporter threads' CPU included (process time, read
    after the final flush). Steadier than the difference of two whole-proxai cells."""
    import time

    from proxai.config_file import load_config
    from proxai.ops.telemetry import Telemetry

    telemetry = Telemetry(load_config(None, overrides=telemetry_tables(endpoint)), ["gpt-5.4"])
    parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    headers = [(b"content-type", b"application/json"), (b"traceparent", parent)]

    def one() -> None:
        traced_request(telemetry, headers)

    for _ in range(200):  # warm up
        one()
    before = time.process_time()
    for _ in range(requests):
        one()
    telemetry.shutdown()  # exports what is pending: its CPU counts
    return {
        "requests": requests,
        "cpu_per_request_us": (time.process_time() - before) / requests * 1e6,
    }


def run(reps: int, concurrency: Sequence[int] = CONCURRENCY) -> dict[str, Any]:
    names = [name for pair in PAIRS for name in pair]
    load_before = loadavg()
    process, upstream = event_upstream()
    raw: list[Row] = []
    try:
        with sink() as endpoint:
            os.environ["PROXAI_OTLP"] = endpoint
            with lanes(names, upstream) as found:
                for lane in found:
                    cell(lane, "paced", 4, 2, -1)  # warm up
                for rep in range(reps):
                    for c in concurrency:
                        shift = (rep + c) % len(found)
                        for lane in found[shift:] + found[:shift]:
                            for deltas in LENGTHS:
                                raw.append(cell(lane, "paced", c, deltas, rep))
        with sink() as endpoint:
            alone, seen = quiet(lambda: trace_cost(endpoint), "telemetry alone")
            alone.update(seen.fields())
    finally:
        stop([process])
    rows = summary(raw)
    bad = sum(r["bad"] for r in raw)
    return {
        "raw": raw,
        "summary": rows,
        "alone": alone,
        "loadavg": [load_before, loadavg()],
        "checks": {
            "cells": len(raw),
            "bad": bad,
            "exports": _Sink.exports,
            "bytes": _Sink.received,
        },
        "settings": {"lengths": list(LENGTHS), "concurrency": list(concurrency), "reps": reps},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--c", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--quick", action="store_true", help="one rep, c=4")
    args = parser.parse_args()
    pin_driver()
    result = run(1, (4,)) if args.quick else run(args.reps, args.c)
    save("telemetry", result)
    for row in result["summary"]:
        log({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    print(json.dumps(result["checks"]), json.dumps(result["alone"]), result["loadavg"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
