"""The cached() and cached_many() decorators: keys from _keys (canonical,
the same in every process), values through an optional serializer."""
import datetime
import functools
import inspect
import json
import logging
import math
import pickle
import time

from ._cache import Timed
from ._errors import Error
from ._keys import _key_builder, _scope, _takes_self  # noqa: F401 (aio uses them)
from ._policy import make_policy

log = logging.getLogger("xfetch")

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


# ---- the decorator --------------------------------------------------------------

def _ttl_seconds(ttl, result=None):
    if isinstance(ttl, datetime.timedelta):
        return ttl.total_seconds()
    return ttl(result) if callable(ttl) else ttl


def cached(cache, ttl, key=None, serializer=None, *, namespace=None, version=None,
           condition=None, **policy):
    """Decorator factory behind Cache.cached.

    ttl: seconds, a datetime.timedelta, or a callable taking the result and
    returning seconds (None or <= 0: do not cache that result). **policy: get_or_compute's policy keywords (seconds).
    key: None (module.qualname and the arguments' canonical forms: the same in
    every process; self/cls left out), a format string such as "user:{user_id}"
    over the arguments by name (checked at decoration), or a callable taking
    the arguments (without self/cls) and returning str or bytes. namespace and
    version scope the keys ("namespace:key#vN"): bump version to move to fresh
    entries on purpose. serializer: None (the function returns bytes), "pickle",
    "json", or an object with dumps/loads; with a serializer, a None result
    means "not found" (cached for negative_ttl, default 0 = not cached), and an
    entry the serializer cannot read is a miss (recomputed and overwritten).
    condition: a callable taking the result; False = return it uncached.
    lease: at least twice the slowest run of the function seen in this
    process (a longer-running loader would lose the key mid-load).

    The wrapper has .key(*args), .invalidate(*args), .set(value, *args) (the
    arguments without self/cls), .refresh(*args) (computes now and
    overwrites) and .original. On a method, obj.method.refresh(*args) and
    obj.method.original(*args) act for obj; Class.method.refresh(obj, *args)
    takes it explicitly.
    """
    dumps, loads = _serializer(serializer)
    fixed_ttl = not callable(ttl) or isinstance(ttl, datetime.timedelta)
    policy = dict(policy, ttl=_ttl_seconds(ttl) if fixed_ttl else 60.0)
    unknown = set(policy) - _POLICY_KEYWORDS
    if unknown:
        raise TypeError(f"unknown policy keyword(s): {', '.join(sorted(unknown))}")
    _validate(**policy)
    if condition is not None and not callable(condition):
        raise TypeError("condition must be a callable taking the result")

    def decorate(func):
        if isinstance(func, (classmethod, staticmethod)):  # placed above the decorator
            return type(func)(decorate(func.__func__))
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"{func.__qualname__} is an async function: cache it with "
                            f"xfetch.aio.Cache.cached, not the sync decorator")
        make_key = _key_builder(func, key, namespace, version)
        method = _takes_self(func)

        def encode(result):
            if dumps is None or result is None:
                return result
            return dumps(result)

        # The lease, at least twice the slowest run of func seen in this
        # process: a lease that runs out mid-load lets another caller load too.
        leased = [policy]
        extra = {n: v for n, v in policy.items() if n in ("stale", "jitter")}  # for set

        def compute(args, kwargs):
            """The loader: the function's encoded result; with its own ttl
            (C xf_sink_ttl) when ttl is a callable, or 0 (returned, not
            cached) when condition= refuses it: the lease holder's write
            carries it, so waiters and XFetch's early refreshes work as with
            a fixed ttl."""
            t0 = time.monotonic()
            result = func(*args, **kwargs)
            lease = math.ceil((time.monotonic() - t0) * 20) / 10  # 2x, rounded up to 0.1 s
            if lease > leased[0].get("lease", 5.0) and lease < 2**31 / 1000:
                leased[0] = dict(policy, lease=lease)
            if condition is not None and not condition(result):
                return Timed(encode(result), 0)
            data = encode(result)
            if not fixed_ttl and data is not None:
                ttl_s = _ttl_seconds(ttl, result)
                return Timed(data, ttl_s if ttl_s and ttl_s > 0 else 0)  # <= 0: not cached
            return data

        def store(k, result):
            data = encode(result)
            if data is None:
                return False
            ttl_s = _ttl_seconds(ttl, result)
            if ttl_s is None or ttl_s <= 0:  # a ttl callable's "do not cache"
                return False
            # False when a newer value won: ours is returned, not kept.
            return cache.set(k, data, ttl=ttl_s, **extra)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            k = make_key(*(args[1:] if method else args), **kwargs)
            loader = functools.partial(compute, args, kwargs)
            value = cache.get_or_compute(k, loader, **leased[0])
            if loads is None or value is None:
                return value
            try:
                return loads(value)
            except Exception:
                # Written by another serializer or version: a miss, not an
                # error for the whole ttl. Recompute and overwrite.
                log.warning("cached value for %r could not be decoded; recomputing", k,
                            exc_info=True)
            return reload(k, args, kwargs, loader)

        def reload(k, args, kwargs, loader):
            """Replaces an entry the serializer cannot read without a stampede:
            beta=inf elects every caller, the lease lets one of them recompute,
            and the others are served the old value meanwhile: they poll for
            the new one (for up to the policy's wait), then compute it
            themselves."""
            forced = dict(leased[0], beta=math.inf)
            deadline = time.monotonic() + policy.get("wait", 5.0)
            for _ in range(3):  # again after the entry expired meanwhile; bounded
                value, source = cache.fetch(k, loader, **forced)
                if value is None:
                    return None
                if source not in ("cache", "stale"):  # the function's own result
                    return loads(value)
                while time.monotonic() < deadline:
                    try:
                        return loads(value)
                    except Exception:
                        pass
                    time.sleep(0.02)  # another caller holds the lease: wait for its value
                    try:
                        value = cache.get(k)
                    except Error:
                        break
                    if value is None:  # expired or deleted meanwhile: lease again
                        break
                else:
                    break
            result = func(*args, **kwargs)  # the refresher is slower than wait
            if condition is None or condition(result):
                store(k, result)
            return result

        def refresh(*args, **kwargs):
            """Computes the value now and overwrites the entry; returns it.
            Takes the function's own arguments (a method's self included)."""
            result = func(*args, **kwargs)
            if condition is None or condition(result):
                store(make_key(*(args[1:] if method else args), **kwargs), result)
            return result

        wrapper.key = make_key
        wrapper.invalidate = lambda *a, **kw: cache.delete(make_key(*a, **kw))
        wrapper.set = lambda value, *a, **kw: store(make_key(*a, **kw), value)
        wrapper.refresh = refresh
        wrapper.original = func
        return _CachedMethod(wrapper) if method else wrapper

    return decorate


class _CachedMethod:
    """A cached method: called like the function; looked up on an instance
    (or on a class, under classmethod) it binds like a function does, and its
    .refresh and .original then get that self too (.key, .invalidate and .set
    leave self out of the key either way)."""

    def __init__(self, wrapper):
        self._wrapper = wrapper
        functools.update_wrapper(self, wrapper)  # __name__, __doc__, the helpers

    def __call__(self, *args, **kwargs):
        return self._wrapper(*args, **kwargs)

    def __get__(self, obj, objtype=None):
        return self if obj is None else _BoundCachedMethod(self, obj)

    def __reduce__(self):  # pickles by name, as functions do
        return self.__qualname__

    def __repr__(self):
        return f"<cached method {self.__qualname__}>"


class _BoundCachedMethod:
    """obj.method for a cached method: the helpers bound to obj."""

    __slots__ = ("__func__", "__self__")

    def __init__(self, func, obj):
        self.__func__ = func
        self.__self__ = obj

    def __call__(self, *args, **kwargs):
        return self.__func__._wrapper(self.__self__, *args, **kwargs)

    def refresh(self, *args, **kwargs):
        return self.__func__.refresh(self.__self__, *args, **kwargs)

    def original(self, *args, **kwargs):
        return self.__func__.original(self.__self__, *args, **kwargs)

    def __getattr__(self, name):  # key, invalidate, set, __name__, __doc__, ...
        return getattr(self.__func__, name)

    def __eq__(self, other):
        return (isinstance(other, _BoundCachedMethod) and self.__func__ is other.__func__
                and self.__self__ is other.__self__)

    def __hash__(self):
        return hash((id(self.__func__), id(self.__self__)))

    def __reduce__(self):  # pickles as getattr(obj, name), like a bound method
        return getattr, (self.__self__, self.__func__.__name__)

    def __repr__(self):
        return f"<bound cached method {self.__func__.__qualname__} of {self.__self__!r}>"


def cached_many(cache, ttl, key, serializer=None, *, namespace=None, version=None,
                **policy):
    """Decorator factory behind Cache.cached_many, for batch functions:

        @cache.cached_many(ttl=60, key="user:{}", serializer="json")
        def load_users(ids): return {i: row for i, row in db.fetch(ids)}

        load_users([1, 2, 3])  # {1: ..., 2: ..., 3: ...}: the hits from
                               # Redis in one round trip, the misses loaded
                               # with one call of load_users(missing ids)

    key: a format string with one {} for the id, or a callable id -> key;
    namespace= and version= scope it as for cached ("namespace:key#vN").
    An entry the serializer cannot read is a miss: logged, and those ids are
    computed in one more call and overwritten.
    The ids must be hashable; the result is a dict in the order of the ids
    given (an id the function left out, or mapped to None, maps to None).
    With a serializer the values are encoded; without, they are bytes. The
    wrapper has .key(id), .invalidate(*ids) and .original. On a method
    (first parameter self or cls), self is passed through and not keyed."""
    dumps, loads = _serializer(serializer)
    policy = dict(policy, ttl=_ttl_seconds(ttl))
    _validate(**policy)
    if isinstance(key, str):
        if key.count("{}") != 1:
            raise ValueError("a cached_many key template needs exactly one {} for the id")
        make_key = (key.format if namespace is None and version is None else
                    lambda i: _scope(key.format(i), namespace, version))
    elif callable(key):
        make_key = (key if namespace is None and version is None else
                    lambda i: _scope(key(i), namespace, version))
    else:
        raise TypeError("key must be a format string with {} or a callable id -> key")

    def decorate(func):
        if inspect.iscoroutinefunction(func):
            raise TypeError(f"{func.__qualname__} is an async function: not supported by "
                            f"the sync decorator")

        method = _takes_self(func)  # f(self, ids): self is passed through, not keyed

        @functools.wraps(func)
        def wrapper(*args):
            if len(args) != 1 + method:
                raise TypeError(f"{func.__qualname__} takes {'self and ' if method else ''}"
                                f"one list of ids, got {len(args)} arguments")
            head, ids = args[:-1], list(dict.fromkeys(args[-1]))
            by_key = {make_key(i): i for i in ids}

            def load(keys):
                results = func(*head, [by_key[k] for k in keys])
                out = {}
                for k in keys:
                    r = results.get(by_key[k])
                    out[k] = None if r is None else (r if dumps is None else dumps(r))
                return out

            values = cache.get_many(list(by_key), load, batch=True, **policy)
            out, unreadable = {}, []
            for k, v in values.items():
                try:
                    out[by_key[k]] = v if loads is None or v is None else loads(v)
                except Exception:
                    unreadable.append(k)
                    out[by_key[k]] = None
            if unreadable:
                # Written by another serializer or version: misses, computed
                # in one more call and overwritten.
                log.warning("cached values for %r could not be decoded; recomputing",
                            unreadable)
                results = func(*head, [by_key[k] for k in unreadable])
                for k in unreadable:
                    r = results.get(by_key[k])
                    out[by_key[k]] = r
                    if r is not None:
                        cache.set(k, dumps(r), ttl=policy["ttl"],
                                  **{n: v for n, v in policy.items() if n in ("stale", "jitter")})
            return out

        wrapper.key = make_key
        wrapper.invalidate = lambda *ids: cache.delete_many([make_key(i) for i in ids])
        wrapper.original = func
        return wrapper

    return decorate


_POLICY_KEYWORDS = {"ttl", "beta", "lease", "wait", "stale", "stale_if_error",
                    "negative_ttl", "jitter", "on_wait_timeout"}


def _validate(ttl, beta=1.0, lease=5.0, wait=5.0, stale=0.0, stale_if_error=0.0,
              negative_ttl=0.0, jitter=0.0, on_wait_timeout="load"):
    """Raises TypeError/ValueError at decoration time rather than on first call."""
    make_policy(ttl, beta, lease, wait, stale, stale_if_error, negative_ttl, jitter,
                on_wait_timeout)
