"""xfetch.contrib.django.XFetchCache: Django's cache API (as Django 3.2
documents it for BaseCache) on a real redis-server, a TLS server and a 3+3
Redis Cluster; get_or_set stampede-safe across threads and processes; the
migration from django-redis on the same Redis; cache_page, template fragment
caching and cache sessions unchanged. Skipped when Django is not installed."""
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import redis

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        SECRET_KEY="xfetch-tests", ALLOWED_HOSTS=["testserver"], USE_TZ=True,
        INSTALLED_APPS=["django.contrib.sessions"],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        SESSION_ENGINE="django.contrib.sessions.backends.cache",
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates"}])
    django.setup()

from django.core.cache import caches  # noqa: E402
from django.core.cache.backends.base import CacheKeyWarning  # noqa: E402
from django.test import override_settings  # noqa: E402

import xfetch  # noqa: E402
import xfetch.testing  # noqa: E402
from isolation import kept  # noqa: E402
from test_tls import tls  # noqa: E402,F401  (the TLS servers' fixture)

BACKEND = "xfetch.contrib.django.XFetchCache"


def configured(**aliases):
    """override_settings(CACHES=...) with each alias' settings; Django drops
    its cache handlers on the change, so caches[alias] is made anew."""
    return override_settings(CACHES={
        alias: dict({"BACKEND": BACKEND}, **conf) for alias, conf in aliases.items()})


@pytest.fixture
def dj(server, admin):
    with configured(default={"LOCATION": server.url, "KEY_PREFIX": "site"}):
        yield caches["default"]


# ---- the API -----------------------------------------------------------------------


def test_values_round_trip_and_misses_return_the_default(dj, admin):
    for value in (1, 2.5, "text", b"bytes", None, [1, {"a": (2, 3)}], {"set": {1, 2}}):
        dj.set("k", value)
        assert dj.get("k", "missing") == value
    assert dj.get("absent") is None
    assert dj.get("absent", "dflt") == "dflt"
    assert admin.exists("site:1:k")  # Django's key: KEY_PREFIX:VERSION:key
    assert "k" in dj and dj.has_key("k") and not dj.has_key("absent")


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


def test_key_function_and_validation(server, admin):
    with configured(default={"LOCATION": server.url, "KEY_PREFIX": "p", "VERSION": 4,
                             "KEY_FUNCTION": lambda key, prefix, version:
                             f"{prefix}/{key}@{version}"}):
        c = caches["default"]
        c.set("k", 1)
        assert admin.exists("p/k@4") and c.get("k") == 1
        with pytest.warns(CacheKeyWarning):
            c.set("a key with spaces", 1)


def test_options_reach_xfetch_and_close_keeps_it_usable(server, admin):
    events = []
    with configured(default={"LOCATION": server.url,
                             "OPTIONS": {"near_cache_bytes": 1 << 20, "on_event": events.append,
                                         "MAX_ENTRIES": 10}}):
        c = caches["default"]
        c.set("k", "v")
        assert c.get("k") == "v" and c.get("k") == "v"
        c.close()  # Django's request_finished: the connections stay pooled
        assert c.get("k") == "v"
        assert c.xfetch.stats()["near_hits"] >= 1
        assert "near" in {e.type for e in events}


def test_a_serializer_option_is_refused(server):
    from django.core.exceptions import ImproperlyConfigured
    with configured(default={"LOCATION": server.url, "OPTIONS": {"serializer": "json"}}):
        with pytest.raises(ImproperlyConfigured, match="pickles"):
            caches["default"]


def test_django_32_has_no_async_methods():
    """Django 4 added aget, aset, ...: where it has them, they are BaseCache's."""
    from django.core.cache.backends.base import BaseCache
    if django.VERSION < (4, 0):
        assert not hasattr(BaseCache, "aget")


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


# ---- stampedes ---------------------------------------------------------------------


def test_get_or_set_16_threads_on_a_cold_key_load_once(dj):
    loads = []

    def load():
        loads.append(1)
        time.sleep(0.3)
        return {"v": 1}
    barrier = threading.Barrier(16)
    out = []

    def one():
        c = caches["default"]  # each thread its own backend, as Django makes them
        barrier.wait()
        out.append(c.get_or_set("cold", load, 60))
    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the waiters wait up to 5 s (xfetch's wait) for a 0.3 s load: 16x margin
    assert out == [{"v": 1}] * 16 and len(loads) == 1


def test_of_many_concurrent_adds_one_wins(dj):
    barrier = threading.Barrier(8)
    won = []

    def one(i):
        c = caches["default"]
        barrier.wait()
        won.append((c.add("slot", i), i))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for ok, i in won if ok]
    assert len(winners) == 1 and dj.get("slot") == winners[0]


STAMPEDE = """
    import threading, time, redis
    from django.core.cache import caches
    url, tag = sys.argv[1], sys.argv[2]
    admin = redis.Redis.from_url(url)

    def load():
        admin.incr(tag + ":loads")
        time.sleep(LOAD_S)
        return {"v": 1}
    out = []

    def one():
        c = caches["default"]
        admin.incr(tag + ":ready")
        while not admin.exists(tag + ":go"):
            time.sleep(0.001)
        out.append(c.get_or_set("cold", load, 60))
    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [{"v": 1}] * 16, out
"""


def _run_django(url, body, backend=BACKEND, args=(), wait=True):
    """A child interpreter with settings.configure(CACHES default = backend
    on url) running body; argv[1] is url."""
    script = textwrap.dedent("""
        import sys, django
        from django.conf import settings
        settings.configure(CACHES={"default": {"BACKEND": %r, "LOCATION": sys.argv[1]}})
        django.setup()
    """ % backend) + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script, url, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stampede(url, backend, load_s):
    """16 threads in each of 2 processes call get_or_set on one cold key at
    once (released together by a key on Redis); returns the loads counted."""
    tag = f"stampede-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(url)
    body = STAMPEDE.replace("LOAD_S", repr(load_s))
    procs = [_run_django(url, body, backend, (tag,), wait=False) for _ in range(2)]
    deadline = time.monotonic() + 60
    while int(admin.get(tag + ":ready") or 0) < 32 and time.monotonic() < deadline:
        time.sleep(0.01)
    admin.set(tag + ":go", 1)
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    return int(admin.get(tag + ":loads") or 0)


def test_get_or_set_is_one_load_across_two_processes(server, admin):
    """xfetch: 1 load for 32 callers in 2 processes. The same harness on
    django-redis' get_or_set (get, compute, add) loads more than once: the
    32 callers are released together and a load takes 1 s, so every caller
    that reads before the first add (1 s later) loads. xfetch's waiters wait
    up to 5 s for a 0.3 s load (16x margin)."""
    loads = stampede(server.url, BACKEND, 0.3)
    print(f"\nget_or_set, 16 threads x 2 processes, one cold key: xfetch {loads} load(s)")
    assert loads == 1
    admin.flushall()
    naive = stampede(server.url, "django_redis.cache.RedisCache", 1.0)
    print(f"django-redis {naive} loads")
    assert naive >= 2


# ---- django-redis on the same Redis ------------------------------------------------


def test_migrating_from_django_redis(server, admin):
    pytest.importorskip("django_redis")
    with configured(default={"LOCATION": server.url, "KEY_PREFIX": "site"},
                    old={"BACKEND": "django_redis.cache.RedisCache",
                         "LOCATION": server.url, "KEY_PREFIX": "site"}):
        c, old = caches["default"], caches["old"]
        old.set("obj", {"a": 1})
        old.set("num", 5)  # django-redis stores ints unpickled
        old.set("gone", "x")
        old.set("added", "x")
        old.set("computed", "x")
        assert admin.exists("site:1:obj")  # the same names as ours
        assert c.get("obj", "dflt") == "dflt" and c.get("num") is None
        assert not c.has_key("obj") and c.get_many(["obj", "num"]) == {}
        assert c.touch("obj", 10) is False
        with pytest.raises(ValueError):
            c.incr("num")
        c.set("obj", {"a": 2})  # an explicit set replaces it
        assert c.get("obj") == {"a": 2}
        assert c.add("added", "mine") is True and c.get("added") == "mine"
        assert c.get_or_set("computed", "ours") == "ours" and c.get("computed") == "ours"
        assert c.delete("gone") is True and not admin.exists("site:1:gone")
        old.set("m1", 1)
        old.set("m2", 2)
        c.set("m3", 3)
        c.delete_many(["m1", "m2", "m3"])
        assert not admin.exists("site:1:m1", "site:1:m2") and c.get("m3") is None
        assert admin.get("site:1:num") == b"5"  # never touched by a read


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


# ---- TLS and Redis Cluster ---------------------------------------------------------


def test_over_tls(tls):
    d, ports = tls
    url = f"rediss://127.0.0.1:{ports['tls']}/0"
    side = redis.Redis(port=ports["tls"], ssl=True, ssl_ca_certs=f"{d}/ca.crt")
    prefix = f"tls{uuid.uuid4().hex[:6]}"
    side.set(f"{prefix}:1:foreign", "x")
    with configured(default={"LOCATION": url, "KEY_PREFIX": prefix,
                             "OPTIONS": {"ssl_ca_certs": f"{d}/ca.crt", "prefix": prefix}}):
        c = caches["default"]
        c.set("k", {"v": 1})
        assert c.get("k") == {"v": 1} and c.get_or_set("g", "x") == "x"
        assert c.get("foreign") is None
        c.set("foreign", "mine")  # removed over TLS, then written
        assert c.get("foreign") == "mine"
        c.clear()
        assert c.get_many(["k", "g", "foreign"]) == {}
    side.close()


@pytest.fixture(scope="module")
def cluster():
    with kept(), xfetch.testing.RedisCluster(masters=3, replicas=1) as c:
        yield c


def test_on_a_redis_cluster_across_slots(cluster):
    from redis.cluster import RedisCluster
    seeds = [f"redis://127.0.0.1:{p}" for p in cluster.ports[:3]]
    rc = RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    prefix = f"c{uuid.uuid4().hex[:6]}"
    rc.set(f"{prefix}:1:foreign", "x")
    with configured(default={"LOCATION": seeds, "KEY_PREFIX": prefix}):
        c = caches["default"]
        data = {f"k{i}": i for i in range(24)}
        masters = {rc.get_node_from_key(f"{prefix}:1:{k}").name for k in data}
        assert len(masters) == 3  # the keys span every master
        c.set_many(data)
        assert c.get_many(list(data) + ["foreign"]) == data
        c.delete_many([f"k{i}" for i in range(12)] + ["foreign"])
        assert c.get_many(list(data)) == {f"k{i}": i for i in range(12, 24)}
        assert not rc.exists(f"{prefix}:1:foreign")
        assert c.get_or_set("g", lambda: "computed") == "computed"
        c.clear()
        assert c.get_many(list(data) + ["g"]) == {}
        assert c.add("k1", "again") is True
    rc.close()


def test_unreadable_values_are_misses(dj, admin):
    """An entry of ours whose bytes do not unpickle (another code version):
    get gives the default, get_or_set computes and overwrites."""
    dj.xfetch.set("site:1:k", b"not a pickle", 60)
    assert dj.get("k", "dflt") == "dflt"
    assert dj.get_or_set("k", "fresh") == "fresh" and dj.get("k") == "fresh"
    assert pickle.loads(dj.xfetch.get("site:1:k")) == "fresh"
