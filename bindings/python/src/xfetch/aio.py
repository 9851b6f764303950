"""xfetch.aio: the asyncio face of xfetch.Cache.

    cache = xfetch.aio.Cache("redis://127.0.0.1:6379/0", prefix="app:")
    value = await cache.get_or_compute("user:42", load_user, ttl=60.0)

    @cache.cached(ttl=60.0, serializer="json")
    async def profile(user_id): ...

The options, checks, results, decorators and the share are the core's, the
same as xfetch.Cache's (_core, _decorator); the decisions are the C
library's: the calls run on its event-loop driver (xf_async: the same flow
and connection engine as every other driver, the Redis Cluster router,
setup, tracking, reconnects and TLS included), attached to the running
asyncio loop (_aio_loop). Loaders may be plain or async def; the event loop
is never blocked: no call waits on a thread."""
from __future__ import annotations

import asyncio
import inspect

from ._aio_loop import _FORKS, KEEP, Call, Engine
from ._aio_many import get_many
from ._cache import Cache as SyncCache
from ._core import (NEAR_NOT_SERVED, SOURCES, STAT_FIELDS, Config, check_loader, check_not_loading,
                    check_value, enabled_now, key_bytes, near_value, outcome, _loading)
from ._policy import tag_array, tag_names
from ._face import AioFace, fetch_of, get_of, set_of
from ._native import ffi, lib
from ._setup import LateSetup
from ._types import Fetched
from ._values import recover, values_of_many

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar, Union  # noqa

if TYPE_CHECKING:
    import datetime
    from ._types import AsyncCachedDecorator

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
Loader = Callable[[], Union[Value, None, Awaitable[Union[Value, None]]]]
F = TypeVar("F", bound=Callable[..., Any])


class Cache(LateSetup):
    """The asyncio face of xfetch.Cache: the same options (url None: set up
    later with setup(url, **options), a plain call as on xfetch.Cache) (max_connections
    is met by construction: one connection per server), the same calls, awaited.
    As xfetch.Cache, the constructor connects once to check the URL (a
    blocking connect, bounded by connect_timeout) unless lazy_connect; the
    connections are opened by the calls that need them, on their event loop.
    A Redis Cluster is routed by C as on xfetch.Cache (seed lists, ?cluster=,
    ?replica_reads=yes; MOVED, ASK, failover). A Cache belongs to one running
    event loop at a time."""

    _is_async = True  # for the decorators' face (_face)
    _label = "xfetch.aio.Cache"

    def _connect(self, url, **options):
        config = Config.of(url, "aio", options)
        self._codec = config.codecs.default
        self._policies = config.policies
        self._policies.keep = KEEP  # a background refresh keeps its call's loader
        self._opts = ffi.new("xf_options *", config.opts[0])
        self._opts.lazy_connect = 1  # the first call connects, on its loop
        self._engine = None  # the C handle on the loop of the calls (_ready)
        self._retired = dict.fromkeys(STAT_FIELDS, 0)  # counters of closed handles
        self._enabled = None  # the handle's bypass switch, as last set
        self._near = config.near  # the near hit's fast path
        self._note_namespace = config.events.note_namespace
        self._value = ffi.new("xf_value *")
        self._refreshes = set()  # background loads' tasks (close() drains them)
        self._closing = False
        self._closed = False
        self._config = config  # last: set up (LateSetup)

    def __del__(self):
        # Dropped without close(): the loop's readers would keep the sockets open
        engine = self.__dict__.get("_engine")
        loop = engine and engine.loop
        if engine is None:
            return
        if not loop.is_running() or asyncio._get_running_loop() is loop or engine.forked():
            engine.close()
        else:  # dropped by another thread (a garbage collection there): closed on its loop
            loop.call_soon_threadsafe(engine.close)

    async def close(self, timeout: float = 2.0) -> None:
        """Closes the connections once the calls in flight are over; calls
        made afterwards open new ones.
        Background refreshes: none are started any more; running ones are
        waited for up to timeout seconds, then cancelled (their leases
        released). Nothing to do on a Cache not set up; setup() may be
        called again after it."""
        if "_config" not in self.__dict__:
            return
        self._closed = True
        self._closing = True
        try:
            running = set(self._refreshes)
            if running:
                _, late = await asyncio.wait(running, timeout=timeout)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=0.1)
        finally:
            self._closing = False
            self._retire()

    def _retire(self, now=False):
        """Retires the handle (now: its loop is gone, so are its calls')."""
        engine, self._engine = self._engine, None
        if engine is not None:
            for name, n in self._counters(engine).items():
                self._retired[name] += n if name != "connections" else 0
            engine.close() if now else engine.retire()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def _start(self, key):
        """The key's bytes, with the loop and own-key checks every call makes."""
        kb = key_bytes(key)
        self._ready()
        self._note_namespace(kb)  # for C's events (reported from the loop)
        if _loading.get():
            check_not_loading(self._config.namespace, kb, key)
        return kb

    def _ready(self):
        """What every call checks first: the handle on the running loop (a
        new one once the old loop no longer runs: an earlier asyncio.run;
        refused while it runs in another thread; in a fork's child, the
        parent's forgotten), and the enabled switch
        (read by the C call as it starts). Returns the handle."""
        engine = self._engine
        loop = asyncio.get_running_loop()
        if engine is None or engine.loop is not loop or engine.forks != _FORKS[0]:
            if (engine is not None and engine.loop.is_running() and not engine.loop.is_closed()
                    and not engine.forked()):
                raise RuntimeError(
                    f"this xfetch.aio.Cache belongs to event loop {engine.loop!r}, which runs "
                    f"in another thread; it cannot be used from event loop {loop!r} "
                    f"meanwhile: open one xfetch.aio.Cache per event loop")
            self._retire(now=True)
            engine = self._engine = Engine(loop, self._opts, self)
            self._enabled = None
        enabled = enabled_now(self._config)
        if enabled is not self._enabled:
            self._enabled = enabled
            lib.xf_async_set_enabled(engine.ac, 1 if enabled else 0)
        return engine

    # ---- get-or-compute -------------------------------------------------------

    async def fetch(self, key: Key, loader: Loader, ttl: Any = None, beta: float = 1.0,
                    **policy: Any) -> Fetched:
        """Like get_or_compute, but returns Fetched(value, source)."""
        return await fetch_of(AioFace(self), self._codec, key, loader, ttl, beta, **policy)

    fetch.__signature__ = inspect.signature(SyncCache.fetch)  # its keywords, checked there

    async def _fetch_raw(self, key, loader, ttl=None, beta=1.0, **policy):
        """fetch of the bytes C caches (loader returns them); the keywords are
        the sync face's, checked by the one policy builder (_policy)."""
        return await self._run(key, loader, self._policies.of_call(ttl, beta, **policy),
                               policy.get("lease", 5.0))

    async def get_or_compute(self, key: Key, loader: Loader, ttl: Any = None,
                             beta: float = 1.0, **policy: Any) -> Any:
        """Returns the value cached under key, awaiting loader() (a plain
        function or an async def) to compute it when missing, expired or
        elected for early recomputation. Same keywords, values and errors as
        xfetch.Cache.get_or_compute."""
        tags = policy.get("tags")
        if len(policy) > (tags is not None):  # more than ttl, beta and tags (uncommon)
            return (await fetch_of(AioFace(self), self._codec, key, loader, ttl, beta,
                                   **policy))[0]
        p = self._policies.plan(ttl, beta, tags)  # tagged: near once C knows it current
        codec = self._codec
        if codec.raw:
            return (await self._run(key, loader, p, 5.0))[0]
        kb = key_bytes(key)
        got = await self._run(key, codec.async_loader(kb, loader), p, 5.0)
        return (self._config.codecs.fetched(codec, key, kb, got)
                or await recover(AioFace(self), codec, key, kb, loader,
                                 {"ttl": ttl, "beta": beta, "tags": tags}))[0]

    def _near_get(self, key, policy):
        """(key's bytes, the near hit's value or NEAR_NOT_SERVED): _run's
        first step, for the decorators' near hits."""
        kb = self._start(key)
        if self._near and self._enabled:
            return kb, self._near_serve(kb, policy)
        return kb, NEAR_NOT_SERVED

    def _near_serve(self, kb, policy):
        """C xf_async_near_serve (policy NULL: a get), before anything is
        awaited: the value of a near hit (None: a kept not-found), or
        NEAR_NOT_SERVED: make the call (a draw that elected an early refresh
        is kept for it)."""
        v = self._value
        rc = lib.xf_async_near_serve(self._engine.ac, kb, len(kb), policy,
                                     self._config.events.near_count(), v)
        return NEAR_NOT_SERVED if rc == NEAR_NOT_SERVED else near_value(rc, v)

    async def _run(self, key, loader, policy, lease):
        kb = self._start(key)
        check_loader(loader)
        if self._near and self._enabled:  # tagged: only when C knows it current for its tags
            value = self._near_serve(kb, policy)
            if value is not NEAR_NOT_SERVED:
                return Fetched(value, None if value is None else "cache")
        engine = self._engine
        call = Call(engine, key, kb, loader)
        engine.start(call, lib.xf_async_get_or_compute, kb, len(kb), policy)
        await call.wait()
        rc, exc = call.rc, call.exc
        if rc == 0 and exc is None:  # the hot path
            return Fetched(call.value, SOURCES[call.source])
        got = Fetched(call.value, SOURCES[call.source]) if rc == 0 else None
        return outcome(rc, got, exc, key, kb, self._config.failures, call.error_of,
                       self._config.events, call.took, lease)

    def _tracked(self, task):
        """task (a background load) is one close() drains; closing: cancelled."""
        if self._closing:
            task.cancel()
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def get_many(self, keys: Iterable[Key], loader: Callable[..., Any], ttl: Any = None,
                       beta: float = 1.0, *, batch: bool = False,
                       **policy: Any) -> dict[Key, Any]:
        """xfetch.Cache.get_many, awaited: the keys' calls pipelined (their
        hits one MGET per node and slot), loader(key) awaited for each
        key this caller must compute, or with batch=True loader(list of keys)
        once per round with every such key, returning a mapping. **policy:
        every keyword of get_or_compute, for every key."""
        return await values_of_many(AioFace(self), self._codec, keys, loader, batch,
                                    dict(policy, ttl=ttl, beta=beta))

    async def _get_many_raw(self, keys, loader, ttl=None, beta=1.0, *, batch=False, **policy):
        return await get_many(self._policies, self._ready(), self._fetch_raw, keys,
                              loader, ttl, beta, batch, policy)

    # ---- reads and writes -------------------------------------------------------

    async def _oneshot(self, start, *args, value=False):
        """Starts a get, set or delete call (start: its xf_async_*, with args;
        value: a get, called back with the value) and awaits its end; returns
        (rc, the value or None); errors other than not found and superseded
        raise (nothing to fall back to)."""
        call = Call(self._engine)
        self._engine.start(call, start, *args, value=value)
        await call.wait()
        if call.rc in (0, lib.XF_ENOTFOUND, lib.XF_ESUPERSEDED):
            return call.rc, call.value
        raise call.error_of()

    async def get(self, key: Key) -> Any:
        """xfetch.Cache.get, awaited: the cached value while within its ttl,
        else None; computes nothing, takes no lease (xf_async_get)."""
        return await get_of(AioFace(self), self._codec, key)

    async def _get_raw(self, key):
        kb = self._start(key)
        if self._near and self._enabled:
            value = self._near_serve(kb, ffi.NULL)
            if value is not NEAR_NOT_SERVED:
                return value
        return (await self._oneshot(lib.xf_async_get, kb, len(kb), value=True))[1]

    async def set(self, key: Key, value: Any, ttl: Any = None, *, stale: float = 0.0,
                  jitter: float = 0.0, tags: Iterable[str] | None = None) -> bool:
        """xfetch.Cache.set, awaited (xf_async_set): True when written,
        False when a newer value or a delete holds the entry."""
        return await set_of(AioFace(self), self._codec, key, value, ttl, stale=stale,
                            jitter=jitter, tags=tags)

    async def _set_raw(self, key, value, ttl=None, *, stale=0.0, jitter=0.0, tags=None):
        kb = self._start(key)
        buf = check_value(value)
        policy = self._policies.of_set(ttl, stale, jitter, tags)
        rc, _ = await self._oneshot(lib.xf_async_set, kb, len(kb), buf, len(buf), policy)
        return rc != lib.XF_ESUPERSEDED

    async def invalidate_tags(self, tags: Iterable[str]) -> None:
        """xfetch.Cache.invalidate_tags, awaited (xf_async_invalidate_tags)."""
        names = tag_names(tags)
        if not names:
            return
        array, keep = tag_array(names)
        self._ready()
        await self._oneshot(lib.xf_async_invalidate_tags, array, len(names))
        del keep  # copied by the call as it started

    async def clear(self) -> None:
        """xfetch.Cache.clear, awaited (xf_async_clear_namespace)."""
        if not self._config.namespace_tag:
            raise ValueError("clear() needs setup(..., namespace_tag=True)")
        self._ready()
        await self._oneshot(lib.xf_async_clear_namespace)

    async def delete(self, key: Key) -> None:
        """xfetch.Cache.delete, awaited (xf_async_delete)."""
        kb = self._start(key)
        await self._oneshot(lib.xf_async_delete, kb, len(kb))

    async def delete_many(self, keys: Iterable[Key]) -> None:
        """Removes each key's entry, the deletes pipelined."""
        await asyncio.gather(*[self.delete(k) for k in keys])

    # ---- stats and decorators -----------------------------------------------------

    def stats(self) -> dict[str, int]:
        """xfetch.Cache.stats's counters (the C handle's)."""
        s = dict(self._retired)
        if self._engine is not None:
            for name, n in self._counters(self._engine).items():
                s[name] += n
            s["connections"] = self._counters(self._engine)["connections"]
        s.update(self._config.codecs.counters())
        return s

    @staticmethod
    def _counters(engine):
        out = ffi.new("xf_stats *")
        engine.stats(out)
        return {name: getattr(out, name) for name in STAT_FIELDS}

    def cached(self, ttl: Any = None,
               key: str | Callable[..., str | bytes] | None = None,
               serializer: Any = None, *, namespace: str | None = None,
               version: Any = None, condition: Callable[[Any], bool] | None = None,
               **policy: Any) -> AsyncCachedDecorator:
        """Decorator for async def functions: xfetch.Cache.cached's, awaited."""
        from ._decorator import cached
        return cached(self, ttl, key=key, serializer=serializer, namespace=namespace,
                      version=version, condition=condition, **policy)

    def cached_many(self, ttl: Any = None, key: str | Callable[[Any], Key] = "{}",
                    serializer: Any = None, *, namespace: str | None = None,
                    version: Any = None, **policy: Any) -> Callable[[F], F]:
        """xfetch.Cache.cached_many for an async def taking a list of ids."""
        from ._decorator import cached_many
        return cached_many(self, ttl, key, serializer=serializer, namespace=namespace,
                           version=version, **policy)

