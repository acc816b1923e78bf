"""The request log: one line per request, built from its outcome record.

Only an allow-list of the record's fields is logged: what happened, where,
when and how much, with tool names and argument *lengths*. Never bodies,
prompts, argument text, headers or keys (the anomalies the observers note can
quote upstream bytes, so only their number is logged). Every field is bounded,
so a line stays a few kilobytes whatever the request or the stream: the lists
as the record keeps them (:data:`~proxai.outcome.MAX_LISTED` entries), free
text cut at :data:`MAX_LOG_TEXT` characters. The one field of upstream text,
``detail`` (an upstream's error message), goes through a
:class:`~proxai.ops.masking.SecretMask` too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from ..config import LogFormat, LoggingConfig
from ..outcome import WARNINGS, Outcome
from .masking import SecretMask

__all__ = [
    "MAX_LOG_TEXT",
    "JsonFormatter",
    "RequestLog",
    "configure",
    "log_fields",
]

log = logging.getLogger("proxai.request")


#: Characters kept of a free-text field of the line (a path, a model name, an upstream's
#: error message can be as long as a request or an event): the rest is cut, and counted.
MAX_LOG_TEXT = 1024


def _short(value: str | None) -> str | None:
    if value is None or len(value) <= MAX_LOG_TEXT:
        return value
    return f"{value[:MAX_LOG_TEXT]}... ({len(value) - MAX_LOG_TEXT} more characters)"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def log_fields(outcome: Outcome) -> dict[str, Any]:
    """The fields of a request's log line, in order."""
    return {
        "request_id": outcome.request_id,
        "method": outcome.method,
        "path": _short(outcome.path),
        "status": outcome.status,
        "outcome": outcome.kind.value if outcome.kind else None,
        "transport": outcome.transport if outcome.transport != "http" else None,
        "socket_id": outcome.socket_id,
        "route": outcome.route,
        "upstream": outcome.upstream,
        "attempts": len(outcome.attempts),
        "attempt_results": [
            a.status if a.status is not None else a.result for a in outcome.attempts
        ],
        "retry_refused": outcome.retry_refused,
        "model": _short(outcome.model),
        "stream": outcome.streaming,
        "translation": outcome.translation,
        "dropped": outcome.dropped,
        "tools": outcome.tools,
        "stalled_item": _short(outcome.stalled_item),
        "first_byte_ms": _ms(outcome.first_byte_s),
        "first_event_ms": _ms(outcome.first_event_s),
        "total_ms": _ms(outcome.total_s),
        "events": outcome.events,
        "bytes_in": outcome.bytes_in,
        "bytes_out": outcome.bytes_out,
        "usage": outcome.tokens.counts() if outcome.tokens is not None else {},
        "calls": [
            {
                "type": c.type,
                "name": c.name,
                "call_id": c.call_id,
                "arguments_length": c.arguments_length,
            }
            for c in outcome.calls
        ],
        "calls_more": outcome.calls_more,
        "aggregates_match": outcome.aggregates_match,
        "anomalies": len(outcome.anomalies),
        "warnings": [_short(w) for w in outcome.warnings] or None,
        "stored_as": outcome.stored_as,
        "limit_key": outcome.limit_key,
        "limited": outcome.limited,
        "charged_tokens": outcome.charged_tokens,
        "detail": _short(outcome.detail),
    }


def _escape(char: str) -> str:
    """``\\uXXXX`` as JSON writes it (a surrogate pair beyond the BMP)."""
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _text(value: str) -> str:
    """A value as one token: quoted (JSON escapes) when it holds a space, a quote or a
    character that is not printable, so a client's path or model cannot forge or break
    a line. orjson escapes only what JSON requires (below U+0020): the rest of what
    can end a line for a log reader (U+0085, U+2028, U+2029) or hide text (U+202E)
    is escaped here."""
    if not value or any(c.isspace() or c == '"' or not c.isprintable() for c in value):
        quoted = orjson.dumps(value).decode()
        return "".join(c if c.isprintable() else _escape(c) for c in quoted)
    return value


def _human(fields: dict[str, Any]) -> str:
    head = (
        f"{_text(fields['method'])} {_text(fields['path'])} {fields['status']} {fields['outcome']}"
    )
    parts = [head]
    for key, value in fields.items():
        if key in ("method", "path", "status", "outcome") or value in (None, [], {}, 0, False):
            continue
        if key == "calls":
            value = ",".join(f"{c['name']}({c['arguments_length']})" for c in value)
        elif key == "usage":
            value = ",".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ",".join(str(v) for v in value)
        parts.append(f"{key}={_text(str(value))}")
    return " ".join(parts)


class RequestLog:
    """Logs each outcome at info, or at warning when it is slow or went wrong."""

    def __init__(self, config: LoggingConfig, mask: SecretMask | None = None) -> None:
        self._warn_s = config.warn_ms / 1000
        self._mask = mask or SecretMask()

    def __call__(self, outcome: Outcome) -> None:
        slow = outcome.total_s is not None and outcome.total_s > self._warn_s
        level = logging.WARNING if slow or outcome.kind in WARNINGS else logging.INFO
        if not log.isEnabledFor(level):
            return
        fields = log_fields(outcome)
        if outcome.detail:  # masked whole, then cut: no secret is left half-masked at the cut
            fields["detail"] = _short(self._mask(outcome.detail))
        if slow:
            fields["slow"] = True
        message = _human(fields)
        log.log(level, "%s", message, extra={"proxai_fields": fields})


#: Line breaks JSON lets a string hold raw (orjson escapes those below U+0020), which
#: some log readers split lines at: escaped, the line stays one line and the same JSON.
_JSON_LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


class JsonFormatter(logging.Formatter):
    """Every log record as one JSON object; request records carry their fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
        }
        fields = getattr(record, "proxai_fields", None)
        if fields is not None:
            line.update(fields)
        else:
            line["message"] = record.getMessage()
            if record.exc_info:
                line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode().translate(_JSON_LINE_BREAKS)


def configure(config: LoggingConfig, level_override: str | None = None) -> None:
    """Set up the root logger for ``proxai serve``: format and level."""
    handler = logging.StreamHandler()
    if config.format is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level_override or config.level).upper())
    for noisy in ("httpx", "httpcore"):  # a line per upstream request says nothing new
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # coredis logs each retry and reconnection; proxai says once that Redis is away
    # (proxai.state.redis) and each request's record says what it cost.
    logging.getLogger("coredis").setLevel(logging.ERROR)
