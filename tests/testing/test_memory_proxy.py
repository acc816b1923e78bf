"""MemoryProxy's own knobs: the tables it passes on and the scope it builds."""

from __future__ import annotations

from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy

LOOPBACK = ("127.0.0.1", 50000)


async def test_the_live_view_table_and_a_clients_address_reach_the_app(
    autojump_clock: MockClock,
) -> None:
    async with MemoryProxy([Script.json({})], live_view={"enabled": True}) as proxy:
        assert proxy.config.live_view.enabled
        page = await proxy.request(b"", method="GET", path="/_proxai/", client=LOOPBACK)
        faraway = await proxy.request(
            b"", method="GET", path="/_proxai/", client=("203.0.113.9", 40000)
        )
        nobody = await proxy.request(b"", method="GET", path="/_proxai/")
    assert page.status == 200
    # The address is the scope's: a far one is refused, and so is none (the default).
    assert faraway.status == 403 and nobody.status == 403


async def test_the_live_view_is_off_unless_asked_for(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script.json({})]) as proxy:
        page = await proxy.request(b"", method="GET", path="/_proxai/", client=LOOPBACK)
    assert not proxy.config.live_view.enabled
    assert page.status == 404
