"""One core, two faces (issue 18 item 5): each behaviour once, run on
xfetch.Cache and on xfetch.aio.Cache (the `face` fixture, conftest.Face):
the share and the breaker with Redis down or stalled, the same errors, the
same decorator options, get/get_many/cached_many, and a loader asking for
its own key."""
import datetime
import os
import pickle
import signal
import time

import pytest

import xfetch
import xfetch.testing
from xfetch.testing import free_port


def down_url():
    return f"redis://127.0.0.1:{free_port()}/0"


# ---- Redis down: callers share in-flight loads; the breaker ---------------------

def test_redis_down_concurrent_callers_share_in_flight_loads(face):
    cache = face.Cache(down_url(), lazy_connect=True, timeout=0.2)
    runs = []

    def body():
        runs.append(1)
        return b"v"
    load = face.loader(body, delay=0.05)

    def caller(i):
        if face.aio:
            async def calls():
                return [await cache.get_or_compute(f"k{(i + j) % 5}", load, ttl=60)
                        for j in range(10)]
        else:
            def calls():
                return [cache.get_or_compute(f"k{(i + j) % 5}", load, ttl=60)
                        for j in range(10)]
        return calls
    out = face.gather([caller(i) for i in range(50)])
    assert out == [[b"v"] * 10] * 50
    assert len(runs) <= 5 + 2, f"{len(runs)} loads for 5 keys: the callers did not share"
    assert cache.stats()["local"] >= 490


def test_stalled_redis_the_breaker_makes_later_calls_fast(face, tmp_path):
    srv = xfetch.testing.RedisServer(str(tmp_path))
    try:
        # a 1 s command timeout: a call the breaker does not serve takes that
        # long, one it serves is asserted under half of it (a busy machine's
        # margin for a call that sends nothing)
        cache = face.Cache(srv.url, timeout=1.0, breaker=5.0)
        assert face.run(cache.get_or_compute("k", lambda: b"v", ttl=60)) == b"v"
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            took = []
            for i in range(10):
                t0 = time.monotonic()
                got = face.run(cache.fetch(f"s{i}", lambda: b"direct", ttl=60))
                took.append(time.monotonic() - t0)
                assert got == (b"direct", "uncached")
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        assert took[0] >= 0.9, took  # the command timeout, once
        assert max(took[1:]) < 0.5, f"the breaker did not open: {took}"
    finally:
        srv.stop()


# ---- the same errors ------------------------------------------------------------

def test_an_oversized_value_raises_the_same_error_on_both_faces(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix, max_value_len=1000)
    with pytest.raises(xfetch.InvalidArgumentError, match="max_value_len"):
        face.run(cache.get_or_compute("big", face.loader(lambda: b"x" * 2000), ttl=60))
    with pytest.raises(xfetch.InvalidArgumentError):
        face.run(cache.set("big", b"x" * 2000, ttl=60))
    assert face.run(cache.get_or_compute("big", lambda: b"small", ttl=60)) == b"small"


def test_a_loader_asking_for_its_own_key_fails_at_once(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    calls = []
    if face.aio:
        async def loader():
            calls.append(1)
            if len(calls) > 1:  # without the check: a second load after the stall
                return b"inner"
            return await cache.get_or_compute("self", loader, ttl=60)
    else:
        def loader():
            calls.append(1)
            if len(calls) > 1:
                return b"inner"
            return cache.get_or_compute("self", loader, ttl=60)
    t0 = time.monotonic()
    with pytest.raises(xfetch.InvalidArgumentError, match="self asked for self itself"):
        face.run(cache.get_or_compute("self", loader, ttl=60, wait=3))
    assert time.monotonic() - t0 < 1.0
    assert calls == [1]
    # another key from a loader still works
    inner = face.loader(lambda: b"inner")
    if face.aio:
        async def outer():
            return await cache.get_or_compute("inner", inner, ttl=60) + b"!"
    else:
        def outer():
            return cache.get_or_compute("inner", inner, ttl=60) + b"!"
    assert face.run(cache.get_or_compute("outer", outer, ttl=60)) == b"inner!"


def test_redis_down_every_caller_gets_the_loaders_exception_and_one_load(face):
    class DoesNotExist(Exception):
        pass
    cache = face.Cache(down_url(), lazy_connect=True, timeout=0.2)
    runs = []

    def body():
        runs.append(1)
        raise DoesNotExist("no such row")
    load = face.loader(body, delay=0.2)
    errors = face.gather([lambda: cache.get_or_compute("row:1", load, ttl=60)] * 6)
    assert [type(e).__name__ for e in errors] == ["DoesNotExist"] * 6, errors
    assert len(runs) == 1


# ---- get, get_many, cached_many -------------------------------------------------

def test_get_and_get_many(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    assert face.run(cache.get("g")) is None
    face.run(cache.set("g", b"1", ttl=60))
    assert face.run(cache.get("g")) == b"1"
    seen = []

    def one(key):
        seen.append(key)
        return None if key == "none" else key.encode()
    got = face.run(cache.get_many(["g", "a", "none", "b"], face.loader(one), ttl=60))
    assert got == {"g": b"1", "a": b"a", "none": None, "b": b"b"}
    assert list(got) == ["g", "a", "none", "b"]
    assert sorted(seen) == ["a", "b", "none"]
    batches = []

    def many(keys):
        batches.append(sorted(keys))
        return {k: k.encode() * 2 for k in keys}
    got = face.run(cache.get_many(["a", "c", "d"], face.loader(many), ttl=60, batch=True))
    assert got == {"a": b"a", "c": b"cc", "d": b"dd"}
    assert batches == [["c", "d"]]


@pytest.mark.parametrize("batch", [False, True], ids=["per_key", "batch_loader"])
def test_get_many_keys_leased_with_a_stalled_load_stay_leased(face, server, prefix, batch):
    """A get_many whose load stalls for more than twice the lease: the keys
    it leased together and has not stored yet keep their leases, so another
    client asking for one after the lease's length waits for the get_many's
    value instead of loading it again (each key loaded once). The per-key
    loader: s0 and s1 load fast, so s2 and s3 are leased together and s2
    stalls while s3 waits its turn; the batch loader: its one call stalls.
    Margins: renewals come every lease/3 = 1 s, so a renewal starved for up
    to 2 s keeps the key; the other client asks 3.5 s after the stall began
    (the 3 s lease + 0.5 s) and 3 s before it ends, so without renewals the
    lease has run out by then and it loads the key too (2 loads)."""
    lease, stall = 3.0, 6.5
    keys = ["s0", "s1", "s2", "s3"]
    asked = "s1" if batch else "s3"
    loads = {k: 0 for k in keys}
    stalled = []

    def slow(key):
        if key == "s2" or batch:
            stalled.append(key)
            return stall
        return 0.001

    def store(key):
        loads[key] += 1
        return f"v-{key}".encode()
    if face.aio:
        import asyncio

        async def one(key):
            await asyncio.sleep(slow(key))
            return store(key)

        async def many(ks):
            await asyncio.sleep(slow(None))
            return {k: store(k) for k in ks}
    else:
        def one(key):
            time.sleep(slow(key))
            return store(key)

        def many(ks):
            time.sleep(slow(None))
            return {k: store(k) for k in ks}
    cache = face.Cache(server.url, prefix=prefix)
    other = face.Cache(server.url, prefix=prefix)
    policy = dict(ttl=60, lease=lease, wait=60)
    got, err = {}, []
    if face.aio:
        async def main():
            task = asyncio.ensure_future(
                cache.get_many(keys, many if batch else one, batch=batch, **policy))
            while not stalled:
                await asyncio.sleep(0.001)
            await asyncio.sleep(lease + 0.5)
            value = await other.get_or_compute(asked, lambda: store(asked), **policy)
            got.update(await task)
            return value
        value = face.run(main())
    else:
        import threading

        def run():
            try:
                got.update(cache.get_many(keys, many if batch else one, batch=batch, **policy))
            except Exception as e:  # noqa: B902 - asserted below
                err.append(e)
        th = threading.Thread(target=run)
        th.start()
        while not stalled:
            time.sleep(0.001)
        time.sleep(lease + 0.5)
        value = other.get_or_compute(asked, lambda: store(asked), **policy)
        th.join()
    assert not err, err
    assert got == {k: f"v-{k}".encode() for k in keys}
    assert value == f"v-{asked}".encode()
    assert loads == {k: 1 for k in keys}, loads


def test_get_many_of_warm_keys_sends_one_mget(face, server, admin, prefix):
    """A get_many of N warm keys on standalone reads them with one MGET, on
    both faces (INFO commandstats of the session's server), while the
    connection's clock estimate is fresh: younger than 0.5 s (half its
    refresh period). It was learned after `learning` (by the warm-up's
    scripts), so it is fresh through the counted get_many if everything took
    under 0.49 s (0.01 s for the ms the C side rounds down; 2-3 ms on a
    quiet machine: a 100x margin). Judged exactly then; past it (a busy
    machine) the counted get_many may refresh the estimate with one read
    script for all keys (its own reads count too), and reads no key alone
    besides."""
    def count(cmd):
        st = admin.info("commandstats").get(f"cmdstat_{cmd}", {})
        return st.get("calls", 0)
    cache = face.Cache(server.url, prefix=prefix)
    keys = [f"warm{i}" for i in range(10)]
    load = face.loader(lambda k: k.encode())
    learning = time.monotonic()
    assert face.run(cache.get_many(keys, load, ttl=600)) == {k: k.encode() for k in keys}
    face.run(cache.get_many(keys, load, ttl=600))  # the connection's clock, fresh
    before = {c: count(c) for c in ("mget", "get", "evalsha_ro", "hmget")}
    assert face.run(cache.get_many(keys, load, ttl=600)) == {k: k.encode() for k in keys}
    fresh = time.monotonic() - learning < 0.49
    sent = {c: count(c) - before[c] for c in before}
    if fresh:
        assert sent["mget"] == 1, sent
        assert sent["get"] + sent["hmget"] == 0, sent
        assert sent["evalsha_ro"] == 0, sent
    else:
        assert sent["mget"] <= 1, sent
        assert sent["evalsha_ro"] <= 1, sent
        assert sent["get"] + sent["hmget"] <= (len(keys) if sent["evalsha_ro"] else 0), sent


def test_cached_many(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    calls = []

    def rows(ids):
        calls.append(sorted(ids))
        return {i: {"id": i} for i in ids if i != 404}
    if face.aio:
        async def users(ids):
            return rows(ids)
    else:
        def users(ids):
            return rows(ids)
    users = cache.cached_many(ttl=60, key="user:{}", serializer="json")(users)
    assert face.run(users([1, 2])) == {1: {"id": 1}, 2: {"id": 2}}
    assert face.run(users([2, 3, 404])) == {2: {"id": 2}, 3: {"id": 3}, 404: None}
    assert calls == [[1, 2], [3, 404]]
    face.run(users.invalidate(1))
    assert face.run(users([1])) == {1: {"id": 1}} and calls[-1] == [1]


# ---- the decorator: the same options and helpers ----------------------------------

def test_decorator_ttl_forms_condition_and_helpers(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    calls = []

    def page_body(n):
        calls.append(n)
        return b"partial" if n == 0 else b"full"
    if face.aio:
        async def page(n):
            return page_body(n)

        async def lived(n):
            return b"short" if n == 0 else b"long"
    else:
        def page(n):
            return page_body(n)

        def lived(n):
            return b"short" if n == 0 else b"long"
    page = cache.cached(ttl=datetime.timedelta(seconds=30), namespace="t",
                        condition=lambda r: r != b"partial")(page)
    assert face.run(page(0)) == b"partial" and face.run(page(0)) == b"partial"
    assert calls == [0, 0], "condition=: not cached"
    assert face.run(page(1)) == b"full" and face.run(page(1)) == b"full"
    assert calls == [0, 0, 1]
    assert 25000 < admin.pttl(prefix + page.key(1)) <= 30000
    lived = cache.cached(ttl=lambda r: 5 if r == b"short" else 50, key="ttl:{n}")(lived)
    assert face.run(lived(0)) == b"short" and face.run(lived(1)) == b"long"
    assert 0 < admin.pttl(prefix + "ttl:0") <= 5000
    assert 5000 < admin.pttl(prefix + "ttl:1") <= 50000
    assert face.run(page.set(b"set", 2)) is True
    assert face.run(page(2)) == b"set"
    assert face.run(page.refresh(2)) == b"full" and face.run(page(2)) == b"full"
    face.run(page.invalidate(2))
    assert face.run(cache.get(page.key(2))) is None
    assert face.run(page.original(1)) == b"full"


def test_an_undecodable_entry_is_recomputed_on_both_faces(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    calls = []
    if face.aio:
        async def profile(user_id):
            calls.append(user_id)
            return {"id": user_id}
    else:
        def profile(user_id):
            calls.append(user_id)
            return {"id": user_id}
    profile = cache.cached(ttl=60, serializer="json", namespace="t")(profile)
    face.run(cache.set(profile.key(7), pickle.dumps({"old": 1}), ttl=60))
    assert face.run(profile(7)) == {"id": 7}
    assert calls == [7]
    assert face.run(profile(7)) == {"id": 7} and calls == [7], "overwritten"


# ---- constructor options ----------------------------------------------------------

def test_every_constructor_option_is_taken_by_both_faces(face, server, prefix):
    for kw in ({"share": False}, {"lazy_connect": True}, {"max_connections": 2},
               {"connect_timeout": 0.5, "breaker": 0, "seed": 7, "max_key_len": 100}):
        cache = face.Cache(server.url, prefix=prefix, **kw)
        assert face.run(cache.get_or_compute("k", lambda: b"v", ttl=60)) == b"v"
    with pytest.raises(ValueError):
        face.Cache(server.url, max_connections=0)
    with pytest.raises(TypeError):
        face.Cache(server.url, breaker="1")
