"""A loader that asks for its own key: it would wait on its own lease (or its
own flight in the share while Redis is down) for the whole `wait`, then load
a second time. The C flow knows the call is nested on this thread and fails
it at once with InvalidArgumentError naming the recursion."""
import time

import pytest

import xfetch


def _refused(call, key=None):
    t0 = time.monotonic()
    with pytest.raises(xfetch.InvalidArgumentError) as e:
        call()
    elapsed = time.monotonic() - t0
    want = f"{key} asked for {key} itself" if key else "itself (a recursion: it would wait on its own lease)"
    assert want in str(e.value)
    # the nested call would wait out `wait` (5 s): half that, for a busy machine
    assert elapsed < 2.5, f"took {elapsed:.2f} s: the nested call waited on its own lease"
    return e.value


def test_get_or_compute_whose_loader_asks_for_its_own_key(cache):
    calls = []

    def loader():
        calls.append(1)
        if len(calls) > 1:  # without the check: the second load, after the stall
            return b"inner"
        return cache.get_or_compute("self", loader, ttl=60) + b"!"

    _refused(lambda: cache.get_or_compute("self", loader, ttl=60), "self")
    assert calls == [1]
    assert cache.get("self") is None  # nothing cached


def test_a_decorated_function_calling_itself_with_the_same_arguments(cache):
    calls = []

    @cache.cached(ttl=60, namespace="t")
    def fib(n):
        calls.append(n)
        return fib(n) if n > 1 and len(calls) == 1 else b"1"

    _refused(lambda: fib(5))
    assert calls == [5]


def test_a_decorated_function_recursing_on_other_arguments_still_works(cache):
    @cache.cached(ttl=60, serializer="json", namespace="t")
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    assert fact(5) == 120


def test_with_redis_down_through_the_share():
    cache = xfetch.Cache("redis://127.0.0.1:1/0", lazy_connect=True, breaker=1)
    calls = []

    def loader():
        calls.append(1)
        if len(calls) > 1:
            return b"inner"
        return cache.get_or_compute("down", loader, ttl=60)

    try:
        _refused(lambda: cache.get_or_compute("down", loader, ttl=60), "down")
        assert calls == [1]
    finally:
        cache.close()
