"""xfetch.aio.Cache.cached: the asyncio twin of xfetch.Cache.cached, with
the same keys (_keys: canonical, self left out, cls keyed by class, closures
and partials refused, long keys digested) and serializers."""
import functools
import inspect

from ._decorator import _CachedMethod, _validate
from ._keys import _check_function, _first_param, _key_builder, _label, _takes_self
from ._serializers import _serializer


def cached(cache, ttl, key=None, serializer=None, *, namespace=None, version=None,
           **policy):
    """Decorator factory behind xfetch.aio.Cache.cached, for async def
    functions: caches the awaited result. The wrapper has .key(*args),
    await .invalidate(*args), await .set(value, *args) (True when written),
    await .refresh(*args) (computes now and overwrites) and .original; on a
    method they act as xfetch.Cache.cached's do."""
    dumps, loads = _serializer(serializer)
    policy = dict(policy, ttl=ttl)
    _validate(**policy)
    extra = {n: v for n, v in policy.items() if n in ("stale", "jitter")}  # for set

    def decorate(func):
        if isinstance(func, (classmethod, staticmethod)):  # placed above the decorator
            return type(func)(decorate(func.__func__))
        _check_function(func)
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"{_label(func)} is not an async def: use xfetch.Cache.cached")
        make_key = _key_builder(func, key, namespace, version)
        drop = _first_param(func) == "self"  # left out of the key; cls is keyed

        def encode(result):
            return result if dumps is None or result is None else dumps(result)

        async def store(k, result):
            data = encode(result)
            if data is None:
                return False
            return await cache.set(k, data, ttl=ttl, **extra)

        @functools.wraps(func)
        async def wrapper(*args, **kwargs):
            async def load():
                return encode(await func(*args, **kwargs))
            k = make_key(*(args[1:] if drop else args), **kwargs)
            value = await cache.get_or_compute(k, load, **policy)
            return value if loads is None or value is None else loads(value)

        async def invalidate(*args, **kwargs):
            await cache.delete(make_key(*args, **kwargs))

        async def set_(value, *args, **kwargs):
            return await store(make_key(*args, **kwargs), value)

        async def refresh(*args, **kwargs):
            """Computes the value now and overwrites the entry; returns it.
            Takes the function's own arguments (a method's self included)."""
            result = await func(*args, **kwargs)
            await store(make_key(*(args[1:] if drop else args), **kwargs), result)
            return result

        wrapper.key = make_key
        wrapper.invalidate = invalidate
        wrapper.set = set_
        wrapper.refresh = refresh
        wrapper.original = func
        return _CachedMethod(wrapper) if _takes_self(func) else wrapper

    return decorate
