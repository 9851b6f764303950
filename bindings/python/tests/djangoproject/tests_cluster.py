"""The backend on a 3+3 Redis Cluster as a Django project's tests see it
(settings_cluster, LOCATION: the cluster's seeds), run by Django's test
runner beside tests.py's BaseCache tests: each key operation on keys of
every master, the many-key operations and clear() on keys spread over every
master, one load for 16 threads, and cache_page, template fragments and
cache sessions whose entries land on every master."""
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.sessions.backends.cache import KEY_PREFIX as SESSION_PREFIX
from django.contrib.sessions.backends.cache import SessionStore
from django.core.cache import cache
from django.core.cache.utils import make_template_fragment_key
from django.http import HttpResponse
from django.template import Context, Template
from django.test import RequestFactory, SimpleTestCase
from django.views.decorators.cache import cache_page
from redis.cluster import ClusterNode, RedisCluster

from django_races import get_or_set_from_threads  # tests/ is on the runner's PYTHONPATH


class OnTheCluster(SimpleTestCase):
    """setUp clears the backend; self.rc is a redis-py client of the same
    cluster, to see where entries live."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        seeds = [urlsplit(s) for s in settings.CACHES["default"]["LOCATION"]]
        cls.rc = RedisCluster(startup_nodes=[ClusterNode(s.hostname, s.port) for s in seeds])
        cls.masters = {n.name for n in cls.rc.get_primaries()}
        assert len(cls.masters) == 3, cls.masters

    @classmethod
    def tearDownClass(cls):
        cls.rc.close()
        super().tearDownClass()

    def setUp(self):
        cache.clear()

    def master_of(self, key):
        """The master that holds the backend's key (a Django key)."""
        return self.rc.get_node_from_key(cache.make_key(key)).name

    def keys_on_every_master(self, per_master):
        """Django keys "k0", "k1", ...: per_master of them on each master."""
        by_master = {m: [] for m in self.masters}
        i = 0
        while min(len(ks) for ks in by_master.values()) < per_master:
            key = f"k{i}"
            if len(by_master[self.master_of(key)]) < per_master:
                by_master[self.master_of(key)].append(key)
            i += 1
        return [k for ks in by_master.values() for k in ks]

    def masters_holding(self, pattern):
        """The masters holding a key that matches pattern (Redis KEYS)."""
        return {n.name for n in self.rc.get_primaries()
                if self.rc.keys(pattern, target_nodes=n)}


class KeyOperationsTests(OnTheCluster):
    def test_each_key_operation_on_every_master(self):
        keys = self.keys_on_every_master(2)
        for key in keys:
            node = self.rc.get_node_from_key(cache.make_key(key))
            self.assertEqual(cache.get(key, "dflt"), "dflt")
            self.assertFalse(cache.has_key(key))
            self.assertTrue(cache.add(key, {"k": key}))
            self.assertFalse(cache.add(key, "second"))
            self.assertTrue(node.redis_connection.exists(cache.make_key(key)))  # on its master
            self.assertEqual(cache.get(key), {"k": key})
            self.assertTrue(cache.has_key(key))
            self.assertTrue(cache.touch(key, 100))
            cache.set(key, 10)
            self.assertEqual(cache.incr(key, 5), 15)
            self.assertEqual(cache.decr(key, 6), 9)
            self.assertEqual(cache.get_or_set(key, "other"), 9)
            self.assertTrue(cache.delete(key))
            self.assertFalse(cache.delete(key))
            self.assertFalse(cache.touch(key, 100))
            with self.assertRaises(ValueError):
                cache.incr(key)
            calls = []
            self.assertEqual(cache.get_or_set(key, lambda: calls.append(1) or key), key)
            self.assertEqual(cache.get_or_set(key, lambda: calls.append(1) or "x"), key)
            self.assertEqual(calls, [1])

    def test_get_or_set_by_16_threads_on_a_cold_key_loads_once(self):
        out, loads = get_or_set_from_threads(lambda: cache, "cold")
        # the waiters wait up to 5 s (xfetch's wait) for a 0.3 s load: 16x margin
        self.assertEqual(out, [{"v": 1}] * 16)
        self.assertEqual(len(loads), 1)


class ManyKeysTests(OnTheCluster):
    def test_set_get_and_delete_many_across_every_master(self):
        keys = self.keys_on_every_master(8)
        data = {k: [k] for k in keys}
        self.rc.set(cache.make_key("foreign"), "another program's")
        self.assertEqual(cache.set_many(data), [])
        self.assertEqual(cache.get_many(keys + ["foreign", "absent"]), data)
        gone = keys[::2]  # every master keeps some and loses some
        cache.delete_many(gone + ["foreign"])
        self.assertEqual(cache.get_many(keys), {k: [k] for k in keys[1::2]})
        self.assertFalse(self.rc.exists(cache.make_key("foreign")))
        self.assertEqual(cache.set_many(data, version=2), [])
        self.assertEqual(cache.get_many(keys, version=2), data)

    def test_clear_across_every_master(self):
        keys = self.keys_on_every_master(4)
        for k in keys:
            self.rc.set(f"someone-else:{k}", "keep")
        cache.set_many({k: k for k in keys})
        cache.clear()
        self.assertEqual(cache.get_many(keys), {})
        self.assertFalse(any(cache.has_key(k) for k in keys))
        self.assertTrue(all(cache.add(k, "again") for k in keys))
        self.assertEqual(cache.get_many(keys), {k: "again" for k in keys})
        self.assertTrue(all(self.rc.get(f"someone-else:{k}") == b"keep" for k in keys))
        self.rc.delete(*[f"someone-else:{k}" for k in keys])


class FeatureTests(OnTheCluster):
    def test_cache_page_on_every_master(self):
        calls = []

        @cache_page(60)
        def view(request):
            calls.append(request.path)
            return HttpResponse(f"page {request.path} {len(calls)}")
        rf = RequestFactory()
        paths = [f"/p{i}" for i in range(12)]
        first = [view(rf.get(p)).content for p in paths]
        self.assertEqual([view(rf.get(p)).content for p in paths], first)
        self.assertEqual(calls, paths)
        self.assertEqual(self.masters_holding("runner:1:views.decorators.cache.*"),
                         self.masters)

    def test_template_fragments_on_every_master(self):
        t = Template("{% load cache %}{% cache 60 card who %}[{{ who }} {{ n }}]{% endcache %}")
        people = [f"p{i}" for i in range(12)]
        for who in people:
            self.assertEqual(t.render(Context({"who": who, "n": 1})), f"[{who} 1]")
        for who in people:
            self.assertEqual(t.render(Context({"who": who, "n": 2})), f"[{who} 1]")
        self.assertEqual(self.masters_holding("runner:1:template.cache.card.*"), self.masters)
        for who in people:
            cache.delete(make_template_fragment_key("card", [who]))
        self.assertEqual([t.render(Context({"who": w, "n": 3})) for w in people],
                         [f"[{w} 3]" for w in people])

    def test_sessions_on_every_master(self):
        sessions = []
        # session keys are random: made until every master holds one (of 3
        # masters, one is left out of 100 sessions with probability 3*(2/3)^100)
        while (len(sessions) < 100 and self.masters_holding(
                f"runner:1:{SESSION_PREFIX}*") != self.masters):
            s = SessionStore()
            s["n"] = len(sessions)
            s.save()
            sessions.append(s)
        self.assertEqual(self.masters_holding(f"runner:1:{SESSION_PREFIX}*"), self.masters)
        for n, s in enumerate(sessions):
            self.assertEqual(SessionStore(s.session_key)["n"], n)
            old = s.session_key
            s.cycle_key()
            self.assertFalse(s.exists(old))
            self.assertEqual(SessionStore(s.session_key)["n"], n)
            cycled = s.session_key
            s.flush()
            self.assertFalse(s.exists(cycled))
