"""What the decorators need of a face, for their logic to be written once.

The decorators' logic is written as coroutines (`async def`) that await
face.call(...) for the Cache's methods, face.result(...) for the function's
return value and face.sleep(...). On xfetch.aio they run as the coroutines
they are. On xfetch.Cache every such await is already done when it is
reached (the sync call has returned), so drive() runs the coroutine to its
end with one send(): no event loop, no thread; exceptions (the loader's own,
KeyboardInterrupt) propagate unchanged."""
import asyncio
import functools
import inspect
import time

from ._keys import _check_function, _label


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
