"""The near hit's fast path (C xf_near_serve, xf_async_near_serve), on both faces: a plain near
hit is served by that one C call before the call is set up, with the call's
source, counters and events; anything else (an elected early refresh, an
expired or absent entry, the near cache off, a bypass) is the call as before."""
import collections
import math
import time

import pytest

import xfetch
import xfetch._aio_loop
import xfetch._cache
import xfetch.aio
from xfetch import lib

from test_near import until_near_hit

WATCHED = ("xf_near_serve", "xf_get_or_compute", "xf_get", "xf_async_near_serve",
           "xf_async_get_or_compute", "xf_async_get")


class Spy:
    """The faces' `lib`, counting the C entry points a call goes through."""

    def __init__(self, real):
        self._real = real
        self.calls = collections.Counter()

    def __getattr__(self, name):
        f = getattr(self._real, name)
        if name not in WATCHED:
            return f

        def counted(*args):
            self.calls[name] += 1
            return f(*args)
        return counted


@pytest.fixture
def spy(monkeypatch):
    s = Spy(lib)
    monkeypatch.setattr(xfetch._cache, "lib", s)
    monkeypatch.setattr(xfetch.aio, "lib", s)
    monkeypatch.setattr(xfetch._aio_loop, "lib", s)
    return s


def calls_made(face):
    """The entry points of the call made as usual, on this face."""
    return (("xf_async_get_or_compute", "xf_async_get") if face.aio
            else ("xf_get_or_compute", "xf_get"))


def near_serve(face):
    """The near hit's entry point, on this face."""
    return "xf_async_near_serve" if face.aio else "xf_near_serve"


def test_a_near_hit_is_one_c_call_with_the_calls_counts_and_events(face, server, prefix,
                                                                    spy):
    events = []
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20,
                      on_event=events.append)
    quiet = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20)  # no on_event
    never = face.loader(lambda: pytest.fail("a near hit must not load"))
    for cache in (near, quiet):
        face.run(cache.set("k", b"v", ttl=60))
        until_near_hit(face, cache, "k", b"v")
        spy.calls.clear()
        del events[:]
        before = cache.stats()
        assert face.run(cache.get_or_compute("k", never, ttl=60)) == b"v"
        assert face.run(cache.fetch("k", never, ttl=60, stale=1.0)) == (b"v", "cache")
        assert face.run(cache.get("k")) == b"v"
        after = cache.stats()
        assert after["near_hits"] - before["near_hits"] == 3
        assert after["hits"] - before["hits"] == 3
        assert spy.calls == {near_serve(face): 3}  # no call set up
        calls = cache._config.events.snapshot()[0]
        assert calls.get(("", "near"), 0) >= 3  # metrics: xfetch_calls_total{result="near"}
        driver = "async" if face.aio else "blocking"
        assert [(e.type, e.key, e.source, e.driver) for e in events
                if e.type != "invalidation"] == [
            ("near", b"k", "cache", driver)] * (3 if cache is near else 0)


def test_an_elected_early_refresh_is_the_call_with_one_draw(face, server, prefix, spy):
    """beta=inf elects every hit of a value whose load took time: the fast
    path's draw elects it, the call refreshes it (source "loader", counted
    early); a draw that elected is kept for the call: even beta=0 then
    refreshes (the call does not draw again)."""
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20,
                      background_refresh=False, refresh_ahead=-1)  # XFetch, in the call
    n = []
    load = face.loader(lambda: n.append(1) or b"v%d" % len(n), delay=0.02)
    assert face.run(near.fetch("k", load, ttl=60)) == (b"v1", "loader")
    until_near_hit(face, near, "k", b"v1")
    spy.calls.clear()
    early = near.stats()["early"]
    assert face.run(near.fetch("k", load, ttl=60, beta=math.inf)) == (b"v2", "loader")
    assert near.stats()["early"] == early + 1
    assert spy.calls[near_serve(face)] == 1 and spy.calls[calls_made(face)[0]] == 1
    until_near_hit(face, near, "k", b"v2")
    policy = near._policies.common(60, math.inf)
    assert near._near_serve(b"k", policy) is xfetch._core.NEAR_NOT_SERVED  # elected, kept
    assert face.run(near.fetch("k", load, ttl=60, beta=0.0)) == (b"v3", "loader")


def test_what_the_fast_path_leaves_to_the_call(face, server, prefix, spy):
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20)
    load = face.loader(lambda: b"fresh")
    face.run(near.set("short", b"old", ttl=0.3))
    until_near_hit(face, near, "short", b"old")
    time.sleep(0.35)  # expired: its near entry too
    spy.calls.clear()
    assert face.run(near.fetch("short", load, ttl=60)) == (b"fresh", "loader")
    assert spy.calls[near_serve(face)] == 1 and spy.calls[calls_made(face)[0]] == 1

    # a kept not-found: a get-or-compute's near hit (None), a get's miss
    none = face.loader(lambda: None)
    assert face.run(near.get_or_compute("neg", none, ttl=60, negative_ttl=60)) is None
    before = near.stats()
    deadline = time.monotonic() + 5
    while near.stats()["near_hits"] == before["near_hits"]:
        assert face.run(near.get_or_compute("neg", none, ttl=60, negative_ttl=60)) is None
        assert time.monotonic() < deadline, "never a near hit"
        time.sleep(0.001)
    spy.calls.clear()
    before = near.stats()
    assert face.run(near.get_or_compute("neg", none, ttl=60, negative_ttl=60)) is None
    assert face.run(near.get("neg")) is None
    after = near.stats()
    assert spy.calls == {near_serve(face): 2}
    assert (after["near_hits"] - before["near_hits"], after["hits"] - before["hits"],
            after["misses"] - before["misses"], after["loads"] - before["loads"]) == (2, 1, 1, 0)

    # bypassed: the call, which runs the loader
    spy.calls.clear()
    with near.disabled():
        assert face.run(near.get_or_compute("short", load, ttl=60)) == b"fresh"
    assert spy.calls[near_serve(face)] == 0

    # no near cache: the call, always
    plain = face.Cache(server.url, prefix=prefix)
    face.run(plain.set("p", b"v", ttl=60))
    spy.calls.clear()
    for _ in range(3):
        assert face.run(plain.get_or_compute("p", load, ttl=60)) == b"v"
    assert spy.calls == {calls_made(face)[0]: 3}
