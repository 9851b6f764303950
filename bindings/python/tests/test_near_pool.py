"""A near hit needs no connection, on both faces: with every connection the
Cache may open held by loads of other keys (max_connections), a near hit is
served at once, and without max_connections it opens none; a near hit whose
draw elects an early refresh meanwhile still refreshes (its call waits for a
connection on the sync face)."""
import asyncio
import math
import threading

import pytest

from test_near import until_near_hit

RELEASE_S = 10.0  # the loads' gate opens by itself then: the bound of a failure


def never():
    raise AssertionError("a near hit runs no loader")


@pytest.mark.parametrize("max_connections", [2, None])
def test_a_near_hit_is_served_while_the_connections_are_held(face, server, prefix,
                                                              max_connections):
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20,
                      max_connections=max_connections,
                      background_refresh=False, refresh_ahead=-1)  # XFetch, in the call
    face.run(near.set("hot", b"v", ttl=60))
    until_near_hit(face, near, "hot", b"v")
    hot = ("hot", never, 60, 0.0)  # beta 0: never elected
    fresh = face.loader(lambda: b"fresh")
    if face.aio:
        async def main():
            gate, started = asyncio.Event(), []

            async def held():
                started.append(1)
                await gate.wait()
                return b"slow"
            asyncio.get_running_loop().call_later(RELEASE_S, gate.set)
            loads = [asyncio.ensure_future(near.get_or_compute(f"slow{i}", held, ttl=60))
                     for i in range(2)]
            while len(started) < 2:
                await asyncio.sleep(0.001)
            got = (await near.get_or_compute(*hot), await near.get("hot"))
            still_held = not gate.is_set()
            elected = asyncio.ensure_future(near.fetch("hot", fresh, 60, math.inf))
            gate.set()
            await asyncio.gather(*loads)
            return got, still_held, await elected
        got, still_held, refreshed = face.run(main())
    else:
        gate, started = threading.Event(), threading.Semaphore(0)
        watchdog = threading.Timer(RELEASE_S, gate.set)
        watchdog.start()

        def held():
            started.release()
            gate.wait()
            return b"slow"
        def load_holding_a_connection(key):
            # disabled(): the call holds its connection while its loader runs,
            # as a load does, but sends nothing: no lease write whose
            # invalidation, not yet applied on a busy machine, would rightly
            # send the near hit to Redis (on a connection)
            with near.disabled():
                near.get_or_compute(key, held, 60)
        loads = [threading.Thread(target=load_holding_a_connection, args=(f"slow{i}",))
                 for i in range(2)]
        for t in loads:
            t.start()
        for _ in loads:  # both loads hold their connection
            assert started.acquire(timeout=RELEASE_S)
        connections = near.stats()["connections"]
        got = (near.get_or_compute(*hot), near.get("hot"))
        still_held = not gate.is_set()
        opened = near.stats()["connections"] - connections
        refreshed = []
        elected = threading.Thread(
            target=lambda: refreshed.append(near.fetch("hot", fresh, 60, math.inf)))
        elected.start()
        gate.set()
        watchdog.cancel()
        for t in loads + [elected]:
            t.join()
        watchdog.join()
        refreshed = refreshed[0]
        assert opened == 0, "a near hit opened a connection"
    assert got == (b"v", b"v")
    assert still_held, f"the near hit waited for a connection ({RELEASE_S} s)"
    assert refreshed == (b"fresh", "loader")
