"""xfetch.aio on the C event-loop driver, with asyncio.run only (no plugin)."""
import asyncio
import logging
import time

import pytest

import xfetch
import xfetch.aio
from conftest import peek, stored


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
    assert stored(peek(admin, prefix + "hot").v) == b"computed"


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
            with pytest.raises(TypeError, match="serializer="):  # a lambda: not picklable
                await cache.get_or_compute("bad", lambda: (lambda: 0), ttl=60)
    run(main())
    assert peek(admin, prefix + "bad").v is None
    assert peek(admin, prefix + "bad").deadline is None, "the lease was released"


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

        async def slow():  # a loop blocked by the wait would stand still 1 s
            await asyncio.sleep(1.0)
            return b"slow"

        tick = asyncio.ensure_future(ticker())
        values = await asyncio.gather(*[cache.get_or_compute("slow", slow, ttl=60)
                                        for _ in range(20)])
        stop.set()
        await tick
        await cache.close()
        assert values == [b"slow"] * 20
        # margin: 0.5 s for a busy machine to schedule the ticker late
        assert max(gaps) < 0.5, f"the loop was blocked for {max(gaps):.3f} s"
    run(main())


def test_redis_down_fails_open(prefix):
    async def main():
        cache = xfetch.aio.Cache("redis://127.0.0.1:1/0", prefix=prefix, lazy_connect=True)
        assert await cache.fetch("k", lambda: b"direct", ttl=60) == (b"direct", "uncached")
        # the share keeps it (as xfetch.Cache's threads do): served, not loaded again
        assert await cache.fetch("k", lambda: b"other", ttl=60) == (b"direct", "local")
        assert await cache.fetch("j", lambda: b"direct", ttl=60, ) == (b"direct", "uncached")
    run(main())


def test_auth_select_set_delete_and_the_decorator(server, admin, prefix):
    from conftest import ACL_PASS, ACL_USER
    from urllib.parse import quote
    url = f"redis://{ACL_USER}:{quote(ACL_PASS, safe='')}@127.0.0.1:{server.port}/3"

    async def main():
        cache = xfetch.aio.Cache(url, prefix=prefix)
        assert await cache.get_or_compute("db3", lambda: b"three", ttl=60) == b"three"
        await cache.set("s", b"set", ttl=60)
        assert await cache.get_or_compute("s", lambda: b"x", ttl=60) == b"set"
        await cache.delete("s")
        assert await cache.get_or_compute("s", lambda: b"x", ttl=60) == b"x"
        calls = []

        @cache.cached(ttl=60, serializer="json", namespace="t")
        async def profile(user_id):
            calls.append(user_id)
            return {"id": user_id}

        assert await profile(1) == {"id": 1}
        assert await profile(1) == {"id": 1}
        assert calls == [1]
        with pytest.raises(TypeError):
            cache.cached(ttl=60)(lambda: 1)
        with pytest.raises(xfetch.AuthError):  # at construction, as xfetch.Cache
            xfetch.aio.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/0")
        bad = xfetch.aio.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/0",
                               lazy_connect=True)
        with pytest.raises(xfetch.AuthError):
            await bad.get_or_compute("k", lambda: b"x", ttl=60)
        await cache.close()
    run(main())
    admin.execute_command("SELECT", 3)
    assert stored(peek(admin, prefix + "db3").v) == b"three"
    admin.execute_command("SELECT", 0)


def test_the_stream_runs_the_c_setup_acl_user_and_db(server, admin, prefix):
    from conftest import ACL_PASS, ACL_USER
    from urllib.parse import quote
    url = f"redis://{ACL_USER}:{quote(ACL_PASS, safe='')}@127.0.0.1:{server.port}/3"

    async def main():
        cache = xfetch.aio.Cache(url, prefix=prefix)
        # the C engine runs AUTH and SELECT: the connection is alice's, on db 3
        before = {c["id"] for c in admin.client_list()}
        assert await cache.get_or_compute("who", lambda: b"x", ttl=60) == b"x"
        mine = [c for c in admin.client_list() if c["id"] not in before]
        assert [(c["user"], c["db"]) for c in mine] == [(ACL_USER, "3")]
        await cache.close()
        bad = xfetch.aio.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/3",
                               lazy_connect=True)  # the stream's setup, not the check
        with pytest.raises(xfetch.AuthError, match="AUTH: WRONGPASS"):
            await bad.get_or_compute("k", lambda: b"x", ttl=60)
    run(main())


def test_a_busy_server_at_select_fails_open_not_auth_error(tmp_path, prefix):
    import socket
    from conftest import RedisServer
    srv = RedisServer(str(tmp_path))
    srv.admin.config_set("busy-reply-threshold", 10)
    looping = socket.create_connection(("127.0.0.1", srv.port))
    looping.sendall(b"*3\r\n$4\r\nEVAL\r\n$17\r\nwhile true do end\r\n$1\r\n0\r\n")
    try:
        deadline = time.monotonic() + 5
        while True:  # until Redis answers BUSY: SELECT is refused, AUTH is not
            try:
                srv.admin.ping()
            except Exception as e:
                if "BUSY" in str(e):
                    break
            assert time.monotonic() < deadline, "the server never got busy"
            time.sleep(0.002)

        async def main():
            # lazy_connect: the stream's setup meets BUSY (the constructor's check
            # would raise UnavailableError, as xfetch.Cache's does)
            cache = xfetch.aio.Cache(f"redis://127.0.0.1:{srv.port}/3", prefix=prefix,
                                     lazy_connect=True)
            assert await cache.fetch("k", lambda: b"direct", ttl=60) == (b"direct", "uncached")
            await cache.close()
        run(main())
    finally:
        srv.admin.script_kill()
        looping.close()
        srv.stop()


def test_set_and_delete_run_on_the_stream_not_on_a_thread(server, admin, prefix,
                                                          monkeypatch):
    def no_thread(*a, **k):
        raise AssertionError("xfetch.aio parked a call on a thread")
    monkeypatch.setattr(asyncio, "to_thread", no_thread)

    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            await asyncio.gather(*[cache.set(f"w{i}", b"v%d" % i, ttl=60) for i in range(50)])
            assert [await cache.get_or_compute(f"w{i}", lambda: b"x", ttl=60)
                    for i in range(50)] == [b"v%d" % i for i in range(50)]
            await cache.delete_many([f"w{i}" for i in range(50)])
            assert await cache.get_or_compute("w7", lambda: b"reloaded", ttl=60) == b"reloaded"
            admin.script_flush()  # NOSCRIPT is recovered by the C call
            await cache.set("w8", b"after flush", ttl=60)
            await cache.delete("w9")
            assert cache.stats()["connections"] == 1
            admin.set(prefix + "str", b"plain")
            with pytest.raises(xfetch.WrongTypeError):
                await cache.set("str", b"x", ttl=60)
            with pytest.raises(TypeError):
                await cache.set("str", "not bytes", ttl=60)
    run(main())
    assert stored(peek(admin, prefix + "w8").v) == b"after flush"
    assert peek(admin, prefix + "w0").v is None


def test_set_and_delete_with_redis_down_raise(prefix):
    async def main():
        cache = xfetch.aio.Cache("redis://127.0.0.1:1/0", prefix=prefix, lazy_connect=True)
        with pytest.raises(xfetch.ConnectionError):
            await cache.set("k", b"v", ttl=60)
        with pytest.raises(xfetch.ConnectionError):
            await cache.delete("k")
    run(main())


def test_a_task_doing_only_hits_still_lets_others_run(server, prefix):
    # Hits whose replies are already there complete without a trip through
    # the loop; every 16th yields to it anyway: the other tasks never wait
    # for more than 16 hits in a row.
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            await cache.set("hot", b"v", ttl=60)
            hits, seen, done = 0, [], False

            async def ticker():
                while not done:
                    seen.append(hits)
                    await asyncio.sleep(0)

            task = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            for _ in range(2000):
                assert await cache.get_or_compute("hot", lambda: b"x", ttl=60) == b"v"
                hits += 1
            done = True
            await task
            seen.append(hits)
            gaps = [b - a for a, b in zip(seen, seen[1:])]
            assert max(gaps) <= 16, max(gaps)
    run(main())


def test_a_reply_later_than_the_timeout_fails_open_and_the_stream_goes_on(server, admin,
                                                                            prefix):
    async def main():
        # Margins for a busy machine: the first call ends by the 1 s timeout,
        # asserted under 2.5 s, below the 3 s pause; the breaker (1 s) then
        # serves at once, asserted under half the timeout (a call the breaker
        # does not serve waits the timeout).
        async with xfetch.aio.Cache(server.url, prefix=prefix, timeout=1.0, breaker=1.0,
                                    share=False) as cache:
            await cache.set("late", b"cached", ttl=60)
            admin.execute_command("CLIENT", "PAUSE", "3000", "ALL")
            paused = t0 = time.monotonic()  # after it began: paused + 3 s is past its end
            assert await cache.fetch("late", lambda: b"direct", ttl=60) == \
                (b"direct", "uncached")
            opened = time.monotonic()
            assert opened - t0 < 2.5  # the timeout, not the pause
            t0 = time.monotonic()  # the breaker: served at once, uncached
            assert await cache.fetch("late", lambda: b"direct", ttl=60) == \
                (b"direct", "uncached")
            assert time.monotonic() - t0 < 0.5
            # the pause and the breaker end; the late replies are dropped
            await asyncio.sleep(max(0.0, paused + 3.3 - time.monotonic(),
                                    opened + 1.3 - time.monotonic()))
            assert await cache.fetch("late", lambda: b"x", ttl=60) == (b"cached", "cache")
            assert cache.stats()["connections"] == 1
    run(main())


def test_a_unix_socket_and_one_cache_across_two_event_loops(server, admin, prefix):
    cache = xfetch.aio.Cache(server.unix_url, prefix=prefix)  # e.g. module-level

    async def first():
        assert await cache.get_or_compute("u", lambda: b"one", ttl=60) == b"one"

    async def second():  # a new loop: the first loop's stream is dropped, a new one opened
        assert await cache.fetch("u", lambda: b"two", ttl=60) == (b"one", "cache")
        await cache.set("u2", b"set", ttl=60)
        assert cache.stats()["connections"] == 1
        await cache.close()

    run(first())
    run(second())
    assert stored(peek(admin, prefix + "u2").v) == b"set"


def test_one_cache_used_from_two_running_loops_works_or_refuses_naming_the_loop(server,
                                                                             prefix):
    """Two threads, each with its own running loop, on one Cache: every call
    either returns the right value or raises RuntimeError naming the loop
    the Cache is bound to; none hangs (both loops keep running)."""
    import threading
    cache = xfetch.aio.Cache(server.url, prefix=prefix)
    outcomes = {"a": [], "b": []}
    started = threading.Event()

    def run_loop(name, n):
        async def main():
            for i in range(n):
                key = f"{name}{i % 5}"
                try:
                    got = await asyncio.wait_for(
                        cache.get_or_compute(key, lambda: key.encode(), ttl=60), 3)
                    outcomes[name].append("ok" if got == key.encode() else f"wrong {got!r}")
                except RuntimeError as e:
                    outcomes[name].append(str(e))
                except asyncio.TimeoutError:
                    outcomes[name].append("hang")
                started.set()
                await asyncio.sleep(0.002)
        asyncio.run(main())

    a = threading.Thread(target=run_loop, args=("a", 200), daemon=True)
    a.start()
    assert started.wait(5)
    run_loop("b", 50)
    a.join(10)
    assert not a.is_alive(), "loop a hangs"
    every = outcomes["a"] + outcomes["b"]
    assert "hang" not in every and not any(o.startswith("wrong") for o in every), every
    refusals = [o for o in every if o != "ok"]
    assert all("event loop" in o and "Loop" in o for o in refusals), refusals
    assert outcomes["a"].count("ok") >= 1


def test_a_call_cancelled_while_loading_releases_the_lease_at_once(server, admin, prefix):
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            loads = []

            async def slow():
                loads.append(1)
                await asyncio.sleep(10)
            task = asyncio.ensure_future(cache.get_or_compute("c", slow, ttl=60))
            while not loads:
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def quick():
                loads.append(2)
                await asyncio.sleep(0.05)
                return b"v"
            t0 = time.monotonic()
            got = await asyncio.gather(*[cache.get_or_compute("c", quick, ttl=60)
                                         for _ in range(10)])
            return got, loads, time.monotonic() - t0
    got, loads, took = run(main())
    assert got == [b"v"] * 10
    assert loads == [1, 2], loads
    assert took < 2.5, took  # a lease left behind: a 5 s wait; half that (a 50 ms load)


def test_a_call_cancelled_while_its_lease_request_is_in_flight_releases_it(server, admin,
                                                                          prefix):
    """CLIENT PAUSE WRITE holds the lease script (a write; the read goes
    through): the call is cancelled before the lease is granted. When it is
    granted, the abandoned call releases it at once."""
    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            await cache.set("warm", b"1", ttl=60)  # the stream is open
            admin.execute_command("CLIENT", "PAUSE", "300", "WRITE")
            task = asyncio.ensure_future(cache.get_or_compute("p", lambda: b"x", ttl=60))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.4)  # the pause is over, the lease granted and released
            assert peek(admin, prefix + "p").deadline is None, "the lease was left behind"
            loads = []

            def load():
                loads.append(1)
                return b"v"
            t0 = time.monotonic()
            assert await cache.get_or_compute("p", load, ttl=60) == b"v"
            return time.monotonic() - t0, loads
    took, loads = run(main())
    assert took < 2.5 and loads == [1]  # a lease left behind: a 5 s wait; half that


@pytest.mark.parametrize("near", [0, 1 << 20], ids=["plain", "near"])
def test_a_call_waiting_for_a_load_ends_after_close(server, prefix, near):
    """close() while a caller waits for another client's load: the waiter's
    wait still ends (the load's value, by a poll or a write's wake), on the
    same loop, with nothing else running on its Cache."""
    async def main():
        cache = xfetch.aio.Cache(server.url, prefix=prefix, near_cache_bytes=near)
        other = xfetch.aio.Cache(server.url, prefix=prefix)

        async def load():
            await asyncio.sleep(0.3)
            return b"loaded"

        leader = asyncio.ensure_future(other.get_or_compute("closing", load, ttl=60))
        await asyncio.sleep(0.1)  # the leader holds the lease (its load runs 300 ms)
        waiter = asyncio.ensure_future(cache.get_or_compute("closing", load, ttl=60))
        await asyncio.sleep(0.05)  # waiting (a poll, or a write's wake)
        await cache.close()
        # 10 s: the 300 ms load plus polls, with margin for a busy machine;
        # a wait that never ends fails here
        done = await asyncio.wait_for(asyncio.gather(leader, waiter), 10)
        assert done == [b"loaded", b"loaded"]
        await cache.close()
        await other.close()
    run(main())
