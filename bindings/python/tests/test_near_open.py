"""xfetch.aio with the near cache while its server's invalidation connection
is slow to open (a proxy holds that connection's setup 0.8 s): the C
tracker thread opens it, so the event loop keeps its pace, the stream
serves untracked meanwhile (no stale value), and arms later: near hits
follow."""
import asyncio
import time

import xfetch
import xfetch.aio

from redis_proxy import RedisProxy

HOLD = 0.8  # seconds the invalidation connection's setup is held


class SlowInvalidationProxy(RedisProxy):
    """Holds, HOLD seconds, the first bytes of a connection naming itself
    xfetch-invalidate (the near cache's invalidation connection: a slow
    server for its open)."""

    def __init__(self, port):
        self.held = 0
        super().__init__(port, self._hold)

    def _hold(self, data, first):
        if first and b"xfetch-invalidate" in data:
            self.held += 1
            time.sleep(HOLD)


def test_aio_loop_runs_while_the_invalidation_connection_opens(server, admin, prefix):
    proxy = SlowInvalidationProxy(server.port)
    other = xfetch.Cache(server.url, prefix=prefix)  # another process's writer

    async def main():
        loop = asyncio.get_running_loop()
        gaps, stop = [], asyncio.Event()

        async def ticker():  # a 20 ms timer: its gaps say whether the loop stood still
            last = loop.time()
            while not stop.is_set():
                await asyncio.sleep(0.02)
                now = loop.time()
                gaps.append(now - last)
                last = now

        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)  # ticking: the constructor's URL check is timed too
        near = xfetch.aio.Cache(f"redis://127.0.0.1:{proxy.port}", prefix=prefix,
                                near_cache_bytes=1 << 20)
        try:
            other.set("k", b"v1", ttl=60)
            t0 = loop.time()
            assert await near.get("k") == b"v1"
            first = loop.time() - t0
            await asyncio.sleep(HOLD / 4)
            assert max(gaps) < HOLD / 2, f"the event loop stood still {max(gaps):.3f} s"
            other.set("k", b"v2", ttl=60)  # during the open: read from Redis, never v1
            deadline = loop.time() + 10
            while near.stats()["near_hits"] == 0:
                assert await near.get("k") == b"v2"
                assert loop.time() < deadline, "never a near hit once the connection opened"
                await asyncio.sleep(0.01)
            other.set("k", b"v3", ttl=60)  # seen once invalidated (within the bound)
            while await near.get("k") != b"v3":
                assert loop.time() < deadline, "the write from elsewhere was never seen"
                await asyncio.sleep(0.001)
            # Kept again once the write's invalidation has come (the tracker's
            # thread may be late on a busy machine: the deadline is the bound).
            hits = near.stats()["near_hits"]
            while near.stats()["near_hits"] == hits:
                assert await near.get("k") == b"v3"
                assert loop.time() < deadline, "no near hits after the write"
                await asyncio.sleep(0.001)
        finally:
            stop.set()
            await tick
            await near.close()
        return first, max(gaps)

    try:
        first, longest = asyncio.run(main())
    finally:
        other.close()
        proxy.close()
    assert proxy.held >= 1, "the invalidation connection never went through the proxy"
    assert first < HOLD, f"the first read waited {first:.3f} s for the invalidation connection"
    assert longest < HOLD / 2, f"the event loop stood still {longest:.3f} s"
