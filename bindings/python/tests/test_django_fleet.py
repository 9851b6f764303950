"""xfetch.contrib.django.XFetchCache in a fleet: get_or_set and add under
concurrency (threads, and two processes: one load for 32 callers where
django-redis loads for each), and the backend over TLS. The migration from
django-redis and the backend on a 3+3 Redis Cluster run under Django's test
runner (test_django_runner.py: djangoproject/tests_migration.py,
tests_cluster.py). Skipped when Django is not installed."""
import threading
import time
import uuid

import redis

from django_races import get_or_set_from_threads
from django_setup import BACKEND, configured, dj, _run_django  # noqa: F401 (dj: a fixture)

from django.core.cache import caches  # noqa: E402

from test_tls import tls  # noqa: E402,F401  (the TLS servers' fixture)


# ---- stampedes ---------------------------------------------------------------------


def test_get_or_set_16_threads_on_a_cold_key_load_once(dj):
    out, loads = get_or_set_from_threads(lambda: caches["default"], "cold")
    # the waiters wait up to 5 s (xfetch's wait) for a 0.3 s load: 16x margin
    assert out == [{"v": 1}] * 16 and len(loads) == 1


def adds_from_threads(key, n=8):
    """n threads add(key, i) at once; returns the i of those that won."""
    barrier = threading.Barrier(n)
    won = []

    def one(i):
        c = caches["default"]
        barrier.wait()
        won.append((c.add(key, i), i))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [i for ok, i in won if ok]


def test_of_many_concurrent_adds_one_wins(dj):
    winners = adds_from_threads("slot")
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


# ---- TLS ---------------------------------------------------------------------------


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
