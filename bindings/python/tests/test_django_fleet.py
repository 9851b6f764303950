"""xfetch.contrib.django.XFetchCache in a fleet: get_or_set and add under
concurrency (threads, and two processes: one load for 32 callers where
django-redis loads for each), the migration from django-redis on the same
Redis (its keys read as misses, a write replaces them), and the backend over
TLS and on a 3+3 Redis Cluster (many keys across slots, clear). Skipped when
Django is not installed."""
import threading
import time
import uuid

import pytest
import redis

from django_setup import BACKEND, configured, dj, _run_django  # noqa: F401 (dj: a fixture)

from django.core.cache import caches  # noqa: E402

import xfetch.testing  # noqa: E402
from isolation import kept  # noqa: E402
from test_tls import tls  # noqa: E402,F401  (the TLS servers' fixture)


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
