"""A short soak in every test run: 500 mixed streams, nothing lost, nothing leaked. (The
pools' churn, which samples in real time, is `make soak`: tests/soak/.)"""

from __future__ import annotations

from proxai.testing.soak import expected_outcomes, soak


async def test_500_mixed_streams_leave_nothing_behind() -> None:
    report = await soak(500, 50, warmup=100)
    assert report.failures == {}, report.summary()
    assert dict(report.outcomes) == expected_outcomes(500), report.summary()
    assert report.fds_after == report.fds_before, report.summary()
    assert report.tasks_after == report.tasks_before, report.summary()
    # after a warm-up, 500 streams may not keep memory: no more than 20 KB per stream
    assert report.rss_after - report.rss_before < 500 * 20 * 1024, report.summary()
