"""Render docs/reliability.md from the fault matrix: ``python -m tests.faults.render``."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.faults.cases import (
    CASES,
    CLIENT_STAGES,
    DISCONNECT_AT,
    MATRIX_TIMEOUTS,
    MAX_EVENT_BYTES,
    PRE_STREAM,
)
from tests.faults.kits import KITS

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
#: The APIs' labels, in the table's order.
LABELS = ", ".join(kit.name for kit in KITS.values())


def render() -> str:
    t = MATRIX_TIMEOUTS
    lines = [
        "# Reliability: the fault matrix",
        "",
        "Generated from `tests/faults/cases.py` by `python -m tests.faults.render` (run by",
        "`make reliability-doc`); `tests/faults/test_render.py` fails when this file is out of",
        "date. Every row is a test in `tests/faults/test_matrix.py`, run on trio's virtual clock",
        "with in-memory transports, so each time below is exact. Deadlines used: "
        + ", ".join(f"`{k}` {v:g} s" for k, v in t.items())
        + f", `max_event_bytes` {MAX_EVENT_BYTES}.",
        "",
        "Each case also asserts that the upstream connection was closed, that every task of",
        "the request has ended, that what the upstream sent before the fault reached the",
        "client unchanged, and that the outcome record names the fault.",
        "",
        "Each row is one attempt (`[retries] max_attempts = 1`), which is how a client meets",
        "each fault on a route of one upstream: by default proxai tries each upstream once.",
        "On a route of several upstreams, the faults before the headers",
        "(`before_headers` rows: silence, EOF, reset) and `429`/`5xx` answers are first",
        "retried once on each next upstream of the route, within the retry budget; see",
        "`tests/policy/test_retries.py` and [configuration.md](configuration.md#retries).",
        "",
        "Stages: `before_headers` (the upstream has not answered), `before_first_event`",
        "(headers, no event), `mid_text`, `mid_arguments` (one tool call open),",
        "`mid_parallel_arguments` (two calls; Anthropic: the first done, the second open),",
        "`before_terminal` (every item done, no terminal event). Faults: `silence`, `eof` (a",
        "clean end of the body), `reset` (TCP reset), `oversized_event` (an event that grows",
        "past `max_event_bytes`).",
        "",
        "| protocol | stage | fault | client's response ends at | client gets | outcome |",
        "|---|---|---|---|---|---|",
    ]
    for case in CASES:
        if case.status == 200:
            gets = f"events so far + in-stream error `{case.error}`"
        else:
            gets = f"HTTP {case.status} `{case.error}`"
        lines.append(
            f"| {case.protocol} | {case.stage} | {case.fault} | {case.ends_at:g} s | {gets} "
            f"| `{case.outcome.value}` |"
        )
    lines += [
        "",
        f"Errors before the first byte (stages {', '.join(f'`{s}`' for s in PRE_STREAM)}) are",
        "HTTP errors that clients retry: OpenAI's JSON with `code`, or on `/v1/messages`",
        'Anthropic\'s `{"type": "error", "error": {"type", "message"}}`. In-stream errors',
        "use each protocol's own shape (see docs/cancellation.md). The column shows the",
        "error's `code` on OpenAI's APIs (its `type` is always `server_error`) and its `type`",
        "on Anthropic's: one code per cause, the same in the stream and in the HTTP error",
        "before the first byte, passed through or translated (`proxai/errors.py`,",
        "`ending_code`).",
        "",
        "## The client's side",
        "",
        "| case | protocols | what happens | outcome |",
        "|---|---|---|---|",
        f"| disconnect at {DISCONNECT_AT:g} s, at each of {', '.join(CLIENT_STAGES)} "
        f"| {LABELS} | the upstream connection closes at {DISCONNECT_AT:g} s exactly; "
        "every task ends | `client_disconnected` |",
        "| stops reading (stays connected) while the upstream streams on "
        f"| {LABELS} | no false stall; the upstream connection is released at "
        f"`client_write` ({t['client_write']:g} s); proxai reads only what its channels hold "
        "| `client_stalled` |",
        "| stops reading, then reads again | "
        f"{LABELS} | what was queued, then the protocol's error (\"the client read "
        'nothing for ...") | `client_stalled` |',
        f"| sends half its body, then nothing | {LABELS} | `408` at `request_body` "
        f"({t['request_body']:g} s); nothing reaches the upstream | `request_body_timeout` |",
        "",
        "## Input that is not what it should be",
        "",
        "For each protocol, after an open tool call: lines that are no SSE at all (an HTML",
        "error page), a `data:` line that is not JSON, and invalid UTF-8 are forwarded byte for",
        "byte and recorded as anomalies in the outcome; the call's `tool_arguments` deadline",
        "still fires on time.",
        "",
        "An event stream the upstream compressed although proxai asked for",
        "`accept-encoding: identity` (`tests/upstream/test_client.py`): a `gzip`, `x-gzip` or",
        "`deflate` stream is decoded as it arrives (in pieces of at most 64 KiB, however well",
        "it compressed), then framed and observed like any other; the client gets it plain,",
        "without `content-encoding`, whatever it accepts: proxai may have to end a stream with",
        "an event of its own, which needs an event boundary that compressed bytes do not have.",
        "Its outcome notes the coding as an anomaly, and `bytes_in` counts the bytes as they",
        "came. A stream that is not valid in its coding ends like a reset one",
        "(`upstream_reset`). Any other coding (`br`, `zstd`, several codings) cannot be",
        "framed: the body is relayed unchanged, `content-encoding` included, without the",
        "stream's deadlines but `total`, as for any body proxai does not observe, with an",
        "anomaly in its outcome and a warning in the log. Never a false `502`.",
        "",
        "A response with more bytes than its framing allows (a body longer than its",
        "`Content-Length`, data after the last chunk, a body on a `HEAD`, `204` or `304`",
        "response; `tests/upstream/test_pools.py`, on both transports): the client gets the",
        "response as framed; the rest is dropped with the upstream connection, which is",
        "closed, never pooled (pooled, it would answer the next request, another client's,",
        "from those bytes); the outcome notes it as an anomaly, with a warning in the log, as",
        'nginx logs "upstream sent more data than specified".',
        "",
        "A response with both `Content-Length` and `Transfer-Encoding` (RFC 9112 section 6.3",
        "forbids it, and a relay must not forward its `Content-Length`): `502` with",
        '`code: "upstream_invalid_response"`, as nginx answers; the connection is closed',
        "unread (`proxy_error` in the outcome).",
        "",
        "## Beyond the matrix",
        "",
        "- **Soak** (`proxai/testing/soak.py`): a rotating mix of healthy, stalled, reset and",
        "  abandoned streams through one real server. `tests/test_soak.py` runs 500 at",
        "  concurrency 50 in every `make test`; `bench/soak.py` runs 10,000 at concurrency 200",
        "  (results in docs/soak.md). Both require every healthy stream byte-exact, every",
        "  outcome as expected, and open file descriptors and trio tasks back to their count",
        "  before the run.",
        "- **Churn** (`proxai/testing/churn.py`): `proxai serve` under bursts of short",
        "  requests, streams abandoned after 0.1 to 0.4 s and stalls, translated and not, with",
        "  `keepalive_expiry = 0.1`: `/readyz` 200 throughout, no closed connection left in a",
        "  pool, the pools empty and proxai's fds as before afterwards. `make soak`",
        "  (`tests/soak/test_churn.py`: out of `make test`, since it samples in real time)",
        "  runs 10 s of it; `bench/churn.py` 10 minutes (results in docs/soak.md).",
        "- **Fuzzing** (`tests/test_fuzz.py`, `tests/wire/test_sse.py`): the framer on arbitrary",
        "  bytes and chunkings; each observer on arbitrary event streams, ended every way;",
        "  the request projections on arbitrary JSON (accepted or 400, never anything else);",
        "  odd HTTP through a real server (wrong content type, chunked bodies,",
        "  `Expect: 100-continue`, 200 KB headers, HTTP/2, arbitrary request bytes).",
        "- **Bounded memory**: an event that never ends is cut at `max_event_bytes`",
        "  (`oversized_event` rows above); a stream keeps at most `max_open_items` items",
        "  open and at most `max_event_bytes` of text and item records for its end-of-stream",
        "  checks and its translation, about a byte per character, never an object per delta",
        "  (`tests/protocols/test_kept_memory.py`, `tests/protocols/test_linear_streams.py`);",
        "  a client that stops reading holds proxai to what its channels (4 + 4 messages)",
        "  hold, and the upstream is released at `client_write`; on Linux the kernel then",
        "  closes its connection, freeing its slot",
        "  (`tests/relay/test_stalled_client.py`, real sockets).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(text)
    else:
        sys.stdout.write(text)
