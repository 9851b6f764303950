"""Background refresh (background_refresh=True) on both faces against a real
Redis: the call that wins an early refresh returns the current value while
the loader runs elsewhere (a thread of the Cache's, or a task it tracks); a
failed refresh keeps the value, is counted and logged with its traceback;
close() does not wait for a refresh stuck in its loader; a fork child
refreshes on threads of its own. The loader's second run blocks until the
test lets it go, so "while the refresh runs" is a fact, not a timing.

A refresh is due at once here: the first load takes 1.4 s and the rate-aware
window is 1.5 x that, above the 2 s ttl."""
import asyncio
import gc
import logging
import os
import sys
import time

import pytest

import xfetch
import xfetch._refresh

TTL, FIRST_LOAD_S = 2.0, 1.4


class Gated:
    """The loader: run 1 takes FIRST_LOAD_S; later runs wait for release()
    (polling, so it suits a thread and the event loop; at most HOLD_S, so a
    test that fails before release() leaves no refresh thread behind), and
    run `fail_at` raises."""

    HOLD_S = 10.0

    def __init__(self, face, fail_at=0):
        self.face, self.fail_at = face, fail_at
        self.runs, self.open = 0, False

    def release(self):
        self.open = True

    def _held(self, n, t0):
        return n > 1 and not self.open and time.monotonic() - t0 < self.HOLD_S

    def _value(self, n):
        if n == self.fail_at:
            raise RuntimeError(f"refresh {n} failed")
        return f"v{n}".encode()

    def loader(self):
        if self.face.aio:
            async def load():
                self.runs += 1
                n, t0 = self.runs, time.monotonic()
                if n == 1:
                    await asyncio.sleep(FIRST_LOAD_S)
                while self._held(n, t0):
                    await asyncio.sleep(0.01)
                return self._value(n)
        else:
            def load():
                self.runs += 1
                n, t0 = self.runs, time.monotonic()
                if n == 1:
                    time.sleep(FIRST_LOAD_S)
                while self._held(n, t0):
                    time.sleep(0.01)
                return self._value(n)
        return load


class SyncFace:
    """The sync face for a sync-only test (no `face` fixture)."""
    aio = False

    def run(self, x):
        return x


def until(face, cond, timeout=10.0):
    """Waits (the loop runs meanwhile on the aio face) until cond()."""
    async def poll():
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return cond()
    if face.aio:
        return face.run(poll())
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def until_cached(face, cache, key, want, timeout=10.0):
    """Waits until cache.get(key) == want."""
    async def poll():
        deadline = time.monotonic() + timeout
        while await cache.get(key) != want and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return await cache.get(key) == want
    if face.aio:
        return face.run(poll())
    return until(face, lambda: cache.get(key) == want, timeout)


def get(face, cache, key, g):
    return face.run(cache.fetch(key, g.loader(), TTL))


def test_the_winner_returns_the_current_value_while_the_refresh_runs(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix, background_refresh=True)
    g = Gated(face)
    assert get(face, cache, "k", g) == (b"v1", "loader")
    t0 = time.monotonic()
    assert get(face, cache, "k", g) == (b"v1", "cache")  # won the refresh
    assert until(face, lambda: g.runs == 2)  # the loader runs, elsewhere
    assert get(face, cache, "k", g) == (b"v1", "cache")  # the lease is held
    assert g.runs == 2
    assert time.monotonic() - t0 < FIRST_LOAD_S  # nobody waited for a load
    g.release()
    assert until_cached(face, cache, "k", b"v2")
    assert cache.stats()["load_errors"] == 0


def test_a_failed_refresh_keeps_the_value_counts_and_logs(face, server, prefix, caplog):
    cache = face.Cache(server.url, prefix=prefix, background_refresh=True)
    g = Gated(face, fail_at=2)
    g.release()
    assert get(face, cache, "k", g) == (b"v1", "loader")
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        assert get(face, cache, "k", g) == (b"v1", "cache")  # never its error
        # counted as the refresh fails, logged once its lease is released
        assert until(face, lambda: cache.stats()["load_errors"] == 1 and any(
            "background refresh" in r.getMessage() for r in caplog.records))
    failed = [r for r in caplog.records if "background refresh" in r.getMessage()]
    assert failed and failed[0].exc_info and "refresh 2 failed" in str(failed[0].exc_info[1])
    assert until_cached(face, cache, "k", b"v1")  # kept
    assert get(face, cache, "k", g) == (b"v1", "cache")  # the lease was released:
    assert until_cached(face, cache, "k", b"v3")  # refreshed again


def test_close_waits_a_bounded_time_for_a_stuck_refresh(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix, background_refresh=True)
    g = Gated(face)
    assert get(face, cache, "k", g) == (b"v1", "loader")
    assert get(face, cache, "k", g) == (b"v1", "cache")
    assert until(face, lambda: g.runs == 2)
    t0 = time.monotonic()
    face.run(cache.close(timeout=0.3))
    took = time.monotonic() - t0
    assert 0.25 <= took < 3.0, took
    g.release()


def test_a_cache_dropped_without_close_ends_its_refresh_threads(server, prefix, monkeypatch):
    """Its two refresh threads end once idle (they waited for work for ever:
    two threads, and the Cache's C share, kept per dropped Cache)."""
    monkeypatch.setattr(xfetch._refresh.Refresher, "IDLE_S", 0.2)
    face = SyncFace()
    before = set(sys._current_frames())
    cache = xfetch.Cache(server.url, prefix=prefix, background_refresh=True)
    g = Gated(face)
    assert get(face, cache, "k", g) == (b"v1", "loader")
    assert get(face, cache, "k", g) == (b"v1", "cache")  # won the refresh
    assert until(face, lambda: g.runs == 2)
    assert set(sys._current_frames()) - before  # its refresh threads
    g.release()
    assert until_cached(face, cache, "k", b"v2")
    del cache
    gc.collect()
    assert until(face, lambda: not set(sys._current_frames()) - before, timeout=5)


def test_the_default_and_the_decorator(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises(TypeError):
        face.Cache(server.url, prefix=prefix, background_refresh="yes")
    with pytest.raises(TypeError):
        cache.cached(ttl=1, background_refresh=1)
    g = Gated(face)
    assert face.run(cache.fetch("k", g.loader(), TTL, background_refresh=True)) == (
        b"v1", "loader")
    assert face.run(cache.fetch("k", g.loader(), TTL, background_refresh=True)) == (
        b"v1", "cache")
    assert until(face, lambda: g.runs == 2)
    g.release()
    assert until_cached(face, cache, "k", b"v2")
    if face.aio:
        @cache.cached(ttl=1, namespace="f", background_refresh=True)
        async def f(x):
            return str(x * 2).encode()
    else:
        @cache.cached(ttl=1, namespace="f", background_refresh=True)
        def f(x):
            return str(x * 2).encode()
    assert face.run(f(21)) == b"42"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_child_refreshes_on_threads_of_its_own(server, prefix):
    cache = xfetch.Cache(server.url, prefix=prefix, background_refresh=True)
    face = SyncFace()
    g = Gated(face)
    g.release()
    assert get(face, cache, "parent", g) == (b"v1", "loader")
    assert get(face, cache, "parent", g) == (b"v1", "cache")
    assert until(face, lambda: cache.get("parent") == b"v2")  # the parent's threads ran
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            c = Gated(face)
            c.release()
            ok = (get(face, cache, "child", c) == (b"v1", "loader")
                  and get(face, cache, "child", c) == (b"v1", "cache")
                  and until(face, lambda: cache.get("child") == b"v2"))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    cache.close()


def test_refresh_ahead_sets_the_early_window(face, server, prefix):
    """refresh_ahead (Cache default, per call, cached): the rate-aware factor.
    A 0.2 s load with a 2 s ttl leaves ~1.8 s: a factor of 30 (6 s) makes
    the next call due, 3 (0.6 s) does not, < 0 is XFetch (beta 0: never)."""
    for bad, exc in (("1.5", TypeError), (True, TypeError), (float("nan"), ValueError),
                     (float("inf"), ValueError)):
        with pytest.raises(exc):
            face.Cache(server.url, prefix=prefix, refresh_ahead=bad)
        with pytest.raises(exc):
            face.run(face.Cache(server.url, prefix=prefix).fetch("x", lambda: b"x", TTL,
                                                                 refresh_ahead=bad))
        with pytest.raises(exc):
            face.Cache(server.url, prefix=prefix).cached(ttl=1, refresh_ahead=bad)
    cache = face.Cache(server.url, prefix=prefix, background_refresh=True, refresh_ahead=30)
    runs = []
    if face.aio:
        async def load():
            runs.append(1)
            await asyncio.sleep(0.2)
            return b"v%d" % len(runs)
    else:
        def load():
            runs.append(1)
            time.sleep(0.2)
            return b"v%d" % len(runs)
    assert face.run(cache.fetch("k", load, TTL)) == (b"v1", "loader")
    assert face.run(cache.fetch("k", load, TTL, refresh_ahead=3.0)) == (b"v1", "cache")
    assert face.run(cache.fetch("k", load, TTL, beta=0.0, refresh_ahead=-1)) == (b"v1", "cache")
    assert len(runs) == 1  # neither was due
    assert face.run(cache.fetch("k", load, TTL)) == (b"v1", "cache")  # the Cache's 30: due
    assert until(face, lambda: len(runs) == 2)
    assert until_cached(face, cache, "k", b"v2")
    if face.aio:
        @cache.cached(ttl=TTL, namespace="g", refresh_ahead=3.0)
        async def g(x):
            return await load()
    else:
        @cache.cached(ttl=TTL, namespace="g", refresh_ahead=3.0)
        def g(x):
            return load()
    assert face.run(g(1)) == b"v3"
    assert face.run(g(1)) == b"v3"  # 3: not due
    assert len(runs) == 3


def test_the_defaults_load_a_hot_key_about_once_per_ttl(face, server, prefix):
    """A Cache and calls with nothing but a ttl: 8 threads (sync) or 8 tasks
    (aio) on one hot key in a closed loop (1 ms think time) for 5 ttls of
    1 s, a 0.1 s loader. The defaults refresh off the call with the
    rate-aware rule: 1 + 5 / (1 - 0.15) = 6.9 loads at most (1.18 per ttl
    at this rate, the cold load included); plain XFetch refreshed 2.3-3.7
    times per ttl here. Bound 1.5 per ttl: 0.3 of margin for a refresh
    that a busy machine delays past its 50 ms slack (the value expires and
    the next caller loads once more). A caller that loaded in its request
    after the cold load is such a delay: at most one per ttl, same margin."""
    ttl, loader_s, ttls, callers = 1.0, 0.1, 5, 8
    cache = face.Cache(server.url, prefix=prefix)
    loads, in_call, sources = [0], [0], {}
    if face.aio:
        async def load():
            loads[0] += 1
            await asyncio.sleep(loader_s)
            return b"v"
    else:
        def load():
            loads[0] += 1
            time.sleep(loader_s)
            return b"v"
    assert face.run(cache.fetch("hot", load, ttl)) == (b"v", "loader")
    end = time.monotonic() + ttls * ttl

    def count(source):
        sources[source] = sources.get(source, 0) + 1
        in_call[0] += source == "loader"
    if face.aio:
        async def caller():
            while time.monotonic() < end:
                count((await cache.fetch("hot", load, ttl)).source)
                await asyncio.sleep(0.001)
    else:
        def caller():
            while time.monotonic() < end:
                count(cache.fetch("hot", load, ttl).source)
                time.sleep(0.001)
    assert face.gather([caller] * callers) == [None] * callers
    per_ttl = loads[0] / ttls
    assert per_ttl <= 1.5, f"{loads[0]} loads in {ttls} ttls; sources {sources}"
    assert in_call[0] <= ttls, f"{in_call[0]} calls loaded in the request; sources {sources}"


def test_get_many_refreshes_a_key_with_its_loader_by_default(face, server, prefix, caplog):
    """get_many with the defaults: a key's early refresh runs its loader with
    the key (sync: in the batch; aio: as fetch's refresh task), never as a
    refresh that cannot pass the key. A 0.2 s load with a 1 s ttl is due
    from 0.7 s after its write to expiry at 1.0 s: the second call comes
    0.8 s after the first returned (0.1 s of margin each side)."""
    cache = face.Cache(server.url, prefix=prefix)
    calls = []

    def body(k):
        calls.append(k)
        return b"v%d" % len(calls)
    load = face.loader(body, delay=0.2)
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        assert face.run(cache.get_many(["a"], load, ttl=1.0)) == {"a": b"v1"}
        time.sleep(0.8)
        face.run(cache.get_many(["a"], load, ttl=1.0))
        assert until(face, lambda: calls == ["a", "a"]), calls
    assert not [r for r in caplog.records if "failed" in r.getMessage()], caplog.text


def test_get_many_takes_refresh_ahead_and_the_caches_default(face, server, prefix):
    """get_many's early-refresh rule is the call's refresh_ahead=, else the
    Cache's, as for fetch. A 0.2 s load with a 60 s ttl: a factor of 1000
    (200 s) makes every later read due whatever the machine's speed; < 0 with
    beta 0 (XFetch, never early) makes none due."""
    calls = []
    load = face.loader(lambda k: calls.append(k) or b"v%d" % len(calls), delay=0.2)
    eager = face.Cache(server.url, prefix=prefix, refresh_ahead=1000.0,
                       background_refresh=False)
    assert face.run(eager.get_many(["a"], load, ttl=60)) == {"a": b"v1"}
    assert face.run(eager.get_many(["a"], load, ttl=60)) == {"a": b"v2"}  # due: the Cache's
    assert face.run(eager.get_many(["a"], load, ttl=60, beta=0.0,
                                   refresh_ahead=-1)) == {"a": b"v2"}  # the call's: never
    never = face.Cache(server.url, prefix=prefix, refresh_ahead=-1, background_refresh=False)
    assert face.run(never.get_many(["a"], load, ttl=60, beta=0.0)) == {"a": b"v2"}
    assert face.run(never.get_many(["a"], load, ttl=60, beta=0.0,
                                   refresh_ahead=1000.0)) == {"a": b"v3"}
    assert calls == ["a", "a", "a"]
