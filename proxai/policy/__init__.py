"""Decisions about requests: routes, retries, client keys, normalization (sans-io)."""
