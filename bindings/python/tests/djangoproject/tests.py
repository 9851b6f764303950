"""The backend as a Django project's tests see it, run by Django's test
runner (DiscoverRunner): the BaseCache API, timeouts, versions, cache_page,
template fragment caching and cache sessions on XFetchCache."""
import time

from django.core.cache import cache
from django.core.cache.utils import make_template_fragment_key
from django.http import HttpResponse
from django.template import Context, Template
from django.test import RequestFactory, SimpleTestCase
from django.views.decorators.cache import cache_page


class BackendTests(SimpleTestCase):
    def setUp(self):
        cache.clear()

    def test_get_set_and_misses(self):
        for value in (1, 2.5, "text", b"bytes", None, [1, {"a": (2, 3)}]):
            cache.set("k", value)
            self.assertEqual(cache.get("k", "missing"), value)
        self.assertIsNone(cache.get("absent"))
        self.assertEqual(cache.get("absent", "dflt"), "dflt")
        self.assertTrue(cache.has_key("k"))
        self.assertIn("k", cache)

    def test_add_delete_touch(self):
        self.assertTrue(cache.add("k", "first"))
        self.assertFalse(cache.add("k", "second"))
        self.assertEqual(cache.get("k"), "first")
        self.assertTrue(cache.touch("k", 100))
        self.assertFalse(cache.touch("absent", 100))
        self.assertTrue(cache.delete("k"))
        self.assertFalse(cache.delete("k"))

    def test_many(self):
        self.assertEqual(cache.set_many({"a": 1, "b": None, "c": [3]}), [])
        self.assertEqual(cache.get_many(["a", "b", "c", "absent"]),
                         {"a": 1, "b": None, "c": [3]})
        cache.delete_many(["a", "c"])
        self.assertEqual(cache.get_many(["a", "b", "c"]), {"b": None})

    def test_incr_decr_versions(self):
        cache.set("n", 10)
        self.assertEqual(cache.incr("n", 5), 15)
        self.assertEqual(cache.decr("n", 6), 9)
        with self.assertRaises(ValueError):
            cache.incr("absent")
        cache.set("v", "one", version=2)
        self.assertIsNone(cache.get("v"))
        self.assertEqual(cache.incr_version("v", version=2), 3)
        self.assertEqual(cache.get("v", version=3), "one")

    def test_get_or_set_calls_its_default_once(self):
        calls = []
        self.assertEqual(cache.get_or_set("c", lambda: calls.append(1) or "x"), "x")
        self.assertEqual(cache.get_or_set("c", lambda: calls.append(1) or "y"), "x")
        self.assertEqual(calls, [1])

    def test_timeouts(self):
        cache.set("zero", 1, timeout=0)
        self.assertIsNone(cache.get("zero"))
        cache.set("short", 1, timeout=1)
        time.sleep(1.5)  # a 1 s timeout, read 0.5 s past it (a sleep never returns early)
        self.assertEqual(cache.get("short", "gone"), "gone")

    def test_clear(self):
        cache.set("k", 1)
        cache.clear()
        self.assertIsNone(cache.get("k"))


class FeatureTests(SimpleTestCase):
    def setUp(self):
        cache.clear()

    def test_cache_page(self):
        calls = []

        @cache_page(60)
        def view(request):
            calls.append(1)
            return HttpResponse(f"page {len(calls)}")
        rf = RequestFactory()
        self.assertEqual(view(rf.get("/p")).content, b"page 1")
        self.assertEqual(view(rf.get("/p")).content, b"page 1")
        self.assertEqual(view(rf.get("/q")).content, b"page 2")

    def test_template_fragment_caching(self):
        t = Template("{% load cache %}{% cache 60 sidebar who %}[{{ value }}]{% endcache %}")
        self.assertEqual(t.render(Context({"who": "ann", "value": 1})), "[1]")
        self.assertEqual(t.render(Context({"who": "ann", "value": 2})), "[1]")
        cache.delete(make_template_fragment_key("sidebar", ["ann"]))
        self.assertEqual(t.render(Context({"who": "ann", "value": 3})), "[3]")

    def test_cache_sessions(self):
        from django.contrib.sessions.backends.cache import SessionStore
        s = SessionStore()
        s["cart"] = [1, 2]
        s.save()
        key = s.session_key
        self.assertEqual(SessionStore(key)["cart"], [1, 2])
        s.cycle_key()
        self.assertFalse(s.exists(key))
        self.assertEqual(SessionStore(s.session_key)["cart"], [1, 2])
        s.flush()
        self.assertIsNone(SessionStore(s.session_key).get("cart"))
