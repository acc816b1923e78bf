"""The upstream pools' churn on a real `proxai serve` (`make soak`, not `make test`): it
samples /readyz and /metrics in real time, so how many samples it gets depends on the
machine's load; `make test` stays deterministic without it."""

from __future__ import annotations

from proxai.testing.churn import churn


async def test_churn_on_a_short_keepalive_leaves_every_pool_at_its_bound() -> None:
    """10 s of bursts, hang-ups and stalls on proxai serve with keepalive_expiry 0.1 s:
    every request answered and recorded as it must be, /readyz 200 throughout, no closed
    connection left listed, the pools empty and proxai's fds as before once it is over.
    (On the code before the idle sweep's fix, /readyz turned 503 for good within seconds
    in most runs: the sweep's IndexError ended the lifespan.)"""
    report = await churn(10, burst=60, hangups=64, warmup=0, min_samples=20)
    assert report.problems() == [], report.summary()
    assert report.peaks and report.samples >= 20, report.summary()
    # no warm-up here: the first requests' imports and caches count too
    assert report.rss_after - report.rss_before < 48 * 1024 * 1024, report.summary()
