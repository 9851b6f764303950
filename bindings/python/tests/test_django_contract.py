"""xfetch.contrib.django.XFetchCache where Django's cache contract is easy
to miss, on a real redis-server: timeouts below xfetch's millisecond, keys
another program wrote with a type other than a string, entries whose value
no longer unpickles (get's miss must be everyone's miss), and what clear()
empties. Skipped when Django is not installed."""

import pytest

from django_setup import configured, dj  # noqa: F401 (dj: a fixture)

from django.core.cache import caches  # noqa: E402


# ---- timeouts ----------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0.0004, 1e-9])
def test_a_timeout_below_a_millisecond_expires_at_once(dj, admin, timeout):
    """A computed timeout (expires_at - now) can land in (0, 1 ms): Django
    takes it, as good as expired; xfetch's ttl starts at 1 ms."""
    dj.set("k", "old")
    dj.set("k", "new", timeout)
    assert dj.get("k") is None
    assert dj.add("a", 1, timeout) is True and not dj.has_key("a")
    assert dj.get_or_set("g", "computed", timeout) == "computed" and not dj.has_key("g")
    assert dj.set_many({"m": 1}, timeout) == [] and dj.get("m") is None
    dj.set("t", "v")
    assert dj.touch("t", timeout) is True and dj.get("t") is None


# ---- keys another program wrote ----------------------------------------------------


@pytest.mark.parametrize("kind", ["list", "set", "zset"])
def test_delete_removes_a_key_of_another_type_another_program_wrote(dj, admin, kind):
    """Such a key reads as a miss and set replaces it; delete and
    delete_many remove it too (Django: delete fails silently)."""
    write = {"list": lambda k: admin.rpush(k, "a"), "set": lambda k: admin.sadd(k, "a"),
             "zset": lambda k: admin.zadd(k, {"a": 1})}[kind]
    write("site:1:one")
    write("site:1:many")
    dj.set("mine", 1)
    assert dj.get("one", "dflt") == "dflt"
    assert dj.delete("one") is True
    assert not admin.exists("site:1:one")
    dj.delete_many(["mine", "many"])
    assert not admin.exists("site:1:many") and dj.get("mine") is None


# ---- values that no longer unpickle ------------------------------------------------


def test_an_unreadable_value_is_a_miss_for_has_key_add_and_touch(dj):
    """A value this code cannot unpickle (a class renamed by a deploy) reads
    as a miss: has_key and touch say so, and add stores over it, as
    get_or_set does (else, with timeout None, add never stores and get never
    hits; `touch() or set()` never sets)."""
    dj.xfetch.set("site:1:k", b"not a pickle", 60)
    assert dj.get("k", "dflt") == "dflt"
    assert not dj.has_key("k") and "k" not in dj
    assert dj.touch("k", 100) is False
    assert dj.add("k", "not stored", 0) is True  # absent, as with a timeout of 0
    assert dj.add("k", "fresh") is True
    assert dj.get("k") == "fresh"
    assert dj.add("k", "again") is False and dj.get("k") == "fresh"


def test_of_concurrent_adds_over_an_unreadable_value_one_wins(dj):
    """As of concurrent adds of an absent key (test_django_fleet)."""
    from test_django_fleet import adds_from_threads
    dj.xfetch.set("site:1:slot", b"not a pickle", 60)
    winners = adds_from_threads("slot")
    assert len(winners) == 1 and dj.get("slot") == winners[0]


# ---- clear -------------------------------------------------------------------------


def test_clear_empties_the_aliases_of_one_location_and_prefix(server, admin):
    """KEY_PREFIX does not separate two aliases' namespaces (as FLUSHDB of
    Django's RedisCache would not): an OPTIONS prefix of its own does."""
    backends = {"default": {"LOCATION": server.url, "KEY_PREFIX": "a"},
                "same": {"LOCATION": server.url, "KEY_PREFIX": "b"},
                "own": {"LOCATION": server.url, "KEY_PREFIX": "b",
                        "OPTIONS": {"prefix": "sessions:"}}}
    with configured(**backends):
        caches["same"].set("k", 1)
        caches["own"].set("k", 2)
        caches["default"].clear()
        assert caches["same"].get("k") is None and caches["own"].get("k") == 2
