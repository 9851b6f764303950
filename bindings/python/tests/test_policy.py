"""Bad arguments raise TypeError/ValueError before any I/O."""
import math

import pytest


def commands(admin):
    return admin.info("stats")["total_commands_processed"]


BAD = [
    (dict(ttl=0), ValueError),
    (dict(ttl=-1), ValueError),
    (dict(ttl=0.0001), ValueError),  # rounds to 0 ms
    (dict(ttl=math.inf), ValueError),
    (dict(ttl=math.nan), ValueError),
    (dict(ttl=2.0**40), ValueError),
    (dict(ttl=[60]), TypeError),
    (dict(ttl=None), TypeError),
    (dict(ttl=True), TypeError),
    (dict(ttl="soon"), ValueError),
    (dict(ttl=60, beta=-0.5), ValueError),
    (dict(ttl=60, beta=math.nan), ValueError),
    (dict(ttl=60, beta="1"), TypeError),
    (dict(ttl=60, lease=0), ValueError),
    (dict(ttl=60, wait=-1), ValueError),
    (dict(ttl=60, stale=-1), ValueError),
    (dict(ttl=60, stale_if_error=[1]), TypeError),
    (dict(ttl=60, negative_ttl=-1), ValueError),
    (dict(ttl=60, jitter=1.0), ValueError),
    (dict(ttl=60, jitter=-0.1), ValueError),
    (dict(ttl=60, on_wait_timeout="maybe"), ValueError),
]


@pytest.mark.parametrize("kwargs,exc", BAD)
def test_bad_policy_raises_before_io(cache, admin, counter, kwargs, exc):
    load = counter()
    before = commands(admin)
    with pytest.raises(exc):
        cache.get_or_compute("k", load, **kwargs)
    assert commands(admin) == before + 1  # only our INFO
    assert load.calls == 0


@pytest.mark.parametrize("key,exc", [(123, TypeError), (None, TypeError), ("", ValueError),
                                     (b"", ValueError), (["k"], TypeError)])
def test_bad_key_raises_before_io(cache, admin, counter, key, exc):
    before = commands(admin)
    with pytest.raises(exc):
        cache.get_or_compute(key, counter(), ttl=60)
    with pytest.raises(exc):
        cache.set(key, b"v", ttl=60)
    with pytest.raises(exc):
        cache.delete(key)
    assert commands(admin) == before + 1


def test_bad_loader_and_value_raise_type_error(cache, admin):
    before = commands(admin)
    with pytest.raises(TypeError):
        cache.get_or_compute("k", b"not callable", ttl=60)
    with pytest.raises(TypeError):
        cache.set("k", None, ttl=60)  # None is a loader's "not found", not a value
    with pytest.raises(TypeError):
        cache.get_or_compute("k", lambda: b"v")  # ttl is required
    assert commands(admin) == before + 1


def test_valid_edge_values_are_accepted(cache, counter):
    load = counter()
    assert cache.get_or_compute("a", load, ttl=0.001, beta=0, wait=0, jitter=0.99) == b"value"
    assert cache.get_or_compute("b", load, ttl=1, beta=math.inf, lease=0.001) == b"value"
    assert cache.get_or_compute("c", load, 60, 2.5, on_wait_timeout="fail") == b"value"


@pytest.mark.parametrize("kwargs,exc", [(dict(timeout=0), ValueError),
                                        (dict(timeout="1"), TypeError),
                                        (dict(prefix=1), TypeError),
                                        (dict(prefix="a\0b"), ValueError),
                                        (dict(seed=-1), ValueError),
                                        (dict(breaker=-1), ValueError),
                                        (dict(max_value_len=0), ValueError)])
def test_bad_cache_options(server, kwargs, exc):
    import xfetch
    with pytest.raises(exc):
        xfetch.Cache(server.url, **kwargs)
