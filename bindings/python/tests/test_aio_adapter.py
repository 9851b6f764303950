"""The asyncio adapter of the C event-loop driver (_aio_loop, _aio_many) at
its edges: the event loop ending with calls in flight, close() racing
background refreshes, batch rounds beside other clients' leases, a loop
whose task factory will not run a loader."""
import asyncio
import gc
import time

import pytest

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


def test_a_refresh_close_refuses_releases_its_lease_and_its_loader(server, admin, prefix):
    """A background refresh whose loader C starts while close() waits for
    another refresh is cancelled before it runs: its load still completes
    (failed: the lease released at once, the loader's data dropped), as a
    refresh cancelled while it runs does."""
    from conftest import peek
    from xfetch import _aio_loop

    async def main():
        cache = xfetch.aio.Cache(server.url, prefix=prefix)
        go, b_loads = asyncio.Event(), []

        async def first():
            await asyncio.sleep(0.02)  # a load time: the early window is refresh_ahead x it
            return b"v1"

        async def slow_a():
            await go.wait()
            return b"a2"

        async def load_b():
            b_loads.append(1)
            return b"b2"

        early = {"ttl": 60, "refresh_ahead": 10000.0}  # every hit is due for a refresh
        assert await cache.get_or_compute("a", first, **early) == b"v1"
        assert await cache.get_or_compute("b", first, **early) == b"v1"
        assert await cache.get_or_compute("a", slow_a, **early) == b"v1"  # a's refresh runs
        b = asyncio.ensure_future(cache.get_or_compute("b", load_b, **early))

        async def release_a():
            assert await b == b"v1"  # b's refresh took its lease meanwhile
            await asyncio.sleep(0.1)
            go.set()
        releasing = asyncio.ensure_future(release_a())
        await cache.close(timeout=30)  # a hang guard: go is set once b is over
        await releasing
        return b_loads

    assert asyncio.run(main()) == []  # refused: close() had begun
    gc.collect()
    assert peek(admin, prefix + "b").deadline is None, "b's refresh left its lease"
    assert _aio_loop._KEPT == {}, "a refresh's loader was never dropped"


def test_a_batch_round_does_not_wait_for_a_key_another_client_loads(server, admin, prefix):
    """get_many(batch=True) on a and b while another client loads b, and
    b's loader needs a: the batch loads a (the key it leased) at once, not
    after its wait for b runs out (the other client waits for a meanwhile:
    each would wait for the other for `wait` seconds), as the sync face's
    batch does. Margins: 30 s waits and leases; the guard 10 s; the path is
    a few round trips."""
    from conftest import peek
    kw = {"ttl": 60, "wait": 30, "lease": 30}

    async def main():
        other = xfetch.aio.Cache(server.url, prefix=prefix)
        cache = xfetch.aio.Cache(server.url, prefix=prefix)
        started, go, batches = asyncio.Event(), asyncio.Event(), []

        async def load_b():  # b is made from a
            started.set()
            await go.wait()
            return b"b:" + await other.get_or_compute("a", lambda: b"a-other", **kw)

        def batch(keys):
            batches.append(sorted(keys))
            return {k: k.encode() + b"1" for k in keys}

        b = asyncio.ensure_future(other.get_or_compute("b", load_b, **kw))
        await started.wait()  # the other client holds b's lease
        many = asyncio.ensure_future(cache.get_many(["a", "b"], batch, batch=True, **kw))
        deadline = time.monotonic() + 10
        entry = peek(admin, prefix + "a")
        while entry.deadline is None and entry.v is None:  # until the batch has a
            assert time.monotonic() < deadline, "the batch never leased a"
            await asyncio.sleep(0.01)
            entry = peek(admin, prefix + "a")
        go.set()
        got = await asyncio.wait_for(asyncio.gather(many, b), 10)
        await cache.close()
        await other.close()
        return got, batches

    (got, b), batches = asyncio.run(main())
    assert got == {"a": b"a1", "b": b"b:a1"} and b == b"b:a1"
    assert batches == [["a"]]


def test_a_loader_task_the_loop_will_not_create_fails_the_call_not_hangs(server, prefix):
    """The loader runs as a task of the running loop: a task factory of the
    two-argument kind (loop, coro), as written before Python 3.11 added
    context=, still runs it; one that raises fails the call with its error
    (the load failed, its lease released) instead of leaving it for ever.
    Guard: 10 s, for a few round trips."""
    kw = {"ttl": 60, "wait": 30, "lease": 30}

    async def load():
        return b"loaded"

    async def main():
        loop = asyncio.get_running_loop()
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            loop.set_task_factory(lambda loop, coro: asyncio.Task(coro, loop=loop))
            got = await asyncio.wait_for(cache.get_or_compute("old", load, **kw), 10)
            refused = RuntimeError("no tasks now")

            def refuse(loop, coro, context=None):
                if getattr(coro, "__qualname__", "") == "_load":
                    coro.close()
                    raise refused
                return asyncio.Task(coro, loop=loop, context=context)
            loop.set_task_factory(refuse)
            try:
                with pytest.raises(RuntimeError) as info:
                    await asyncio.wait_for(cache.get_or_compute("no", load, **kw), 10)
            finally:
                loop.set_task_factory(None)
            assert info.value is refused
            t0 = time.monotonic()  # the lease was released: no 30 s wait
            again = await asyncio.wait_for(cache.get_or_compute("no", load, **kw), 10)
            return got, again, time.monotonic() - t0

    got, again, took = asyncio.run(main())
    assert (got, again) == (b"loaded", b"loaded") and took < 5


def test_ctrl_c_in_a_background_refresh_s_loader_stops_the_program(server, admin, prefix):
    """A KeyboardInterrupt raised in a background refresh's loader (Ctrl-C
    while it computes) has no caller to be raised in: it goes out of the
    event loop, as a KeyboardInterrupt in any task does, and the refresh's
    lease is released. It was kept on the refresh's call, which nobody
    awaits: the program went on."""
    from conftest import peek

    def interrupted():
        raise KeyboardInterrupt

    async def main():
        async with xfetch.aio.Cache(server.url, prefix=prefix) as cache:
            await cache.get_or_compute("k", lambda: b"v", ttl=60)
            # refresh_ahead < 0 with beta=inf: XFetch elects every hit for an early refresh
            got = await cache.get_or_compute("k", interrupted, ttl=60, beta=float("inf"),
                                             refresh_ahead=-1.0)
            assert got == b"v"  # the current value; the refresh runs in the background
            await asyncio.sleep(10)  # the refresh's task raises meanwhile

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert peek(admin, prefix + "k").deadline is None  # the refresh's lease released
