"""Issue 10's defects, each reproduced: methods, canonical keys, pickling,
str subclasses, async functions, serializer changes, negative_ttl with a
serializer, loaders slower than their lease."""
import concurrent.futures
import datetime
import enum
import logging
import os
import pathlib
import pickle
import subprocess
import sys
import threading
import time

import pytest

import xfetch
from conftest import peek


# ---- 1. methods: self and cls are not part of the key ----------------------

class Repo:
    calls = 0

    def __init__(self, cache):
        self.cache = cache

    def load(self, user_id):
        Repo.calls += 1
        return b"user %d" % user_id


def test_a_method_shares_its_entry_across_instances(cache):
    Repo.calls = 0

    class Users(Repo):
        @cache.cached(ttl=60, namespace="t")
        def get(self, user_id):
            return self.load(user_id)

        @classmethod
        @cache.cached(ttl=60, namespace="t")
        def count(cls, kind):
            return b"%d" % len(kind)

    a, b = Users(cache), Users(cache)
    assert a.get(1) == b"user 1"
    assert b.get(1) == b"user 1"
    assert Repo.calls == 1, "one entry for every instance"
    assert "0x" not in a.get.key(1), a.get.key(1)
    assert a.get.key(1) == b.get.key(1)
    a.get.invalidate(1)
    assert b.get(1) == b"user 1" and Repo.calls == 2
    assert Users.count("abc") == b"3"
    # issue 17: cls is keyed (the class called on), self is not
    assert Users.count.key("abc").endswith(".Users.count(cls=test_defects."
                                           "test_a_method_shares_its_entry_across_instances."
                                           "<locals>.Users, kind='abc')")


def test_the_decorator_goes_above_classmethod_and_staticmethod_too(cache):
    calls = []

    class Units:
        @cache.cached(ttl=60, namespace="t")
        @classmethod
        def of(cls, kind):
            calls.append((cls, kind))
            return kind.encode()

        @cache.cached(ttl=60, namespace="t")
        @staticmethod
        def twice(n):
            calls.append(n)
            return b"%d" % (2 * n)

    assert Units.of("m") == b"m" and Units().of("m") == b"m"
    assert calls == [(Units, "m")], "one class: one entry, by instance or by class"
    assert Units.of.key("m").endswith("<locals>.Units, kind='m')")  # issue 17: cls keyed
    assert Units.twice(2) == b"4" and Units().twice(2) == b"4"
    assert calls[1:] == [2]
    with pytest.raises(TypeError, match="xfetch.aio"):
        class Later:
            @cache.cached(ttl=60)
            @staticmethod
            async def f():
                return b"x"


# ---- 2. canonical keys --------------------------------------------------------

_KEY_SCRIPT = r"""
import sys, xfetch
from xfetch._keys import _key_builder
def f(tags, **options): pass
make = _key_builder(f, None)
print(make({"b", "a", "c", "d"}, z=1, a=frozenset({"x", "y"}), m={"k2": 1, "k1": {3, 2, 1}}))
print(make(tags={"d", "c", "b", "a"}, m={"k1": {1, 2, 3}, "k2": 1}, a=frozenset({"y", "x"}), z=1))
"""


def test_default_keys_are_the_same_in_every_process():
    keys = set()
    for seed in ("1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", _KEY_SCRIPT], capture_output=True,
                             text=True, env=dict(os.environ, PYTHONHASHSEED=seed), check=True)
        lines = out.stdout.split("\n")[:2]
        assert lines[0] == lines[1], "kwargs order and set order do not matter"
        keys.add(lines[0])
    assert len(keys) == 1, keys


def test_arguments_without_a_stable_key_are_refused_at_call_time(cache):
    @cache.cached(ttl=60, namespace="t")
    def f(obj):
        return b"x"

    with pytest.raises(TypeError, match="cannot be part of a cache key"):
        f(object())
    with pytest.raises(TypeError, match="cannot be part of a cache key"):
        f([lambda: 1])

    class Zone(datetime.tzinfo):  # no __repr__: its repr shows its address
        def utcoffset(self, dt):
            return datetime.timedelta(0)

    with pytest.raises(TypeError, match="cannot be part of a cache key"):
        f(datetime.datetime(2026, 1, 1, tzinfo=Zone()))
    utc = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    assert f.key(utc).endswith("f(obj=datetime.datetime(2026, 1, 1, 0, 0, "
                               "tzinfo=datetime.timezone.utc))")
    assert f.key(pathlib.PurePosixPath("/srv/a")).endswith("(obj=PurePosixPath('/srv/a'))")


# ---- 3. exceptions pickle ---------------------------------------------------------

def _raise_from_worker(url):
    cache = xfetch.Cache(url)
    cache.set("k", b"v", ttl=60)
    raise xfetch.ConnectionError(-3, "connect to nowhere")


def _error_classes():
    todo, out = [xfetch.Error], []
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_every_error_class_is_exported_and_pickles():
    classes = _error_classes()
    assert len(classes) >= 16
    for cls in classes:
        assert getattr(xfetch, cls.__name__) is cls and cls.__name__ in xfetch.__all__
        for code in (-3, -5):
            e = cls(code, "detail")
            back = pickle.loads(pickle.dumps(e))
            assert type(back) is cls
            assert (back.code, back.message, str(back)) == (e.code, e.message, str(e))


def test_an_error_in_a_process_pool_worker_reaches_the_caller(server):
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        with pytest.raises(xfetch.ConnectionError) as info:
            pool.submit(_raise_from_worker, server.url).result()
    assert info.value.message == "connect to nowhere"


# ---- 4. str subclasses --------------------------------------------------------------

class Color(str, enum.Enum):
    RED = "red"


class SafeString(str):
    pass


def test_str_subclasses_are_keys(cache, counter):
    load = counter(b"v")
    assert cache.get_or_compute(SafeString("k1"), load, ttl=60) == b"v"
    assert cache.get_or_compute("k1", load, ttl=60) == b"v"
    assert load.calls == 1, "the same key as the plain str"
    assert cache.get_or_compute(Color.RED, load, ttl=60) == b"v"
    assert cache.get_or_compute("red", load, ttl=60) == b"v"
    assert load.calls == 2
    if hasattr(enum, "StrEnum"):  # Python 3.11+
        Shade = enum.StrEnum("Shade", {"DARK": "dark"})
        assert cache.get_or_compute(Shade.DARK, load, ttl=60) == b"v"
        assert cache.get_or_compute("dark", load, ttl=60) == b"v"
        assert load.calls == 3

        @cache.cached(ttl=60, key="shade:{s}")
        def shade(s):
            return s.encode()

        assert shade(Shade.DARK) == b"dark"
        assert shade.key(Shade.DARK) == "shade:dark"


# ---- 5. async functions and key templates, at decoration ------------------------------

def test_an_async_function_is_refused_at_decoration(cache):
    with pytest.raises(TypeError, match="xfetch.aio"):
        @cache.cached(ttl=60)
        async def f():
            return b"x"


def test_a_key_template_naming_no_argument_is_refused_at_decoration(cache):
    with pytest.raises(ValueError, match="user_idd"):
        @cache.cached(ttl=60, key="user:{user_idd}")
        def f(user_id):
            return b"x"


# ---- 6. a value the serializer cannot read is a miss ----------------------------------

def test_changing_the_serializer_reloads_instead_of_failing(cache, caplog):
    calls = []

    def make(serializer):
        @cache.cached(ttl=60, serializer=serializer, key="report")
        def report():
            calls.append(serializer)
            return {"n": 1}
        return report

    assert make("pickle")() == {"n": 1}
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        assert make("json")() == {"n": 1}
    assert calls == ["pickle", "json"]
    assert "could not be decoded" in caplog.text
    assert make("json")() == {"n": 1}
    assert calls == ["pickle", "json"], "the entry was overwritten in the new format"


def test_an_undecodable_hot_key_is_reloaded_once_not_by_every_caller(cache, caplog):
    """After a serializer change, the callers that find the old format do not
    each run the function: one reloads under the lease, the others wait for
    its value (before: 8 callers, 8 loads)."""
    calls = []

    @cache.cached(ttl=60, serializer="json", key="hot")
    def hot():
        calls.append(1)
        time.sleep(0.2)
        return {"n": 1}

    cache.set("hot", pickle.dumps({"n": 0}), ttl=60)
    out = []
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        threads = [threading.Thread(target=lambda: out.append(hot())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert out == [{"n": 1}] * 8
    assert len(calls) <= 2, f"{len(calls)} loads for 8 callers"
    assert "could not be decoded" in caplog.text


def test_namespace_and_version_move_to_fresh_keys(cache):
    @cache.cached(ttl=60, namespace="billing", version=2)
    def total(n):
        return b"%d" % n

    assert total.key(3).startswith("billing:")
    assert total.key(3).endswith("#v2")
    assert total(3) == b"3"

    @cache.cached(ttl=60, key=lambda n: b"raw\xff%d" % n, namespace="ns", version=1)
    def raw(n):
        return b"%d" % n

    assert raw.key(4) == b"ns:raw\xff4#v1"
    assert raw(4) == b"4" and cache.get(b"ns:raw\xff4#v1") == b"4"


# ---- 7. negative_ttl with a serializer; loaders slower than the lease ----------------

def test_none_with_a_serializer_is_not_found_and_follows_negative_ttl(cache, admin, prefix):
    calls = []

    @cache.cached(ttl=60, serializer="json", key="missing", negative_ttl=0.2)
    def missing():
        calls.append(1)
        return None

    assert missing() is None
    assert missing() is None
    assert len(calls) == 1
    assert peek(admin, prefix + "missing").n, "a not-found entry"
    assert admin.pttl(prefix + "missing") <= 200 + 60000  # not-found, not a 60 s value
    time.sleep(0.3)
    assert missing() is None
    assert len(calls) == 2, "reloaded after negative_ttl"


def test_a_loader_slower_than_its_lease_is_logged(cache, caplog):
    """Without renewals (max_load at most the lease), a loader slower than
    its lease loses it: logged. (With them, the default, it keeps it:
    test_loadctl.py.)"""
    loads = []

    def slow():
        loads.append(1)
        time.sleep(0.3)
        return b"v"

    with caplog.at_level(logging.WARNING, logger="xfetch"):
        threads = [threading.Thread(target=cache.get_or_compute, args=("slow", slow),
                                    kwargs=dict(ttl=60, lease=0.1, wait=2, max_load=0.1))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(loads) > 1, "the lease ran out: other callers loaded too"
    assert "longer than its lease" in caplog.text


def test_helpers_of_a_bound_method_bind_self(cache):
    """obj.method.refresh(1) and obj.method.set(v, 1) act for obj (the key
    still leaves self out), as .key/.invalidate already did."""
    calls = []

    class Prices:
        def __init__(self, rate):
            self.rate = rate

        @cache.cached(ttl=60, serializer="json", namespace="t")
        def price(self, item):
            calls.append(item)
            return {"item": item, "rate": self.rate}

    a = Prices(2)
    assert a.price("x") == {"item": "x", "rate": 2}
    assert a.price.refresh("x") == {"item": "x", "rate": 2}, "refresh gets self"
    assert calls == ["x", "x"]
    a.price.set({"item": "x", "rate": 9}, "x")
    assert Prices(3).price("x") == {"item": "x", "rate": 9}, "one entry for every instance"
    assert a.price.original("y") == {"item": "y", "rate": 2}, "original is bound too"
    assert Prices.price.refresh(a, "x") == {"item": "x", "rate": 2}, "unbound: pass self"
    assert a.price.key("x") == Prices.price.key("x")
    assert a.price.__name__ == "price" and a.price.__self__ is a


def test_a_decorated_function_slower_than_its_lease_gets_a_longer_lease(cache, caplog):
    """The decorator learns how long its function runs and leases for at least
    twice that: without renewals (max_load at most the lease), the first cold
    load ran out of its lease (loads > 1, logged), the next one is loaded once
    by 8 callers. The first cold load is held until another caller loads
    too (up to 5 s, against its 0.1 s lease), so a busy machine that starts
    the other callers late cannot make it look protected."""
    loads = []
    taken_over = threading.Event()

    @cache.cached(ttl=60, key="slow:{n}", lease=0.1, wait=2, max_load=0.1)
    def slow(n):
        loads.append(n)
        if n == 1 and loads.count(1) == 1:
            taken_over.wait(5)
        elif n == 1:
            taken_over.set()
        time.sleep(0.3)
        return b"v"

    def stampede(n):
        threads = [threading.Thread(target=slow, args=(n,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    with caplog.at_level(logging.WARNING, logger="xfetch"):
        stampede(1)
    assert loads.count(1) > 1, "the lease ran out: other callers loaded too"
    assert "longer than its lease" in caplog.text
    stampede(2)
    assert loads.count(2) == 1, f"{loads.count(2)} loads with the learned lease"


def test_cached_many_takes_namespace_and_version_and_reloads_undecodable_ids(cache, caplog):
    calls = []

    def make(serializer):
        @cache.cached_many(ttl=60, key="user:{}", serializer=serializer, namespace="app",
                           version=3)
        def users(ids):
            calls.append(sorted(ids))
            return {i: {"id": i} for i in ids}
        return users

    users = make("pickle")
    assert users.key(7) == "app:user:7#v3"
    assert users([1, 2]) == {1: {"id": 1}, 2: {"id": 2}}
    cache.set(users.key(3), b"\x80not json", ttl=60)
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        assert make("json")([1, 3]) == {1: {"id": 1}, 3: {"id": 3}}
    assert "could not be decoded" in caplog.text
    assert calls == [[1, 2], [1, 3]], "the undecodable ids reloaded in one call"
    assert make("json")([1, 3]) == {1: {"id": 1}, 3: {"id": 3}}
    assert calls == [[1, 2], [1, 3]], "overwritten in the new format"


def test_cached_many_on_a_method(cache):
    calls = []

    class Users:
        def __init__(self, source):
            self.source = source

        @cache.cached_many(ttl=60, key="u:{}", serializer="json")
        def load(self, ids):
            calls.append(sorted(ids))
            return {i: {"id": i, "from": self.source} for i in ids}

    assert Users("a").load([1, 2]) == {1: {"id": 1, "from": "a"}, 2: {"id": 2, "from": "a"}}
    assert Users("b").load([2, 3]) == {2: {"id": 2, "from": "a"}, 3: {"id": 3, "from": "b"}}
    assert calls == [[1, 2], [3]]
    Users("c").load.invalidate(2)
    assert Users("c").load([2]) == {2: {"id": 2, "from": "c"}}


def test_refresh_follows_condition(cache):
    @cache.cached(ttl=60, key="c:{n}", condition=lambda r: r["ok"])
    def f(n):
        return {"ok": n > 0}

    assert f.refresh(0) == {"ok": False}
    assert cache.get("c:0") is None, "a result condition refuses is not cached by refresh"
    assert f.refresh(1) == {"ok": True}
    assert cache.get("c:1") == {"ok": True}


def test_a_ttl_callable_returning_0_or_none_does_not_cache(cache):
    calls = []

    @cache.cached(ttl=lambda r: r["ttl"], serializer="json", key="t:{n}")
    def f(n):
        calls.append(n)
        return {"ttl": [None, 0, 60][n]}

    for n in (0, 1):
        assert f(n) == {"ttl": [None, 0][n]}
        assert cache.get(f.key(n)) is None
    assert f(2) == {"ttl": 60} and f(2) == {"ttl": 60}
    assert calls == [0, 1, 2]


def test_a_ttl_callable_keeps_the_stampede_protection(cache, admin, prefix):
    """With ttl computed from the result, 8 callers on a cold key still load
    once (the loader wrote nothing before: every waiter then loaded)."""
    calls = []

    @cache.cached(ttl=lambda r: r["ttl"], serializer="json", key="tc")
    def f():
        calls.append(1)
        time.sleep(0.2)
        return {"ttl": 30}

    out = []
    threads = [threading.Thread(target=lambda: out.append(f())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [{"ttl": 30}] * 8
    assert len(calls) == 1, f"{len(calls)} loads for 8 callers"
    assert 25000 < admin.pttl(prefix + "tc") <= 30000, "the entry lives for the computed ttl"


_LAZY = xfetch.Cache("redis://127.0.0.1:1", lazy_connect=True)  # never used for I/O here


class Pickled:
    def __init__(self, n):
        self.n = n

    @_LAZY.cached(ttl=60)
    def get(self, x):
        return b"%d" % (self.n + x)


def test_a_cached_method_pickles_by_name():
    """Like a plain method (a ProcessPoolExecutor sends obj.method by name)."""
    bound = pickle.loads(pickle.dumps(Pickled(2).get))
    assert bound.__self__.n == 2 and bound.__func__ is Pickled.__dict__["get"]
    assert pickle.loads(pickle.dumps(Pickled.get)) is Pickled.get
    assert bound.original(1) == b"3"


def test_a_loader_slower_than_its_lease_keeps_protection_once_its_time_is_known(cache,
                                                                                 caplog):
    """The lease taken is twice the entry's delta (the last load time) when
    that is longer than lease=: once a slow load is cached, 8 callers of the
    expired key load it once (the lease of 0.1 s alone would let a waiter
    take the key over every 0.1 s of the 1 s load). Margins for a busy
    machine: the 2 s lease leaves the load 1 s to be written, the 3 s wait
    leaves the waiters 2 s to read it (a 0.3 s load left 0.3 s)."""
    loads = []

    def slow():
        loads.append(1)
        time.sleep(1.0)
        return b"v"

    # stale_if_error keeps the expired entry, and its delta, on Redis.
    policy = dict(ttl=0.5, lease=0.1, wait=3, stale_if_error=30)
    assert cache.get_or_compute("slow2", slow, **policy) == b"v"
    time.sleep(0.55)
    del loads[:]
    results = []
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        threads = [threading.Thread(target=lambda: results.append(
            cache.fetch("slow2", slow, **policy))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(loads) == 1
    assert sorted(r.source for r in results) == ["cache"] * 7 + ["loader"]
    assert "longer than its lease" not in caplog.text, "protected: nothing to warn about"
