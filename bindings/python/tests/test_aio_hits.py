"""GET-priced asyncio hits (issue 19): each stream of xfetch.aio keeps an
estimate of its server's clock (C xf_link), so a hit is one plain read
(HMGET of a format-1 entry, GET of a format-2 one) once it is fresh, and
the read script (EVALSHA_RO: Lua, TIME) goes only to refresh it, every
0.5 s at most per connection. Counted with INFO commandstats on the
session's redis-server (a read script's own HMGET / GET counts too)."""
import asyncio
import time

import pytest

import xfetch.aio

HITS = 200


def calls(admin, cmd):
    st = admin.info("commandstats").get(f"cmdstat_{cmd}", {})
    return st.get("calls", 0) - st.get("failed_calls", 0)


@pytest.mark.parametrize("entry_format,plain", [(1, "hmget"), (2, "get")])
def test_asyncio_hits_are_plain_reads(server, admin, prefix, entry_format, plain):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix,
                                    entry_format=entry_format) as cache:
            assert await cache.get_or_compute("hot", lambda: b"v", ttl=600) == b"v"
            scripts0, plain0 = calls(admin, "evalsha_ro"), calls(admin, plain)
            t0 = time.monotonic()
            for _ in range(HITS):
                assert await cache.fetch("hot", lambda: b"x", ttl=600) == (b"v", "cache")
            refreshes = int((time.monotonic() - t0) / 0.5) + 2
            scripts = calls(admin, "evalsha_ro") - scripts0
            plains = calls(admin, plain) - plain0
            assert scripts <= refreshes, f"{scripts} read scripts for {HITS} hits"
            # each hit one command: a plain read, or a script (with its own read)
            assert plains - scripts >= HITS - refreshes, f"{plains} {plain} for {HITS} hits"
            assert cache.stats()["hits"] >= HITS
    asyncio.run(main())


def test_concurrent_asyncio_hits_on_a_warm_connection_are_plain(server, admin, prefix):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            keys = [f"k{i}" for i in range(50)]
            for k in keys:
                await cache.get_or_compute(k, lambda: b"v", ttl=600)
            scripts0 = calls(admin, "evalsha_ro")
            reads0 = admin.info("stats")["keyspace_hits"]
            t0 = time.monotonic()
            for _ in range(4):
                got = await asyncio.gather(*[cache.get_or_compute(k, lambda: b"x", ttl=600)
                                             for k in keys])
                assert got == [b"v"] * len(keys)
            scripts = calls(admin, "evalsha_ro") - scripts0
            # a refresh of the estimate may catch a whole round in flight
            assert scripts <= len(keys) * (int((time.monotonic() - t0) / 0.5) + 1)
            # every hit read its entry (a plain GET or MGET, or a read script)
            assert admin.info("stats")["keyspace_hits"] - reads0 >= 4 * len(keys)
            assert scripts < 4 * len(keys) / 2, f"{scripts} read scripts for 200 hits"
    asyncio.run(main())


def test_hits_started_together_go_as_one_mget(server, admin, prefix):
    """Calls started in one loop turn while another is in flight (here the
    tasks of a gather, the first one's read on its way) cork: their hits'
    reads go as one MGET, not one command each. Without it, each round of 50
    hits was 50 commands (200 in all); the bound leaves room for the first
    call's own read each round and for read scripts refreshing the clock
    estimate (every 0.5 s at most)."""
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            keys = [f"k{i}" for i in range(50)]
            for k in keys:
                await cache.get_or_compute(k, lambda: b"v", ttl=600)
            names = ("get", "mget", "evalsha_ro")
            before = {n: calls(admin, n) for n in names}
            for _ in range(4):
                got = await asyncio.gather(*[cache.get_or_compute(k, lambda: b"x", ttl=600)
                                             for k in keys])
                assert got == [b"v"] * len(keys)
            sent = {n: calls(admin, n) - before[n] for n in names}
            assert sent["mget"] >= 4, sent
            assert sum(sent.values()) <= 40, sent
    asyncio.run(main())


def test_a_reconnected_stream_asks_the_servers_clock_again(server, admin, prefix):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix, breaker=0) as cache:
            await cache.get_or_compute("k", lambda: b"v", ttl=600)
            await cache.get_or_compute("k", lambda: b"x", ttl=600)
            admin.client_kill_filter(_type="normal", skipme=True)
            scripts0 = calls(admin, "evalsha_ro")
            for _ in range(3):  # the first may find the stream dead (fails open)
                await cache.fetch("k", lambda: b"x", ttl=600)
            assert calls(admin, "evalsha_ro") - scripts0 == 1, "a new stream knows nothing"
    asyncio.run(main())


def test_a_cold_stream_sends_one_script_however_many_hits_are_in_flight(server, admin,
                                                                       prefix):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as writer:
            for i in range(50):
                await writer.get_or_compute(f"k{i}", lambda: b"v", ttl=600)
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:  # a new stream
            scripts0, get0 = calls(admin, "evalsha_ro"), calls(admin, "get")
            got = await asyncio.gather(*[cache.get_or_compute(f"k{i}", lambda: b"x", ttl=600)
                                         for i in range(50)])
            assert got == [b"v"] * 50
            scripts = calls(admin, "evalsha_ro") - scripts0
            assert scripts <= 2, f"{scripts} read scripts for 50 concurrent hits"
            # one GET per hit (plain, or a script's own), plus a read asked
            # again should its reply be judged before the script taught the clock
            assert 50 <= calls(admin, "get") - get0 <= 50 + 2 * scripts
    asyncio.run(main())
