"""cached(): key building, serializers, invalidation."""
import pytest

import xfetch
from conftest import peek, stored


def test_default_key_is_qualname_and_arguments(cache):
    calls = []

    @cache.cached(ttl=60, namespace="t")
    def profile(user_id, fmt="short"):
        calls.append((user_id, fmt))
        return f"{user_id}:{fmt}".encode()

    assert profile.key(42) == (f"t:{__name__}.test_default_key_is_qualname_and_arguments."
                               "<locals>.profile(user_id=42, fmt='short')")
    assert profile(42) == b"42:short"
    assert profile(user_id=42) == b"42:short"  # same key: arguments bound by name
    assert profile(42, "short") == b"42:short"
    assert profile(42, fmt="long") == b"42:long"
    assert calls == [(42, "short"), (42, "long")]


def test_format_string_and_callable_keys(cache, admin, prefix):
    @cache.cached(ttl=60, key="user:{user_id}")
    def user(user_id):
        return b"u%d" % user_id

    @cache.cached(ttl=60, key=lambda a, b: f"sum:{a}+{b}".encode())
    def add(a, b):
        return str(a + b).encode()

    assert user(7) == b"u7"
    assert stored(peek(admin, prefix + "user:7").v) == b"u7"
    assert add(1, 2) == b"3"
    assert stored(peek(admin, prefix + "sum:1+2").v) == b"3"


@pytest.mark.parametrize("serializer", ["json", "pickle"])
def test_serializers_round_trip_non_bytes(cache, serializer):
    calls = []

    @cache.cached(ttl=60, serializer=serializer, namespace="t")
    def data(n):
        calls.append(n)
        return {"n": n, "items": [1, 2.5, "three", None]}

    expected = {"n": 3, "items": [1, 2.5, "three", None]}
    assert data(3) == expected
    assert data(3) == expected
    assert calls == [3]


def test_custom_serializer_and_none_value(cache):
    class Upper:
        dumps = staticmethod(lambda v: v.upper().encode())
        loads = staticmethod(lambda b: b.decode())

    @cache.cached(ttl=60, serializer=Upper, namespace="t")
    def shout(s):
        return s

    assert shout("hi") == "HI"

    @cache.cached(ttl=60, serializer="json", namespace="t")
    def nothing():
        return None

    assert nothing() is None and nothing() is None


def test_invalidate_and_policy_keywords(cache):
    calls = []

    @xfetch.cached(cache, ttl=60, beta=0.5, stale=5, namespace="t")
    def f(x):
        calls.append(x)
        return b"%d" % len(calls)

    assert f(1) == b"1"
    assert f(1) == b"1"
    f.invalidate(1)
    assert f(1) == b"2"
    assert f.__name__ == "f"


def test_exceptions_propagate_through_the_decorator(cache):
    err = RuntimeError("db down")

    @cache.cached(ttl=60, serializer="pickle", namespace="t")
    def g():
        raise err

    with pytest.raises(RuntimeError) as info:
        g()
    assert info.value is err


@pytest.mark.parametrize("kwargs,exc", [(dict(ttl=0), ValueError),
                                        (dict(ttl=[1]), TypeError),
                                        (dict(ttl=1, serializer="yaml"), ValueError),
                                        (dict(ttl=1, serializer=42), TypeError),
                                        (dict(ttl=1, colour="red"), TypeError)])
def test_bad_decorator_arguments_raise_at_decoration(cache, kwargs, exc):
    with pytest.raises(exc):
        cache.cached(**kwargs)


def test_the_key_binding_agrees_with_inspect():
    """The decorators' argument binding (_keys._binder: positional calls to
    plain parameters bound without inspect) gives what inspect's bind and
    apply_defaults give, and raises where they raise."""
    import inspect
    from xfetch._keys import _binder

    def f0(): ...
    def f1(a): ...
    def f2(a, b=2): ...
    def f3(a, b=2, c=None): ...
    def f4(a, *rest): ...
    def f5(a, *, b=1): ...
    def f6(a, /, b=1): ...
    def f7(a, **kw): ...
    calls = [((), {}), ((1,), {}), ((1, 5), {}), ((1, 5, 6), {}), ((1, 5, 6, 7), {}),
             ((), {"a": 1}), ((1,), {"b": 3}), ((1,), {"c": 3}), ((1, 2), {"a": 1})]
    for func in (f0, f1, f2, f3, f4, f5, f6, f7):
        sig = inspect.signature(func)
        bound = _binder(sig)
        for args, kwargs in calls:
            try:
                b = sig.bind(*args, **kwargs)
                b.apply_defaults()
                want = list(b.arguments.items())
            except TypeError:
                with pytest.raises(TypeError):
                    bound(args, kwargs)
                continue
            assert list(bound(args, kwargs).items()) == want, (func.__name__, args, kwargs)
