"""The asyncio adapter of the C event-loop driver (_aio_loop, _aio_many) at
its edges: the event loop ending with calls in flight, close() racing
background refreshes, batch rounds beside other clients' leases."""
import asyncio
import gc
import time

import xfetch.aio
from test_runtime_defects import open_sockets


def _foreign_lease(admin, full, seconds):
    """Another client's lease on full (the hash entry's "l" field)."""
    sec, usec = admin.time()
    admin.hset(full, "l", f"someone-else-1:{sec * 1000 + usec // 1000 + seconds * 1000}")
    admin.pexpire(full, seconds * 1000)


def test_a_closed_cache_whose_loop_ends_with_a_call_in_flight_closes_its_connection(
        server, admin, prefix):
    """close() while a call waits for another client's lease, then the loop
    ends (asyncio.run cancels the call): the handle close() retired has no
    loop left to finish that call on, and its connection must not stay open
    for the life of the process."""
    _foreign_lease(admin, (prefix + "held").encode(), 60)
    gc.collect()
    base = open_sockets()
    cache = xfetch.aio.Cache(server.url, prefix=prefix)

    async def main():
        waiter = asyncio.ensure_future(cache.get_or_compute("held", lambda: b"x", ttl=60))
        await asyncio.sleep(0.2)  # waiting for the foreign lease (60 s)
        assert not waiter.done()
        await cache.close()
        # main returns: asyncio.run cancels the waiter and closes the loop

    asyncio.run(main())
    gc.collect()
    assert open_sockets() == base, "the retired handle's connection was left open"
