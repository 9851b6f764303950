"""Round trips, keys and values, set/delete, stats, not-found, close."""
import pytest

import xfetch
from conftest import peek, stored


def test_round_trip_loads_once_then_hits(cache, counter):
    load = counter(b"hello")
    assert cache.fetch("k", load, ttl=60) == (b"hello", "loader")
    assert cache.fetch("k", load, ttl=60) == (b"hello", "cache")
    assert cache.get_or_compute("k", load, 60.0) == b"hello"
    assert load.calls == 1


def test_str_key_is_utf8_under_the_prefix(cache, admin, prefix, counter):
    cache.get_or_compute("ключ-é", counter(), ttl=60)
    assert admin.exists((prefix + "ключ-é").encode("utf-8")) == 1
    assert stored(peek(admin, (prefix + "ключ-é").encode("utf-8")).v) == b"value"


def test_bytes_and_str_keys_name_the_same_entry(cache, counter):
    load = counter(b"x")
    cache.get_or_compute("same", load, ttl=60)
    cache.get_or_compute(b"same", load, ttl=60)
    assert load.calls == 1


def test_binary_keys_and_values_with_nul_bytes(cache, admin, prefix, counter):
    value = b"\x00a\x00\xff\x00" * 1000
    key = b"k\x00e\xffy"
    assert cache.get_or_compute(key, counter(value), ttl=60) == value
    assert cache.get_or_compute(key, counter(b"other"), ttl=60) == value
    assert stored(peek(admin, prefix.encode() + key).v) == value


@pytest.mark.parametrize("make", [bytearray, memoryview])
def test_loader_may_return_bytes_like(cache, make):
    assert cache.get_or_compute("k", lambda: make(b"abc"), ttl=60) == b"abc"


def test_empty_value_is_a_value(cache, counter):
    load = counter(b"")
    assert cache.fetch("k", load, ttl=60) == (b"", "loader")
    assert cache.fetch("k", load, ttl=60) == (b"", "cache")


def test_set_then_get_skips_the_loader(cache, counter):
    cache.set("k", b"warm\x00", ttl=60)
    load = counter()
    assert cache.fetch("k", load, ttl=60) == (b"warm\x00", "cache")
    assert load.calls == 0


def test_delete_forces_a_reload(cache, admin, prefix, counter):
    load = counter()
    cache.get_or_compute("k", load, ttl=60)
    cache.delete("k")
    assert peek(admin, prefix + "k").v is None  # a tombstone (s) may stay
    cache.get_or_compute("k", load, ttl=60)
    assert load.calls == 2
    cache.delete("never-existed")  # no error


def test_none_from_the_loader_means_not_found(cache, counter):
    load = counter(None)
    assert cache.fetch("k", load, ttl=60) == (None, None)
    assert cache.get_or_compute("k", load, ttl=60) is None
    assert load.calls == 2  # negative_ttl=0: not-found is not cached


def test_not_found_is_cached_for_negative_ttl(cache, counter):
    load = counter(None)
    assert cache.get_or_compute("k", load, ttl=60, negative_ttl=30) is None
    assert cache.get_or_compute("k", load, ttl=60, negative_ttl=30) is None
    assert load.calls == 1


def test_beta_inf_always_recomputes(cache, counter):
    load = counter()
    cache.get_or_compute("k", load, ttl=60)
    assert cache.fetch("k", load, ttl=60, beta=float("inf"),  # XFetch, in the call
                       background_refresh=False, refresh_ahead=-1) == (b"value", "loader")
    assert load.calls == 2


def test_stats_is_a_dict_of_counters(cache, counter):
    load = counter()
    cache.get_or_compute("k", load, ttl=60)
    cache.get_or_compute("k", load, ttl=60)
    cache.get_or_compute("k", load, ttl=60)
    s = cache.stats()
    assert isinstance(s, dict)
    assert set(s) == {"hits", "misses", "early", "loads", "load_errors", "lease_lost",
                      "waits", "stale", "uncached", "redis_errors", "superseded",
                      "local", "connections", "redirects", "map_refreshes", "malformed",
                      "bypassed", "near_hits", "near_evictions", "fence_failed", "refused",
                      "undecodable", "tag_invalidated", "failsafe", "revalidated"}
    assert (s["hits"], s["misses"], s["loads"], s["load_errors"]) == (2, 1, 1, 0)
    assert s["connections"] == 1


def test_close_then_calls_raise_value_error(server, admin, counter):
    with xfetch.Cache(server.url) as c:
        c.get_or_compute("k", counter(), ttl=60)
    with pytest.raises(ValueError):
        c.get_or_compute("k2", counter(), ttl=60)
    assert c.stats()["loads"] == 1  # counters survive close


def test_fail_open_when_redis_goes_away(tmp_path, counter):
    from conftest import RedisServer
    srv = RedisServer(str(tmp_path))
    c = xfetch.Cache(srv.url, timeout=0.5)
    c.get_or_compute("k", counter(), ttl=60)
    srv.stop()
    load = counter(b"fresh")
    assert c.fetch("k", load, ttl=60) == (b"fresh", "uncached")
    assert load.calls == 1
    assert c.stats()["uncached"] == 1
    c.close()


def test_stale_value_is_served_while_another_caller_refreshes(cache, server, prefix):
    import threading
    import time
    cache.get_or_compute("k", lambda: b"old", ttl=0.05, stale=10)
    time.sleep(0.1)
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(5)
        return b"new"

    other = xfetch.Cache(server.url, prefix=prefix)
    t = threading.Thread(target=other.get_or_compute, args=("k", slow),
                         kwargs={"ttl": 60, "stale": 10})
    t.start()
    assert started.wait(5)
    assert cache.fetch("k", lambda: b"unused", ttl=60, stale=10) == (b"old", "stale")
    release.set()
    t.join()
    assert cache.fetch("k", lambda: b"unused", ttl=60) == (b"new", "cache")
    other.close()


def test_stale_if_error_serves_the_old_value_instead_of_raising(cache):
    import time
    cache.get_or_compute("k", lambda: b"old", ttl=0.05, stale=10)
    time.sleep(0.1)

    def broken():
        raise RuntimeError("backend down")
    assert cache.fetch("k", broken, ttl=60, stale=10, stale_if_error=10) == (b"old", "stale")
    with pytest.raises(RuntimeError):  # without stale_if_error the error propagates
        cache.get_or_compute("k", broken, ttl=60, stale=10)
    assert cache.stats()["load_errors"] == 2


def test_connections_close_on_close_and_on_garbage_collection(server, admin, counter):
    import gc
    import time

    def others(expected=None):
        # The server notices a closed socket on its next event-loop turn.
        for _ in range(200):
            n = len(admin.client_list()) - 1
            if expected is None or n == expected:
                break
            time.sleep(0.01)
        return n

    gc.collect()  # connections of earlier tests' unclosed Caches
    time.sleep(0.05)
    base = others()
    c = xfetch.Cache(server.url)
    c.get_or_compute("k", counter(), ttl=60)
    assert others(base + 1) == base + 1
    c.close()
    assert others(base) == base
    c = xfetch.Cache(server.url)
    assert others(base + 1) == base + 1
    del c
    gc.collect()
    assert others(base) == base


def test_fail_open_when_no_new_connection_can_be_opened(tmp_path, counter):
    import time
    from conftest import RedisServer
    srv = RedisServer(str(tmp_path))
    c = xfetch.Cache(srv.url, timeout=0.5, breaker=30, share=False)  # each call loads
    busy = c._pool._acquire()  # another thread's call in progress: the pool is empty
    srv.stop()
    load = counter(b"fresh")
    assert c.fetch("k", load, ttl=60) == (b"fresh", "uncached")
    t0 = time.monotonic()
    assert c.fetch("k", load, ttl=60) == (b"fresh", "uncached")  # breaker: no connect
    assert time.monotonic() - t0 < 0.25  # half the 0.5 s timeout: a busy machine's margin
    assert load.calls == 2 and c.stats()["uncached"] == 2
    with pytest.raises(xfetch.ConnectionError):
        c.delete("k")
    c._pool._release(busy)
    c.close()


def test_set_says_whether_it_wrote(cache, admin, prefix):
    """True when written; False, writing nothing, when the entry holds a value
    dated later than now (as after the server's clock stepped back)."""
    assert cache.set("fresh", b"v", ttl=60) is True
    sec, usec = admin.time()
    now = sec * 1000 + usec // 1000
    admin.hset(prefix + "newer", mapping={"v": b"newer", "d": 0, "e": now + 60000,
                                          "s": now + 30000})
    admin.pexpire(prefix + "newer", 60000)
    assert cache.set("newer", b"older", ttl=60) is False
    assert admin.hget(prefix + "newer", "v") == b"newer"
