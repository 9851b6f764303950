"""xfetch.aio on the C sans-I/O call, with asyncio.run only (no plugin)."""
import asyncio
import logging
import time

import pytest

import xfetch
import xfetch.aio


def run(coro):
    return asyncio.run(coro)


def test_200_concurrent_calls_on_a_cold_key_load_once(server, admin, prefix):
    async def main():
        cache = xfetch.aio.Cache(server.url, prefix=prefix)
        calls = []

        async def load():
            calls.append(1)
            await asyncio.sleep(0.05)
            return b"computed"

        values = await asyncio.gather(*[cache.get_or_compute("hot", load, ttl=60)
                                        for _ in range(200)])
        assert values == [b"computed"] * 200
        assert len(calls) == 1
        assert (await cache.fetch("hot", load, ttl=60)) == (b"computed", "cache")
        await cache.close()
    run(main())
    assert admin.hget(prefix + "hot", "v") == b"computed"


def test_a_plain_loader_and_not_found(server, prefix):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            assert await cache.get_or_compute("plain", lambda: b"p", ttl=60) == b"p"
            assert await cache.get_or_compute("none", lambda: None, ttl=60) is None
            assert (await cache.fetch("plain", lambda: b"x", ttl=60)).source == "cache"
    run(main())


def test_a_loader_exception_propagates_and_caches_nothing(server, admin, prefix):
    err = RuntimeError("db down")

    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            async def load():
                raise err
            with pytest.raises(RuntimeError) as info:
                await cache.get_or_compute("bad", load, ttl=60)
            assert info.value is err
            with pytest.raises(TypeError):
                await cache.get_or_compute("bad", lambda: "not bytes", ttl=60)
    run(main())
    assert admin.hget(prefix + "bad", "v") is None
    assert admin.hget(prefix + "bad", "l") is None, "the lease was released"


def test_the_loop_keeps_running_while_a_slow_loader_and_waiters_run(server, prefix):
    async def main():
        cache = xfetch.aio.Cache(server.url, prefix=prefix)
        gaps, stop = [], asyncio.Event()

        async def ticker():
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async def slow():
            await asyncio.sleep(0.4)
            return b"slow"

        tick = asyncio.ensure_future(ticker())
        values = await asyncio.gather(*[cache.get_or_compute("slow", slow, ttl=60)
                                        for _ in range(20)])
        stop.set()
        await tick
        await cache.close()
        assert values == [b"slow"] * 20
        assert max(gaps) < 0.1, f"the loop was blocked for {max(gaps):.3f} s"
    run(main())


def test_redis_down_fails_open(prefix):
    async def main():
        cache = xfetch.aio.Cache("redis://127.0.0.1:1/0", prefix=prefix)
        assert await cache.fetch("k", lambda: b"direct", ttl=60) == (b"direct", "uncached")
        assert await cache.fetch("k", lambda: b"direct", ttl=60) == (b"direct", "uncached")
    run(main())


def test_auth_select_set_delete_and_the_decorator(server, admin, prefix):
    from conftest import ACL_PASS, ACL_USER
    from urllib.parse import quote
    url = f"redis://{ACL_USER}:{quote(ACL_PASS, safe='')}@127.0.0.1:{server.port}/3"

    async def main():
        cache = xfetch.aio.Cache(url, prefix=prefix)
        assert await cache.get_or_compute("db3", lambda: b"three", ttl=60) == b"three"
        assert await cache.set("s", b"set", ttl=60) is True
        assert await cache.get_or_compute("s", lambda: b"x", ttl=60) == b"set"
        await cache.delete("s")
        assert await cache.get_or_compute("s", lambda: b"x", ttl=60) == b"x"
        calls = []

        @cache.cached(ttl=60, serializer="json")
        async def profile(user_id):
            calls.append(user_id)
            return {"id": user_id}

        assert await profile(1) == {"id": 1}
        assert await profile(1) == {"id": 1}
        assert calls == [1]
        with pytest.raises(TypeError):
            cache.cached(ttl=60)(lambda: 1)
        bad = xfetch.aio.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/0")
        with pytest.raises(xfetch.AuthError):
            await bad.get_or_compute("k", lambda: b"x", ttl=60)
        await cache.close()
    run(main())
    admin.execute_command("SELECT", 3)
    assert admin.hget(prefix + "db3", "v") == b"three"
    admin.execute_command("SELECT", 0)


def test_a_cluster_url_is_refused():
    with pytest.raises(ValueError):
        xfetch.aio.Cache("redis://a:1,b:2/0")
    with pytest.raises(ValueError):
        xfetch.aio.Cache("redis://a:1/0?cluster=on")
