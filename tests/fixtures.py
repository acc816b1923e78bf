"""Access to the recorded upstream transcripts in ``../shared/fixtures`` (read, never copied).

The folder is found at ``$PROXAI_FIXTURES`` or, by default, ``shared/fixtures``
beside the repository. Where it is absent, the conformance tests say so and
skip; in this project's CI it is always present.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest

DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures"
FIXTURES = Path(os.environ.get("PROXAI_FIXTURES", DEFAULT))


@attrs.frozen
class Transcript:
    """One recorded Responses stream, as the upstream sent it."""

    name: str
    body: bytes


def _vercel_streams(path: Path) -> list[bytes]:
    """Data-only JSON lines, framed as OpenAI frames them, one stream per response.created."""
    streams: list[list[bytes]] = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        kind = json.loads(line)["type"]
        if kind == "response.created" or not streams:
            streams.append([])
        streams[-1].append(b"event: " + kind.encode() + b"\ndata: " + line + b"\n\n")
    return [b"".join(s) for s in streams]


def responses_transcripts() -> list[Transcript]:
    """Every Responses transcript in the fixtures folder (empty if the folder is absent)."""
    if not FIXTURES.is_dir():
        return []
    out: list[Transcript] = []
    for path in sorted(FIXTURES.glob("responses_*.sse")):
        out.append(Transcript(path.name, path.read_bytes()))
    for path in sorted(FIXTURES.glob("vercel_*.chunks.txt")):
        streams = _vercel_streams(path)
        for i, body in enumerate(streams):
            suffix = f"#{i + 1}" if len(streams) > 1 else ""
            out.append(Transcript(path.name + suffix, body))
    return out


def chat_transcripts() -> list[Transcript]:
    """Every Chat Completions transcript in the fixtures folder."""
    if not FIXTURES.is_dir():
        return []
    return [Transcript(p.name, p.read_bytes()) for p in sorted(FIXTURES.glob("chat_*.sse"))]


TRANSCRIPTS = responses_transcripts()
CHAT_TRANSCRIPTS = chat_transcripts()

needs_fixtures = pytest.mark.skipif(
    not TRANSCRIPTS, reason=f"no recorded transcripts at {FIXTURES} (set PROXAI_FIXTURES)"
)


def transcript_params(transcripts: list[Transcript] = TRANSCRIPTS) -> list[object]:
    """Parametrize over transcripts; a single skipped case says why when there are none."""
    if not transcripts:
        return [pytest.param(None, marks=needs_fixtures, id="no-fixtures")]
    return [pytest.param(t, id=t.name) for t in transcripts]
