"""What the decorators and the serializer's calls need of a face, for their
logic to be written once.

The decorators' logic is written as coroutines (`async def`) that await
face.call(...) for the Cache's methods, face.result(...) for the function's
return value and face.sleep(...). On xfetch.aio they run as the coroutines
they are. On xfetch.Cache every such await is already done when it is
reached (the sync call has returned), so drive() runs the coroutine to its
end with one send(): no event loop, no thread; exceptions (the loader's own,
KeyboardInterrupt) propagate unchanged. fetch_of, get_of and set_of, at the
end, are the Caches' fetch, get and set through a serializer, on both faces."""
import asyncio
import functools
import inspect
import time

from ._core import check_loader, key_bytes
from ._keys import _check_function, _label
from ._values import Codecs, recover


def drive(coro):
    """Runs a coroutine that never suspends (the sync face's) to its end."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value
    coro.close()
    raise RuntimeError("the sync face awaited something that was not done")


class SyncFace:
    """xfetch.Cache's: calls return at once; functions are plain def."""

    is_async = False

    def __init__(self, cache):
        self.cache = cache

    async def call(self, name, *args, **kwargs):
        return getattr(self.cache, name)(*args, **kwargs)

    async def result(self, value):
        return value

    async def sleep(self, seconds):
        time.sleep(seconds)

    def loader(self, coro_fn):
        """A loader for the Cache (a plain callable) running coro_fn."""
        return lambda *args: drive(coro_fn(*args))

    def expose(self, coro_fn, like=None):
        """A user-facing function running coro_fn (named like `like`)."""
        def run(*args, **kwargs):
            return drive(coro_fn(*args, **kwargs))
        return functools.update_wrapper(run, like) if like is not None else run

    @staticmethod
    def check(func, decorator):
        """Refuses at decoration what the sync decorators cannot cache."""
        _check_function(func)
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"{_label(func)} is an async function: cache it with "
                            f"xfetch.aio.Cache.{decorator}, not xfetch.Cache's")
        if inspect.isgeneratorfunction(func):
            raise TypeError(f"{_label(func)} is a generator function: its result (a "
                            f"generator) cannot be cached; cache a function returning a list")


class AioFace(SyncFace):
    """xfetch.aio.Cache's: calls and functions are awaited."""

    is_async = True

    async def call(self, name, *args, **kwargs):
        return await getattr(self.cache, name)(*args, **kwargs)

    async def result(self, value):
        return await value

    async def sleep(self, seconds):
        await asyncio.sleep(seconds)

    def loader(self, coro_fn):
        return coro_fn  # xfetch.aio awaits what a loader returns

    def expose(self, coro_fn, like=None):
        async def run(*args, **kwargs):
            return await coro_fn(*args, **kwargs)
        return functools.update_wrapper(run, like) if like is not None else run

    @staticmethod
    def check(func, decorator):
        _check_function(func)
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"{_label(func)} is not an async def: use "
                            f"xfetch.Cache.{decorator} for plain functions")


def face_of(cache):
    return AioFace(cache) if getattr(cache, "_is_async", False) else SyncFace(cache)


# ---- the serializer around a face's bytes-level calls ----------------------------

async def fetch_of(face, codec, key, loader, ttl=None, beta=1.0, previous=False, **policy):
    """fetch with codec: the face's bytes-level fetch (_fetch_raw) of the
    loader's value encoded, its answer decoded; a value codec refuses is
    recomputed (recover). Returns Fetched."""
    kb = key_bytes(key)
    check_loader(loader)
    if face.is_async:  # the face's call, without face.call's layer: the hits' path
        got = await face.cache._fetch_raw(key, codec.async_loader(kb, loader, previous), ttl,
                                          beta, **policy)
    else:
        got = face.cache._fetch_raw(key, codec.loader(kb, loader, previous), ttl, beta, **policy)
    return (face.cache._config.codecs.fetched(codec, key, kb, got)
            or await recover(face, codec, key, kb, loader,
                             dict(policy, ttl=ttl, beta=beta, previous=previous)))


async def get_of(face, codec, key):
    """get with codec: the value, or None (absent, or refused: counted)."""
    return face.cache._config.codecs.read(codec, key, await face.call("_get_raw", key))


async def set_of(face, codec, key, value, ttl=None, **options):
    """set with codec (options: set's stale, jitter, tags)."""
    return await face.call("_set_raw", key, Codecs.for_set(codec, key, value), ttl, **options)
