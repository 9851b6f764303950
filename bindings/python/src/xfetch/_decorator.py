"""The cached() decorator: keys from the function's qualified name and its
arguments, values through an optional serializer."""
import functools
import inspect
import json
import pickle

from ._policy import make_policy

_SERIALIZERS = {
    "pickle": (lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
    "json": (lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True).encode(),
             lambda b: json.loads(b)),
}


def _serializer(serializer):
    if serializer is None:
        return None, None
    if isinstance(serializer, str):
        try:
            return _SERIALIZERS[serializer]
        except KeyError:
            raise ValueError(f"serializer must be 'pickle', 'json' or an object with "
                             f"dumps/loads, not {serializer!r}") from None
    if callable(getattr(serializer, "dumps", None)) and callable(
            getattr(serializer, "loads", None)):
        return serializer.dumps, serializer.loads
    raise TypeError("serializer must be 'pickle', 'json' or an object with dumps/loads")


def _key_builder(func, key):
    """Returns f(*args, **kwargs) -> str|bytes."""
    if callable(key):
        return key
    sig = inspect.signature(func)
    name = f"{func.__module__}.{func.__qualname__}"

    def bound(args, kwargs):
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        return b.arguments

    if isinstance(key, str):  # a format string over the arguments by name
        return lambda *a, **kw: key.format(**bound(a, kw))
    if key is not None:
        raise TypeError("key must be None, a format string or a callable")
    # The default: "module.qualname(repr of each argument by name)", defaults
    # applied, so f(1) and f(x=1) share an entry. Arguments must have a repr
    # that identifies them (ints, strings, tuples... not plain objects).
    return lambda *a, **kw: name + "(" + ", ".join(
        f"{k}={v!r}" for k, v in bound(a, kw).items()) + ")"


def cached(cache, ttl, key=None, serializer=None, **policy):
    """Decorator factory behind Cache.cached.

    ttl and **policy are get_or_compute's policy keywords (seconds). key: None
    (module.qualname and the arguments' reprs), a format string such as
    "user:{user_id}" over the arguments by name, or a callable taking the
    function's arguments and returning str or bytes. serializer: None (the
    function returns bytes, or None for "not found"), "pickle", "json", or an
    object with dumps/loads. The wrapper has .key(*args, **kwargs) and
    .invalidate(*args, **kwargs).
    """
    dumps, loads = _serializer(serializer)
    policy = dict(policy, ttl=ttl)
    unknown = set(policy) - _POLICY_KEYWORDS
    if unknown:
        raise TypeError(f"unknown policy keyword(s): {', '.join(sorted(unknown))}")
    _validate(**policy)

    def decorate(func):
        make_key = _key_builder(func, key)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if dumps is None:
                loader = functools.partial(func, *args, **kwargs)
            else:
                def loader():
                    return dumps(func(*args, **kwargs))
            value = cache.get_or_compute(make_key(*args, **kwargs), loader, **policy)
            return value if loads is None or value is None else loads(value)

        wrapper.key = make_key
        wrapper.invalidate = lambda *a, **kw: cache.delete(make_key(*a, **kw))
        return wrapper

    return decorate


_POLICY_KEYWORDS = {"ttl", "beta", "lease", "wait", "stale", "stale_if_error",
                    "negative_ttl", "jitter", "on_wait_timeout"}


def _validate(ttl, beta=1.0, lease=5.0, wait=5.0, stale=0.0, stale_if_error=0.0,
              negative_ttl=0.0, jitter=0.0, on_wait_timeout="load"):
    """Raises TypeError/ValueError at decoration time rather than on first call."""
    make_policy(ttl, beta, lease, wait, stale, stale_if_error, negative_ttl, jitter,
                on_wait_timeout)
