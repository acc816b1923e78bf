"""The upstream HTTP client (httpx)."""
