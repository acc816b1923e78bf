"""Bytes on the wire: SSE frames, headers, JSON request bodies (sans-io)."""
