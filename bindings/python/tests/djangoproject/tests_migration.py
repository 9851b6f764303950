"""Moving a project from django-redis to the backend on the same Redis, as a
Django project's tests see it (settings: the alias "django_redis" is
django-redis with the same LOCATION and KEY_PREFIX, so both write the same
key names): what django-redis wrote first reads as a miss through Django's
API (get returns the default), an explicit set replaces it, and pages and
sessions django-redis cached are made anew."""
import importlib.util
import unittest

import redis
from django.conf import settings
from django.contrib.sessions.backends.cache import SessionStore
from django.core.cache import cache, caches
from django.http import HttpResponse
from django.test import RequestFactory, SimpleTestCase, override_settings
from django.views.decorators.cache import cache_page


@unittest.skipUnless(importlib.util.find_spec("django_redis"), "django-redis is not installed")
class FromDjangoRedisTests(SimpleTestCase):
    """self.old is django-redis; self.raw a plain client of the same Redis.
    setUp deletes every key of the project's KEY_PREFIX."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.raw = redis.Redis.from_url(settings.REDIS_URL)

    @classmethod
    def tearDownClass(cls):
        cls.raw.close()
        super().tearDownClass()

    def setUp(self):
        self.old = caches["django_redis"]
        names = self.raw.keys("runner:*")
        if names:
            self.raw.delete(*names)

    def test_what_django_redis_wrote_reads_as_a_miss(self):
        self.old.set("obj", {"a": 1})
        self.old.set("num", 5)  # django-redis stores an int as its digits
        self.assertEqual(self.raw.get("runner:1:num"), b"5")  # the same key names
        self.assertTrue(self.raw.exists("runner:1:obj"))
        self.assertEqual(cache.get("obj", "dflt"), "dflt")
        self.assertIsNone(cache.get("num"))
        self.assertFalse(cache.has_key("obj"))
        self.assertNotIn("num", cache)
        self.assertEqual(cache.get_many(["obj", "num"]), {})
        self.assertFalse(cache.touch("obj", 10))
        with self.assertRaises(ValueError):
            cache.incr("num")
        with self.assertRaises(ValueError):
            cache.decr("num")
        self.assertEqual(self.raw.get("runner:1:num"), b"5")  # reads leave it alone
        self.assertEqual(self.old.get("obj"), {"a": 1})

    def test_an_explicit_write_replaces_it(self):
        for key in ("obj", "added", "computed", "gone", "m1", "m2"):
            self.old.set(key, "old")
        cache.set("obj", {"a": 2})
        self.assertEqual(cache.get("obj"), {"a": 2})
        self.assertTrue(cache.add("added", "mine"))
        self.assertEqual(cache.get("added"), "mine")
        self.assertEqual(cache.get_or_set("computed", lambda: "ours"), "ours")
        self.assertEqual(cache.get("computed"), "ours")
        self.assertTrue(cache.delete("gone"))
        self.assertFalse(self.raw.exists("runner:1:gone"))
        cache.set("m3", 3)
        cache.delete_many(["m1", "m2", "m3"])
        self.assertEqual(self.raw.exists("runner:1:m1", "runner:1:m2"), 0)  # removed
        self.assertIsNone(cache.get("m3"))  # ours: a tombstone until it expires
        self.assertEqual(cache.set_many({"m1": 1, "m2": 2}), [])
        self.assertEqual(cache.get_many(["m1", "m2"]), {"m1": 1, "m2": 2})

    def test_a_page_django_redis_cached_is_made_anew_and_cached(self):
        calls = []

        def view(request):
            calls.append(1)
            return HttpResponse(f"page {len(calls)}")
        before = cache_page(60, cache="django_redis")(view)
        after = cache_page(60)(view)
        rf = RequestFactory()
        self.assertEqual(before(rf.get("/p")).content, b"page 1")
        self.assertEqual(before(rf.get("/p")).content, b"page 1")
        self.assertEqual(after(rf.get("/p")).content, b"page 2")
        self.assertEqual(after(rf.get("/p")).content, b"page 2")

    def test_a_session_django_redis_stored_starts_anew(self):
        with override_settings(SESSION_CACHE_ALIAS="django_redis"):
            s = SessionStore()
            s["cart"] = [1, 2]
            s.save()
        self.assertTrue(self.raw.exists(f"runner:1:{s.cache_key_prefix}{s.session_key}"))
        moved = SessionStore(s.session_key)
        self.assertIsNone(moved.get("cart"))
        moved["cart"] = [3]
        moved.save()
        self.assertEqual(SessionStore(moved.session_key)["cart"], [3])
