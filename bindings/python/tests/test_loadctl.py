"""The loader under control, on both faces (the `face` fixture): a loader
slower than its lease renews it (no second load meanwhile), and a holder
that dies frees its key within its lease. Real redis-server."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
from prometheus_client import CollectorRegistry

import xfetch
import xfetch.metrics

# A lease and a loader twice as long. Renewals go every third of the lease
# (~333 ms): one may come ~660 ms late on a busy machine before the lease
# runs out (as test_renew.c: 500 ms leases lost a lease beside two CPU loops).
LEASE = 1.0
LOAD = 2 * LEASE


def two_callers(face, server, prefix, **policy):
    """A slow load of one key by a first Cache, and a second Cache's call
    100 ms later that waits for its value: how many loads ran."""
    first, second = face.Cache(server.url, prefix=prefix), face.Cache(server.url, prefix=prefix)
    runs = []

    def body():
        runs.append(1)
        return b"v"
    load = face.loader(body, delay=LOAD)

    def call(cache, after):
        if face.aio:
            async def one():
                import asyncio
                await asyncio.sleep(after)
                return await cache.get_or_compute("slow", load, ttl=60, lease=LEASE,
                                                  wait=5.0, **policy)
        else:
            def one():
                time.sleep(after)
                return cache.get_or_compute("slow", load, ttl=60, lease=LEASE, wait=5.0,
                                            **policy)
        return one
    out = face.gather([call(first, 0.0), call(second, 0.1)])
    assert out == [b"v", b"v"]
    return len(runs)


def test_a_loader_twice_its_lease_gets_no_twin(face, server, admin, prefix):
    loads = two_callers(face, server, prefix)
    assert loads == 1, f"a {LOAD} s loader under a {LEASE} s lease: {loads} loads"


def test_without_renewal_the_second_caller_loads_too(face, server, admin, prefix):
    loads = two_callers(face, server, prefix, max_load=LEASE)
    assert loads == 2, f"{loads} loads"


_HOLDER = textwrap.dedent("""
    import asyncio, sys, time
    import xfetch, xfetch.aio
    url, prefix, face, lease = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

    def started():
        sys.stdout.write("loading\\n")
        sys.stdout.flush()

    if face == "aio":
        async def load():
            started()
            await asyncio.sleep(3600)
        async def main():
            cache = xfetch.aio.Cache(url, prefix=prefix)
            await cache.get_or_compute("held", load, ttl=60, lease=lease)
        asyncio.run(main())
    else:
        def load():
            started()
            time.sleep(3600)
        xfetch.Cache(url, prefix=prefix).get_or_compute("held", load, ttl=60, lease=lease)
""")


def lease_held(cache, face):
    """Whether another caller holds the key's lease (a call that may not wait
    raises TimeoutError)."""
    try:
        face.run(cache.get_or_compute("held", lambda: b"x", ttl=60, wait=0.0,
                                      on_wait_timeout="fail"))
    except xfetch.TimeoutError:
        return True
    return False


def test_a_killed_holder_frees_the_key_within_its_lease(face, server, admin, prefix):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, server.url, prefix, face.kind,
                               str(LEASE)], stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert holder.stdout.readline() == b"loading\n"  # its lease is won
        cache = face.Cache(server.url, prefix=prefix)
        assert lease_held(cache, face)
        time.sleep(LEASE + 0.2)
        assert lease_held(cache, face), f"the lease was not renewed past its {LEASE} s"
    finally:
        holder.kill()
        killed = time.monotonic()
        holder.wait()
    got = face.run(cache.fetch("held", face.loader(lambda: b"mine"), ttl=60, lease=LEASE,
                               wait=5.0))
    freed = time.monotonic() - killed
    assert got == (b"mine", "loader")
    # Within the lease (the last renewal came at most a third of it before
    # the kill), plus the waiter's poll (50 ms at most) and 650 ms for a busy
    # machine.
    assert freed <= LEASE + 0.7, f"loaded again {freed:.3f} s after the kill"


@pytest.mark.parametrize("max_load", [-1.0, float("nan"), "1"])
def test_max_load_is_checked(face, server, prefix, max_load):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises((TypeError, ValueError)):
        face.run(cache.get_or_compute("k", lambda: b"v", ttl=60, max_load=max_load))


# ---- soft and hard timeouts -------------------------------------------------------
# A 100 ms timeout against a 2 s loader: a call must end within 1.2 s (the
# timeout plus 1.1 s for a busy 2-core machine: 500 ms was too little beside
# two CPU loops, 0.856 s seen), and the value the load goes on to write must
# land within 6 s.
# The C side counts whole milliseconds: a call may end up to 1 ms before
# its timeout as time.monotonic() tells it (EARLY).
TIMEOUT, SLOW, CALL_BOUND, LANDS_WITHIN, EARLY = 0.1, 2.0, 1.2, 6.0, 0.002


def pause(face, seconds):
    """Sleeps, keeping an aio face's loop running (its tasks: a load that
    goes on)."""
    if face.aio:
        import asyncio
        face.run(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def lands(face, cache, key, want):
    t0 = time.monotonic()
    while time.monotonic() - t0 < LANDS_WITHIN:
        if face.run(cache.get(key)) == want:
            return
        pause(face, 0.02)
    pytest.fail(f"{key!r} never held {want!r}")


def timed(face, call):
    t0 = time.monotonic()
    try:
        return face.run(call()), time.monotonic() - t0
    except xfetch.TimeoutError as e:
        return e, time.monotonic() - t0


def test_soft_timeout_returns_the_stale_value_and_the_load_lands(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    face.run(cache.set("k", b"old", ttl=0.1, stale=60))
    time.sleep(0.2)  # past its ttl, within stale
    runs = []

    def body():
        runs.append(1)
        return b"new"
    got, took = timed(face, lambda: cache.fetch("k", face.loader(body, delay=SLOW), ttl=60,
                                                stale=60, soft_timeout=TIMEOUT))
    assert got == (b"old", "stale")
    assert TIMEOUT - EARLY <= took <= CALL_BOUND, f"returned after {took:.3f} s"
    lands(face, cache, "k", b"new")
    assert runs == [1]


def test_a_tagged_load_past_its_soft_timeout_writes_its_tags(face, server, admin, prefix):
    # The load that went on writes the call's tags: a call of the same tags
    # hits its value (a refused entry would be a miss that runs `never`).
    cache = face.Cache(server.url, prefix=prefix)
    face.run(cache.set("t", b"old", ttl=0.1, stale=60, tags=["lt"]))
    time.sleep(0.2)  # past its ttl, within stale
    got, _ = timed(face, lambda: cache.fetch("t", face.loader(lambda: b"new", delay=SLOW),
                                             ttl=60, stale=60, soft_timeout=TIMEOUT,
                                             tags=["lt"]))
    assert got == (b"old", "stale")
    never = []

    def body():
        never.append(1)
        return b"x"
    t0 = time.monotonic()
    while time.monotonic() - t0 < LANDS_WITHIN:
        got = face.run(cache.fetch("t", face.loader(body), ttl=60, stale=60, tags=["lt"]))
        if got == (b"new", "cache"):
            break
        pause(face, 0.02)
    assert got == (b"new", "cache")
    assert never == []


def test_hard_timeout_raises_and_the_load_is_cached(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    runs = []

    def body():
        runs.append(1)
        return b"new"
    got, took = timed(face, lambda: cache.get_or_compute("cold", face.loader(body, delay=SLOW),
                                                         ttl=60, hard_timeout=TIMEOUT))
    assert isinstance(got, xfetch.TimeoutError), got
    assert TIMEOUT - EARLY <= took <= CALL_BOUND, f"raised after {took:.3f} s"
    lands(face, cache, "cold", b"new")
    assert runs == [1]


def test_a_load_in_time_is_the_callers(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    got = face.run(cache.fetch("quick", face.loader(lambda: b"v"), ttl=60, hard_timeout=5.0))
    assert got == (b"v", "loader")
    got = face.run(cache.fetch("quick", face.loader(lambda: b"w"), ttl=60, hard_timeout=5.0))
    assert got == (b"v", "cache")


def test_a_loader_error_in_time_is_raised(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)

    def body():
        raise KeyError("boom")
    with pytest.raises(KeyError):
        face.run(cache.get_or_compute("err", face.loader(body), ttl=60, hard_timeout=5.0))


def test_a_waiter_waits_no_longer_than_its_hard_timeout(face, server, admin, prefix):
    holder, waiter = face.Cache(server.url, prefix=prefix), face.Cache(server.url, prefix=prefix)
    slow = face.loader(lambda: b"held", delay=SLOW)

    def call(cache, after, **policy):
        if face.aio:
            async def one():
                import asyncio
                await asyncio.sleep(after)
                t0 = time.monotonic()
                try:
                    return await cache.get_or_compute("w", slow, ttl=60, **policy)
                except xfetch.TimeoutError as e:
                    return e, time.monotonic() - t0
        else:
            def one():
                time.sleep(after)
                t0 = time.monotonic()
                try:
                    return cache.get_or_compute("w", slow, ttl=60, **policy)
                except xfetch.TimeoutError as e:
                    return e, time.monotonic() - t0
        return one
    # Both connected first: a first call's connect is not a wait for a load,
    # and a slow one (a busy machine) let the waiter find the value written.
    # The waiter then gets its value only if it is held up 1.8 s (SLOW less
    # its start) before its first read.
    face.run(holder.get("warm"))
    face.run(waiter.get("warm"))
    held, waited = face.gather([call(holder, 0.0), call(waiter, 0.2, hard_timeout=TIMEOUT)])
    assert held == b"held"
    assert isinstance(waited[0], xfetch.TimeoutError), waited
    assert waited[1] <= CALL_BOUND, f"waited {waited[1]:.3f} s"


@pytest.mark.parametrize("policy", [dict(soft_timeout=-1.0), dict(hard_timeout=float("nan")),
                                    dict(soft_timeout=2.0, hard_timeout=1.0)])
def test_timeouts_are_checked(face, server, prefix, policy):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises((TypeError, ValueError)):
        face.run(cache.get_or_compute("k", lambda: b"v", ttl=60, **policy))


def test_the_events_of_renewals_and_timeouts(face, server, admin, prefix):
    seen = []
    cache = face.Cache(server.url, prefix=prefix, on_event=lambda e: seen.append(e))
    got = face.run(cache.fetch("e", face.loader(lambda: b"v", delay=LOAD), ttl=60,
                               lease=LEASE))
    assert got == (b"v", "loader")
    renewed = [e for e in seen if e.type == "lease_renewed"]
    assert renewed and all(e.error == 0 and e.key == b"e" for e in renewed), seen
    with pytest.raises(xfetch.TimeoutError):
        face.run(cache.get_or_compute("t", face.loader(lambda: b"v", delay=SLOW), ttl=60,
                                      hard_timeout=TIMEOUT))
    assert [e.error for e in seen if e.type == "hard_timeout"] == [lib_code("XF_ETIMEDOUT")]
    lands(face, cache, "t", b"v")


def lib_code(name):
    from xfetch._native import lib
    return getattr(lib, name)


# ---- fail-safe across the fleet ---------------------------------------------------
# A 2 s throttle: the second Cache's call comes right after the failure (a
# busy machine may delay it by up to 2 s), the call after the throttle 2.2 s
# after the failure (a lower bound only).
THROTTLE = 2.0


def test_failsafe_throttle_serves_the_last_good_value_fleet_wide(face, server, admin, prefix):
    events = []
    first = face.Cache(server.url, prefix=prefix)
    second = face.Cache(server.url, prefix=prefix,
                        on_event=lambda e: events.append(e.type) if e.type == "failsafe" else None)
    face.run(first.set("fs", b"good", ttl=0.1, stale=60))
    time.sleep(0.2)  # past its ttl
    policy = dict(ttl=60, stale_if_error=60, failsafe_throttle=THROTTLE)

    def broken():
        raise RuntimeError("the database is down")
    got = face.run(first.fetch("fs", face.loader(broken), **policy))
    assert got == (b"good", "stale")
    runs = []

    def body():
        runs.append(1)
        return b"new"
    got = face.run(second.fetch("fs", face.loader(body), **policy))
    assert got == (b"good", "stale"), "the second Cache loaded within the throttle"
    assert runs == []
    assert events == ["failsafe"]
    # Counted once: in stats (also a stale serve) and in the metrics.
    assert (second.stats()["failsafe"], second.stats()["stale"]) == (1, 1)
    assert first.stats()["failsafe"] == 0
    registry = CollectorRegistry()
    registry.register(xfetch.metrics.Collector(second))
    assert registry.get_sample_value("xfetch_failsafe_serves_total", {"namespace": ""}) == 1
    pause(face, THROTTLE + 0.2)
    got = face.run(second.fetch("fs", face.loader(body), **policy))
    assert got == (b"new", "loader")
    assert runs == [1]


@pytest.mark.parametrize("throttle", [-1.0, float("nan"), "2"])
def test_failsafe_throttle_is_checked(face, server, prefix, throttle):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises((TypeError, ValueError)):
        face.run(cache.get_or_compute("k", lambda: b"v", ttl=60, failsafe_throttle=throttle))


# ---- get_many takes get_or_compute's keywords ----------------------------------------

# Each keyword get_or_compute takes, at a value that is not its default.
CALL_POLICY = dict(lease=4.0, wait=4.0, stale=30.0, stale_if_error=30.0, negative_ttl=5.0,
                   jitter=0.1, on_wait_timeout="fail", background_refresh=False,
                   refresh_ahead=2.0, tags=["many"], max_load=20.0, soft_timeout=3.0,
                   hard_timeout=4.0, failsafe_throttle=1.0, tags_never_stale=True)


def test_every_get_or_compute_keyword_is_listed_here():
    import inspect
    for get_or_compute in (xfetch.Cache.get_or_compute, xfetch.Cache.fetch):
        # previous= is how the loader is called, not a policy keyword (get_many's
        # loaders take keys)
        named = set(inspect.signature(get_or_compute).parameters) - {
            "self", "key", "loader", "ttl", "beta", "previous"}
        assert named == set(CALL_POLICY)


@pytest.mark.parametrize("name", sorted(CALL_POLICY))
@pytest.mark.parametrize("batch", [False, True])
def test_get_many_takes_each_get_or_compute_keyword(face, server, prefix, name, batch):
    cache = face.Cache(server.url, prefix=prefix)
    one = face.loader(lambda k: b"v-" + k.encode())
    load = face.loader(lambda ks: {k: b"v-" + k.encode() for k in ks}) if batch else one
    got = face.run(cache.get_many(["a", "b"], load, ttl=60, batch=batch,
                                  **{name: CALL_POLICY[name]}))
    assert got == {"a": b"v-a", "b": b"v-b"}
    assert face.run(cache.get_many(["a", "b"], load, ttl=60, batch=batch,
                                   **{name: CALL_POLICY[name]})) == got


def test_get_many_refuses_what_get_or_compute_refuses(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises(TypeError):
        face.run(cache.get_many(["a"], lambda k: b"v", ttl=60, no_such_keyword=1))
    with pytest.raises((TypeError, ValueError)):
        face.run(cache.get_many(["a"], lambda k: b"v", ttl=60, soft_timeout=2.0,
                                hard_timeout=1.0))


def test_get_many_soft_timeout_returns_the_stale_values(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    face.run(cache.set("s1", b"old1", ttl=0.1, stale=60))
    face.run(cache.set("s2", b"old2", ttl=0.1, stale=60))
    time.sleep(0.2)  # past their ttl, within stale
    slow = face.loader(lambda k: b"new-" + k.encode(), delay=SLOW)
    got, took = timed(face, lambda: cache.get_many(["s1", "s2"], slow, ttl=60, stale=60,
                                                   soft_timeout=TIMEOUT))
    assert got == {"s1": b"old1", "s2": b"old2"}
    # the two keys' calls, one after the other on the sync face: twice the bound
    assert took <= 2 * CALL_BOUND, f"returned after {took:.3f} s"
    lands(face, cache, "s1", b"new-s1")
    lands(face, cache, "s2", b"new-s2")


def test_get_many_hard_timeout_raises(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    slow = face.loader(lambda k: b"new", delay=SLOW)
    got, took = timed(face, lambda: cache.get_many(["cold"], slow, ttl=60,
                                                   hard_timeout=TIMEOUT))
    assert isinstance(got, xfetch.TimeoutError), got
    assert took <= CALL_BOUND, f"raised after {took:.3f} s"
    lands(face, cache, "cold", b"new")


def test_a_caller_that_waited_on_a_failed_load_gets_the_last_good_value(face, server, admin,
                                                                         prefix):
    """The load a caller waited on fails: the caller is served the last good
    value (stale_if_error), as the loading caller is, without running its own
    loader. The holder's loader fails only once the waiter is seen waiting
    (its lease_lost event), up to 20 s: no timing margin."""
    waiting = []
    holder = face.Cache(server.url, prefix=prefix)
    waiter = face.Cache(server.url, prefix=prefix,
                        on_event=lambda e: waiting.append(1) if e.type == "lease_lost" else None)
    face.run(holder.set("fw", b"good", ttl=0.1, stale=60))
    time.sleep(0.2)  # past its ttl
    policy = dict(ttl=60, stale_if_error=60)

    if face.aio:
        async def held(*args):
            import asyncio
            for _ in range(2000):
                if waiting:
                    break
                await asyncio.sleep(0.01)
            raise RuntimeError("the database is down")
    else:
        def held(*args):
            for _ in range(2000):
                if waiting:
                    break
                time.sleep(0.01)
            raise RuntimeError("the database is down")
    runs = []

    def body():
        runs.append(1)
        raise RuntimeError("the database is still down")

    def call(cache, loader, after):
        if face.aio:
            async def one():
                import asyncio
                await asyncio.sleep(after)
                return await cache.fetch("fw", loader, **policy)
        else:
            def one():
                time.sleep(after)
                return cache.fetch("fw", loader, **policy)
        return one
    face.run(waiter.get("warm"))  # connected: its first call is a wait, not a connect
    out = face.gather([call(holder, held, 0.0), call(waiter, face.loader(body), 0.2)])
    assert out == [(b"good", "stale"), (b"good", "stale")]
    assert waiting, "the waiter waited"
    assert runs == [], "the waiter ran its own loader"
