"""xfetch.contrib.django.XFetchCache where Django's cache contract is easy
to miss, on a real redis-server: timeouts below xfetch's millisecond, and
keys another program wrote with a type other than a string. Skipped when
Django is not installed."""
import pytest

from django_setup import dj  # noqa: F401 (a fixture)


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
