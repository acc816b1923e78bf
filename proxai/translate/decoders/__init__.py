"""Upstream APIs' streams and bodies, as neutral events (one module per API)."""
