"""Errors proxai answers itself, in OpenAI's JSON error format.

Every response proxai makes on its own (bad request, upstream unreachable,
upstream too slow to answer) has the body
``{"error": {"message", "type", "param", "code"}}`` that the official SDKs map
to their exception classes, so a client sees a proxai failure the way it would
see the same failure from the API itself.
"""

from __future__ import annotations

import attrs
import orjson

__all__ = ["ProxyError", "error_body"]


def error_body(
    message: str, type: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """Encode OpenAI's error JSON."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


@attrs.define(eq=False)
class ProxyError(Exception):
    """A failure proxai reports to the client as an HTTP error response."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def body(self) -> bytes:
        return error_body(self.message, self.type, param=self.param, code=self.code)

    @classmethod
    def invalid_request(
        cls, message: str, *, param: str | None = None, code: str | None = None
    ) -> ProxyError:
        return cls(400, message, "invalid_request_error", param, code)
