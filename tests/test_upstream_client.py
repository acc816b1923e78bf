"""The upstream client: its URL cache, encoded event streams, and its idle connections."""

from __future__ import annotations

from proxai.config import TimeoutsConfig, UpstreamConfig
from proxai.upstream.client import URL_CACHE_ENTRIES, URL_CACHE_TARGET_BYTES, UpstreamClient

# -- the URL cache -----------------------------------------------------------------------


async def test_long_query_strings_do_not_fill_the_url_cache() -> None:
    client = UpstreamClient(UpstreamConfig(base_url="http://up.test/v1"), TimeoutsConfig())
    long_query = b"x=" + b"a" * 60_000
    for i in range(64):
        url = client.url_for(b"/v1/responses", long_query + str(i).encode())
        assert url.raw_path.endswith(b"a" + str(i).encode())
    assert len(client.url_cache) == 0
    assert client.url_cache.target_bytes == 0
    await client.aclose()


async def test_the_url_cache_is_bounded_in_entries_and_bytes() -> None:
    client = UpstreamClient(UpstreamConfig(base_url="http://up.test/v1"), TimeoutsConfig())
    for i in range(3 * URL_CACHE_ENTRIES):
        client.url_for(b"/v1/responses", b"q=%d&" % i + b"b" * (URL_CACHE_TARGET_BYTES - 30))
    assert len(client.url_cache) == URL_CACHE_ENTRIES
    assert client.url_cache.target_bytes <= URL_CACHE_ENTRIES * URL_CACHE_TARGET_BYTES
    # the paths a proxy sees again and again stay ready
    first = client.url_for(b"/v1/responses", b"")
    assert client.url_for(b"/v1/responses", b"") is first
    assert str(first) == "http://up.test/v1/responses"
    await client.aclose()
