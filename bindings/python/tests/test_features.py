"""Issue 10's features for real applications: get, get_many, delete_many,
lazy_connect, max_connections (nested calls reuse the thread's connection),
the decorator's helpers, condition and ttl forms."""
import datetime
import typing
import threading
import time

import pytest

import xfetch


def test_get_reads_without_computing(cache, counter):
    assert cache.get("g") is None
    cache.set("g", b"v", ttl=60)
    assert cache.get("g") == b"v"
    load = counter(None)
    cache.get_or_compute("nf", load, ttl=60, negative_ttl=60)
    assert cache.get("nf") is None
    assert cache.stats()["loads"] == 1


def test_get_many_reads_in_one_batch_and_loads_the_misses(cache, admin):
    cache.set("a", b"A", ttl=60)
    loaded = []

    def load(key):
        loaded.append(key)
        return None if key == "none" else key.upper().encode()

    def evalsha_ro_calls():  # a NOSCRIPT (first use of a script) fails and counts
        st = admin.info("commandstats").get("cmdstat_evalsha_ro", {})
        return st.get("calls", 0) - st.get("failed_calls", 0)

    before = evalsha_ro_calls()
    out = cache.get_many(["a", "b", "none", "b"], load, ttl=60)
    assert out == {"a": b"A", "b": b"B", "none": None}
    assert list(out) == ["a", "b", "none"]
    assert sorted(loaded) == ["b", "none"]
    middle = evalsha_ro_calls()
    assert middle - before == 1, "one read_many for the batch (the server's clock unknown)"

    def mget_calls():
        return admin.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)

    mget = mget_calls()
    assert cache.get_many(["a", "b"], load, ttl=60) == {"a": b"A", "b": b"B"}
    assert sorted(loaded) == ["b", "none"], "hits: no load"
    # The clock now known, hits are one plain MGET for the batch (format 2),
    # unless the estimate aged meanwhile: then one read_many again.
    scripts = evalsha_ro_calls() - middle
    assert scripts <= 1
    if scripts == 0:
        assert mget_calls() - mget == 1, "one MGET for the batch's hits, no script"


def test_get_many_raises_the_loaders_exception_and_caches_the_rest(cache):
    def load(key):
        if key == "bad":
            raise KeyError(key)
        return b"ok"

    with pytest.raises(KeyError):
        cache.get_many(["good", "bad"], load, ttl=60)
    assert cache.get("good") == b"ok"
    assert cache.get("bad") is None


def test_delete_many(cache):
    for k in ("x", "y"):
        cache.set(k, b"1", ttl=60)
    cache.delete_many(["x", "y", "absent"])
    assert cache.get("x") is None and cache.get("y") is None


def test_lazy_connect_starts_without_redis(counter):
    cache = xfetch.Cache("redis://127.0.0.1:1/0", lazy_connect=True, breaker=1)
    load = counter(b"direct")
    assert cache.fetch("k", load, ttl=60) == (b"direct", "uncached")
    cache.close()
    with pytest.raises(xfetch.ConnectionError):
        xfetch.Cache("redis://127.0.0.1:1/0")


def test_nested_calls_reuse_the_thread_s_connection(server, admin, prefix):
    cache = xfetch.Cache(server.url, prefix=prefix, max_connections=1)

    @cache.cached(ttl=60, namespace="t")
    def leaf(n):
        return b"%d" % n

    @cache.cached(ttl=60, namespace="t")
    def middle(n):
        return leaf(n) + b"+"

    @cache.cached(ttl=60, namespace="t")
    def top(n):
        return middle(n) + b"!"

    assert top(1) == b"1+!"
    assert cache.stats()["connections"] == 1
    cache.close()


def test_max_connections_bounds_the_connections_of_many_threads(server, prefix):
    cache = xfetch.Cache(server.url, prefix=prefix, max_connections=2)
    errors = []

    def work():
        try:
            for i in range(20):
                cache.get_or_compute(f"k{i}", lambda: time.sleep(0.005) or b"v", ttl=60)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.stats()["connections"] <= 2
    cache.close()
    with pytest.raises(ValueError):
        xfetch.Cache(server.url, max_connections=0)


def test_decorator_helpers(cache):
    calls = []

    @cache.cached(ttl=60, serializer="json", namespace="t")
    def price(item):
        calls.append(item)
        return {"item": item, "n": len(calls)}

    assert price("a") == {"item": "a", "n": 1}
    assert price.refresh("a") == {"item": "a", "n": 2}
    assert price("a") == {"item": "a", "n": 2}
    price.set({"item": "a", "n": 99}, "a")
    assert price("a") == {"item": "a", "n": 99}
    assert price.original("a") == {"item": "a", "n": 3}


def test_condition_and_ttl_forms(cache, admin, prefix):
    calls = []

    @cache.cached(ttl=datetime.timedelta(seconds=30), condition=lambda r: r != b"partial",
                  namespace="t")
    def page(n):
        calls.append(n)
        return b"partial" if n == 0 else b"full"

    assert page(0) == b"partial" and page(0) == b"partial"
    assert calls == [0, 0], "not cached"
    assert page(1) == b"full" and page(1) == b"full"
    assert calls == [0, 0, 1]

    @cache.cached(ttl=lambda r: 5 if r == b"short" else 50, key="ttl:{n}")
    def lived(n):
        return b"short" if n == 0 else b"long"

    assert lived(0) == b"short" and lived(1) == b"long"
    assert 0 < admin.pttl(prefix + "ttl:0") <= 5000
    assert 5000 < admin.pttl(prefix + "ttl:1") <= 50000


def test_the_package_is_typed():
    import importlib.resources
    import inspect
    assert importlib.resources.files("xfetch").joinpath("py.typed").is_file()
    hints = inspect.get_annotations(xfetch.Cache.get_or_compute, eval_str=True)
    assert hints["return"] is typing.Any  # what the serializer gives back


def test_cached_many_loads_the_missing_ids_in_one_call(cache):
    calls = []

    @cache.cached_many(ttl=60, key="user:{}", serializer="json")
    def users(ids):
        calls.append(sorted(ids))
        return {i: {"id": i} for i in ids if i != 404}

    assert users([1, 2]) == {1: {"id": 1}, 2: {"id": 2}}
    assert users([2, 3, 404, 1]) == {2: {"id": 2}, 3: {"id": 3}, 404: None, 1: {"id": 1}}
    assert calls == [[1, 2], [3, 404]], "one call per batch, with the missing ids only"
    users.invalidate(1)
    assert users([1]) == {1: {"id": 1}}
    assert calls[-1] == [1]
    with pytest.raises(ValueError):
        cache.cached_many(ttl=60, key="user")


def test_a_ttl_callable_or_condition_keeps_early_refresh_and_the_lease(cache, admin, prefix,
                                                                      caplog):
    """The result's ttl and condition= go to the C write (xf_sink_ttl): an
    early refresh writes its value (it was discarded as a "failed" load, with
    a warning), condition=False returns the fresh result uncached (it served
    the old value), and a cold key loads once for 8 callers (the write is
    the lease holder's: no window between a release and a set)."""
    import logging
    import math
    runs = []

    # XFetch in the call: beta decides, the caller sees the refresh
    @cache.cached(ttl=lambda r: 30, beta=math.inf, key="tc", background_refresh=False,
                  refresh_ahead=-1)
    def always_early():
        runs.append(1)
        return b"v%d" % len(runs)

    @cache.cached(ttl=60, beta=math.inf, key="cond", condition=lambda r: r != b"skip",
                  background_refresh=False, refresh_ahead=-1)
    def conditional():
        runs.append(2)
        return b"keep" if runs.count(2) == 1 else b"skip"

    with caplog.at_level(logging.WARNING, logger="xfetch"):
        assert [always_early() for _ in range(3)] == [b"v1", b"v2", b"v3"]
        assert cache.get("tc") == b"v3"
        assert 0 < admin.pttl(prefix + "tc") <= 30000
        assert conditional() == b"keep"
        assert conditional() == b"skip", "the function's result, not cached"
        assert cache.get("cond") == b"keep"
    assert "failed" not in caplog.text
    assert cache.stats()["load_errors"] == 0

    slow_runs = []

    @cache.cached(ttl=lambda r: 60, key="cold")
    def slow():
        slow_runs.append(1)
        time.sleep(0.2)
        return b"s"

    threads = [threading.Thread(target=slow) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(slow_runs) == 1


def test_an_uncached_result_is_not_kept_by_the_share_while_redis_is_down():
    """condition=False (xf_sink_ttl 0) holds while Redis is down too: the
    process share serves a kept value for its ttl, so it must not keep this
    one (it served it, source "local", without calling the function)."""
    cache = xfetch.Cache("redis://127.0.0.1:1/0", lazy_connect=True, breaker=1)
    calls = []

    @cache.cached(ttl=60, condition=lambda r: False, namespace="t")
    def volatile():
        calls.append(1)
        return b"now"

    assert volatile() == b"now" and volatile() == b"now"
    assert len(calls) == 2
    assert cache.stats()["local"] == 0
    cache.close()
