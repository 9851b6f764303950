"""xfetch.contrib.django.XFetchCache on a real redis-server: Django's cache
API as Django 3.2 documents it for BaseCache (values, timeouts, versions, key
functions, OPTIONS), clear() (this backend's namespace only, in every
process), and cache_page, template fragment caching and cache sessions on it
unchanged. Skipped when Django is not installed. Stampedes and TLS:
test_django_fleet.py; the migration from django-redis and Redis Cluster:
test_django_runner.py."""
import asyncio
import pickle
import time

import pytest

from django_setup import configured, dj, django, _run_django  # noqa: F401 (dj: a fixture)

from django.core.cache import caches  # noqa: E402
from django.core.cache.backends.base import CacheKeyWarning  # noqa: E402


# ---- the API -----------------------------------------------------------------------


def test_values_round_trip_and_misses_return_the_default(dj, admin):
    for value in (1, 2.5, "text", b"bytes", None, [1, {"a": (2, 3)}], {"set": {1, 2}}):
        dj.set("k", value)
        assert dj.get("k", "missing") == value
    assert dj.get("absent") is None
    assert dj.get("absent", "dflt") == "dflt"
    assert admin.exists("site:1:k")  # Django's key: KEY_PREFIX:VERSION:key
    assert "k" in dj and dj.has_key("k") and not dj.has_key("absent")


def test_a_missed_read_writes_nothing(dj, admin):
    """get, has_key and get_many of absent keys only read (no lease taken and
    released per key as a get-or-compute would)."""
    dj.get("warm")  # the namespace's version made
    before = admin.info("commandstats")
    for i in range(5):
        assert dj.get(f"absent{i}") is None and not dj.has_key(f"absent{i}")
    after = admin.info("commandstats")
    writes = {k: after[k]["calls"] - before.get(k, {"calls": 0})["calls"] for k in after
              if k.split("_", 1)[1].split("|")[0] in ("set", "del", "evalsha", "setrange")}
    assert not any(writes.values()), writes
    assert admin.keys("site:*") == []


def test_add_stores_only_when_absent(dj):
    assert dj.add("k", "first") is True
    assert dj.add("k", "second") is False
    assert dj.get("k") == "first"
    assert dj.add("none", None) is True and dj.has_key("none")


def test_delete_returns_whether_a_value_was_there(dj):
    dj.set("k", 1)
    assert dj.delete("k") is True
    assert dj.delete("k") is False
    assert dj.get("k") is None


def test_many_keys(dj):
    assert dj.set_many({"a": 1, "b": None, "c": [3]}) == []
    assert dj.get_many(["a", "b", "c", "absent"]) == {"a": 1, "b": None, "c": [3]}
    dj.delete_many(["a", "c", "absent"])
    assert dj.get_many(["a", "b", "c"]) == {"b": None}
    assert dj.get_many([]) == {}


def test_incr_decr_and_versions(dj):
    dj.set("n", 10)
    assert dj.incr("n") == 11 and dj.incr("n", 5) == 16 and dj.decr("n", 6) == 10
    assert dj.get("n") == 10
    with pytest.raises(ValueError):
        dj.incr("absent")
    dj.set("v", "one", version=2)
    assert dj.get("v") is None and dj.get("v", version=2) == "one"
    assert dj.incr_version("v", version=2) == 3
    assert dj.get("v", version=3) == "one" and dj.get("v", version=2) is None


def test_get_or_set(dj):
    assert dj.get_or_set("k", "v") == "v"
    assert dj.get_or_set("k", "other") == "v"
    calls = []
    assert dj.get_or_set("c", lambda: calls.append(1) or {"x": 1}) == {"x": 1}
    assert dj.get_or_set("c", lambda: calls.append(1) or {"x": 2}) == {"x": 1}
    assert calls == [1]
    assert dj.get_or_set("none", lambda: None) is None and dj.has_key("none")


class Unpicklable:
    def __reduce__(self):
        raise pickle.PickleError("no")


def test_edges_django_documents(dj):
    dj.set_many({"a": 1, "b": 2})
    assert dj.get_many(iter(["a", "b", "absent"])) == {"a": 1, "b": 2}  # any iterable
    dj.set("null", None)
    with pytest.raises(TypeError):
        dj.incr("null")  # None + 1
    for call in (lambda: dj.set("u", Unpicklable()), lambda: dj.add("u", Unpicklable()),
                 lambda: dj.set_many({"u": Unpicklable()})):
        with pytest.raises(pickle.PickleError):
            call()
    assert not dj.has_key("u")
    blob = bytes(range(256)) * 40
    dj.set("blob", blob, 100.5)  # a float timeout
    assert dj.get("blob") == blob
    dj.set("Iñtërnâtiônàlizætiøn", "ünïcode")
    assert dj.get("Iñtërnâtiônàlizætiøn") == "ünïcode"
    dj.delete_many([])
    assert dj.set_many({}) == []
    with pytest.raises(TypeError):
        dj.get_or_set("no default")  # default is required, as in BaseCache
    dj.set_many({"x": 1, "y": 2}, timeout=1)
    time.sleep(1.5)  # a 1 s timeout, read 0.5 s past it (a sleep never returns early)
    assert dj.get_many(["x", "y"]) == {} and dj.add("x", "again") is True


def test_touch(dj, admin):
    dj.set("k", "v", timeout=10)
    assert dj.touch("k", 100) is True
    assert 90_000 < admin.pttl("site:1:k") <= 100_000  # 10 s of margin for a stall
    assert dj.touch("absent", 100) is False
    assert dj.touch("k", None) is True
    assert admin.pttl("site:1:k") > 30 * 365 * 86400 * 1000  # None: forever (34 years)
    assert dj.touch("k", 0) is True and dj.get("k") is None


def test_timeouts_have_djangos_meaning(server, admin):
    with configured(default={"LOCATION": server.url, "TIMEOUT": 30}):
        c = caches["default"]
        c.set("default", 1)
        # TIMEOUT; the margin (10 s) covers a stall between the set and the PTTL
        assert 20_000 < admin.pttl(":1:default") <= 30_000
        c.set("five", 1, timeout=5)
        assert 0 < admin.pttl(":1:five") <= 5_000
        c.set("forever", 1, timeout=None)
        assert admin.pttl(":1:forever") > 30 * 365 * 86400 * 1000  # xfetch's longest
        for zero in (0, -1):  # expire at once: set removes, add and get_or_set store nothing
            c.set("five", 1, timeout=zero)
            assert c.get("five") is None  # deleted (xfetch leaves a short tombstone)
            assert c.add("zero", 1, timeout=zero) is True and not c.has_key("zero")
            assert c.get_or_set("zero", lambda: "computed", timeout=zero) == "computed"
            assert not c.has_key("zero")
        c.set("short", 1, timeout=1)
        time.sleep(1.5)  # a 1 s timeout, read 0.5 s past it (a sleep never returns early)
        assert c.get("short", "gone") == "gone"
    with configured(default={"LOCATION": server.url, "TIMEOUT": None}):
        caches["default"].set("k", 1)
        assert admin.pttl(":1:k") > 30 * 365 * 86400 * 1000


@pytest.mark.parametrize("where", ["unix", "list"])
def test_locations(server, admin, where):
    """LOCATION: a unix:// URL, or a list of seeds (here one server's); a key
    another program wrote is replaced through the same place."""
    location = server.unix_url if where == "unix" else [f"127.0.0.1:{server.port}"]
    admin.set(":1:foreign", "x")
    with configured(default={"LOCATION": location}):
        c = caches["default"]
        c.set("k", where)
        assert c.get("k") == where and admin.exists(":1:k")
        c.set("foreign", where)
        assert c.get("foreign") == where


def test_key_function_and_validation(server, admin):
    with configured(default={"LOCATION": server.url, "KEY_PREFIX": "p", "VERSION": 4,
                             "KEY_FUNCTION": lambda key, prefix, version:
                             f"{prefix}/{key}@{version}"}):
        c = caches["default"]
        c.set("k", 1)
        assert admin.exists("p/k@4") and c.get("k") == 1
        with pytest.warns(CacheKeyWarning):
            c.set("a key with spaces", 1)


@pytest.mark.parametrize("key, warns", [
    ("plain:key-1", False), ("Iñtërnâtiônàlizætiøn", False), ("\u2028line", False),
    ("x" * 240, False), ("x" * 251, True), ("a space", True), ("tab\there", True),
    ("del\x7f", True), ("nul\x00", True)])
def test_keys_warn_as_djangos_validate_key_says(dj, key, warns):
    """The backend skips Django's per-character check for a key it cannot
    warn about, and warns (CacheKeyWarning) for every key Django's does."""
    import warnings
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        dj.set(key, 1)
        assert dj.get(key) == 1
    assert any(issubclass(w.category, CacheKeyWarning) for w in got) == warns


def test_a_subclass_validate_key_is_called_for_every_key(server):
    from xfetch.contrib.django import XFetchCache
    seen = []

    class Strict(XFetchCache):
        def validate_key(self, key):
            seen.append(key)
    c = Strict(server.url, {"KEY_PREFIX": "strict"})
    c.set("k", 1)
    assert c.get("k") == 1 and seen == ["strict:1:k", "strict:1:k"]


def test_options_reach_xfetch_and_close_keeps_it_usable(server, admin):
    events = []
    with configured(default={"LOCATION": server.url,
                             "OPTIONS": {"near_cache_bytes": 1 << 20, "on_event": events.append,
                                         "MAX_ENTRIES": 10}}):
        c = caches["default"]
        c.set("k", "v")
        c.close()  # Django's request_finished: the connections stay pooled
        # read until a near hit, within a bound: a hit goes to Redis while
        # invalidations wait to be read (a loaded machine)
        deadline = time.monotonic() + 5
        while c.xfetch.stats()["near_hits"] == 0:
            assert c.get("k") == "v"
            assert time.monotonic() < deadline, "never a near hit"
            time.sleep(0.001)
        assert "near" in {e.type for e in events}


def test_a_serializer_option_is_refused(server):
    from django.core.exceptions import ImproperlyConfigured
    with configured(default={"LOCATION": server.url, "OPTIONS": {"serializer": "json"}}):
        with pytest.raises(ImproperlyConfigured, match="pickles"):
            caches["default"]


def test_django_32_has_no_async_methods():
    """Django 4 added aget, aset, ...: where it has them, they are BaseCache's
    (but aget_or_set, below)."""
    from django.core.cache.backends.base import BaseCache
    if django.VERSION < (4, 0):
        assert not hasattr(BaseCache, "aget")


def test_aget_or_set_by_16_tasks_on_a_cold_key_loads_once(dj):
    """BaseCache.aget_or_set (Django 4+) is aget, default(), aadd: every
    caller that misses loads. The backend's is its get_or_set, run in a
    thread: one load."""
    loads = []

    def load():
        loads.append(1)
        time.sleep(0.3)
        return {"v": 1}

    async def main():
        return await asyncio.gather(*(dj.aget_or_set("cold", load, 60) for _ in range(16)))
    # the waiters wait up to 5 s (xfetch's wait) for a 0.3 s load: 16x margin
    assert asyncio.run(main()) == [{"v": 1}] * 16 and len(loads) == 1
    assert asyncio.run(dj.aget_or_set("cold", "other")) == {"v": 1}


# ---- clear -------------------------------------------------------------------------


def test_clear_invalidates_only_this_backends_entries(server, admin):
    admin.set("someone-else", "keep")
    with configured(default={"LOCATION": server.url},
                    other={"LOCATION": server.url, "OPTIONS": {"prefix": "other:"}}):
        c, other = caches["default"], caches["other"]
        c.set_many({"a": 1, "b": 2})
        other.set("a", "o")
        c.clear()
        assert c.get_many(["a", "b"]) == {} and not c.has_key("a")
        assert c.get_or_set("a", "new") == "new"  # cleared: a miss, computed again
        assert admin.get("someone-else") == b"keep"
        assert other.get("a") == "o"  # another namespace (OPTIONS prefix)
        c.set("b", 3)
        assert c.get("b") == 3


def test_clear_reaches_another_process(server, admin):
    """clear() in one process; the other's next read misses (the namespace's
    version is on Redis, read by every call)."""
    with configured(default={"LOCATION": server.url}):
        c = caches["default"]
        c.set("k", "v")
        assert c.get("k") == "v"
        out = _run_django(server.url, """
            from django.core.cache import cache
            cache.clear()
        """)
        assert out.returncode == 0, out.stderr
        assert c.get("k") is None


# ---- Django features on the backend ------------------------------------------------


def test_cache_page(dj):
    from django.http import HttpResponse
    from django.test import RequestFactory
    from django.views.decorators.cache import cache_page
    calls = []

    @cache_page(60)
    def view(request):
        calls.append(1)
        return HttpResponse(f"page {len(calls)}")
    rf = RequestFactory()
    assert view(rf.get("/p")).content == b"page 1"
    assert view(rf.get("/p")).content == b"page 1"
    assert view(rf.get("/q")).content == b"page 2"
    assert calls == [1, 1]


def test_template_fragment_caching(dj):
    from django.core.cache.utils import make_template_fragment_key
    from django.template import Context, Template
    t = Template("{% load cache %}{% cache 60 sidebar who %}[{{ value }}]{% endcache %}")
    assert t.render(Context({"who": "ann", "value": 1})) == "[1]"
    assert t.render(Context({"who": "ann", "value": 2})) == "[1]"
    assert t.render(Context({"who": "bob", "value": 3})) == "[3]"
    dj.delete(make_template_fragment_key("sidebar", ["ann"]))
    assert t.render(Context({"who": "ann", "value": 4})) == "[4]"


def test_cache_sessions(dj):
    from django.contrib.sessions.backends.cache import SessionStore
    s = SessionStore()
    s["cart"] = [1, 2]
    s.save()
    key = s.session_key
    assert SessionStore(key)["cart"] == [1, 2]
    assert s.exists(key)
    s.cycle_key()
    assert not s.exists(key) and SessionStore(s.session_key)["cart"] == [1, 2]
    s.flush()
    assert SessionStore(s.session_key).get("cart") is None


def test_unreadable_values_are_misses(dj, admin):
    """An entry of ours whose bytes do not unpickle (another code version):
    get gives the default, get_or_set computes and overwrites."""
    dj.xfetch.set("site:1:k", b"not a pickle", 60)
    assert dj.get("k", "dflt") == "dflt"
    assert dj.get_or_set("k", "fresh") == "fresh" and dj.get("k") == "fresh"
    assert pickle.loads(dj.xfetch.get("site:1:k")) == "fresh"
