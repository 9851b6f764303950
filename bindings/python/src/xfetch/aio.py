"""xfetch.aio: the asyncio face of xfetch.Cache.

    cache = xfetch.aio.Cache("redis://127.0.0.1:6379/0", prefix="app:")
    value = await cache.get_or_compute("user:42", load_user, ttl=60.0)

    @cache.cached(ttl=60.0, serializer="json")
    async def profile(user_id): ...

The options, checks, results, decorators and the share are the core's, the
same as xfetch.Cache's (_core, _decorator); the decisions are the C
library's (the sans-I/O call and link, xf_call_* and xf_link_*: the same
state machine and connection engine as every other driver, the Redis
Cluster router, setup, tracking and reconnects included). This face only
waits and moves bytes: one socket per server the calls name (_aio_link: the
seed in use, or each cluster node; over TLS for rediss://, _aio_tls), calls
run on them (_aio_call), loaders plain or async def, waits asyncio sleeps.
The event loop is never blocked: no call waits on a thread."""
from __future__ import annotations

import asyncio
import inspect

from ._aio_call import steps
from ._aio_link import Links, now_ms
from ._aio_many import get_many
from ._aio_tls import context
from ._refresh import log_failure
from ._cache import Cache as SyncCache
from ._core import (NEAR_NOT_SERVED, Config, call_error, check_loader, check_not_loading,
                    check_value, enabled_now, key_bytes, near_value, outcome,
                    stats_of, value_of, _loading)
from ._errors import check
from ._policy import tag_array, tag_names, tagged
from ._face import AioFace
from ._native import ffi, lib
from ._setup import LateSetup
from ._types import Fetched
from ._values import Codecs, recover, values_of_many

_CALL = lib.XF_DRIVER_CALL  # the driver a near hit's events name (as the call's)

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
    is met by construction: one stream per server), the same calls, awaited.
    As xfetch.Cache, the constructor connects once to check the URL (a
    blocking connect, bounded by connect_timeout) unless lazy_connect; the
    streams are opened by the calls that need them, on their event loop. A
    Redis Cluster is routed by the C call as on xfetch.Cache (seed lists,
    ?cluster=, ?replica_reads=yes; MOVED, ASK, failover). A Cache belongs to
    one running event loop at a time."""

    _is_async = True  # for the decorators' face (_face)
    _label = "xfetch.aio.Cache"

    def _connect(self, url, **options):
        config = Config.of(url, "aio", options)
        fields = config.fields
        self._codec = config.codecs.default
        self._policies = config.policies
        opts = ffi.new("xf_options *", config.opts[0])
        opts.lazy_connect = 1  # no I/O: the calls name the server, this face connects
        out = ffi.new("xf_client **")
        check(lib.xf_client_open(out, opts))
        self._client = ffi.gc(out[0], lib.xf_client_close)
        tls = config.tls and (context(config.tls), bool(config.tls["cert_file"]))
        self._links = Links(self._client, fields, config.connect_timeout_ms / 1000,
                            tls or None, config.share)
        self._enabled = config.enabled  # the C client's bypass switch, as last set
        self._commons = self._policies.commons
        self._near = config.near  # the near hit's fast path
        # Scratch cdata for the hot path: used between two awaits only.
        self._callp = ffi.new("xf_call **")
        self._hostp = ffi.new("const char **")
        self._portp = ffi.new("int *")
        self._value = ffi.new("xf_value *")
        self._refreshes = set()  # background refreshes' tasks (_refresh)
        self._closing = False
        self._closed = False
        self._config = config  # last: set up (LateSetup)

    def __del__(self):
        # Dropped without close(): the loop's reader would keep the socket open
        links = self.__dict__.get("_links")
        if links is not None:
            links.drop("the Cache was dropped")

    async def close(self, timeout: float = 2.0) -> None:
        """Closes the streams; calls made afterwards open new ones. Background
        refreshes: none are started any more; running ones are waited for up
        to timeout seconds, then cancelled (their leases released when a
        stream can take it, else they expire). Nothing to do on a Cache not
        set up; setup() may be called again after it."""
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
            self._links.drop("closed", unbind=False)  # calls waiting still end

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def _start(self, key):
        """The key's bytes, with the loop and own-key checks every call makes."""
        kb = key_bytes(key)
        self._ready()
        if _loading.get():
            check_not_loading(self._config.namespace, kb, key)
        return kb

    def _ready(self):
        """What every call checks first: the running loop (bound to it) and
        the enabled switch (read by the C call as it starts)."""
        if self._links.loop is not asyncio.get_running_loop():
            self._links.bind()
        enabled = enabled_now(self._config)
        if enabled is not self._enabled:
            self._enabled = enabled
            lib.xf_client_set_enabled(self._client, 1 if enabled else 0)

    # ---- get-or-compute -------------------------------------------------------

    async def fetch(self, key: Key, loader: Loader, ttl: Any = None, beta: float = 1.0,
                    **policy: Any) -> Fetched:
        """Like get_or_compute, but returns Fetched(value, source)."""
        return await self._fetch_with(self._codec, key, loader, ttl, beta, **policy)

    fetch.__signature__ = inspect.signature(SyncCache.fetch)  # its keywords, checked there

    async def _fetch_with(self, codec, key, loader, ttl=None, beta=1.0, previous=False,
                          **policy):
        """fetch with codec (the Cache's, or a decorator's serializer); a
        value codec refuses is recomputed (_values.recover)."""
        kb = key_bytes(key)
        check_loader(loader)
        got = await self._run(key, codec.async_loader(kb, loader, previous),
                              self._policies.of_call(ttl, beta, **policy),
                              policy.get("lease", 5.0))
        return (self._config.codecs.fetched(codec, key, kb, got)
                or await recover(AioFace(self), codec, key, kb, loader,
                                 dict(policy, ttl=ttl, beta=beta, previous=previous)))

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
        tags = None
        if policy:
            if len(policy) != 1 or "tags" not in policy:
                return (await self._fetch_with(self._codec, key, loader, ttl, beta,
                                               **policy))[0]
            tags = policy["tags"]
        # ttl, beta and tags only (the common calls): a smaller memo than fetch's
        p = self._commons.get((ttl, beta, type(ttl), type(beta)))
        if p is None:
            p = self._policies.common(ttl, beta)
        if tags is not None:  # C serves it near once it knows it current for its tags
            tags = tag_names(tags)
            p = tagged(p, tags)
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
        """C xf_near_serve (policy NULL: a get), before anything is awaited:
        the value of a near hit (None: a kept not-found), or NEAR_NOT_SERVED:
        make the call (a draw that elected an early refresh is kept for it)."""
        v = self._value
        rc = lib.xf_near_serve(self._client, kb, len(kb), policy, _CALL,
                               self._config.events.near_count(), v)
        return NEAR_NOT_SERVED if rc == NEAR_NOT_SERVED else near_value(rc, v)

    async def _run(self, key, loader, policy, lease):
        kb = self._start(key)
        check_loader(loader)
        if self._near and self._enabled:  # tagged: only when C knows it current for its tags
            value = self._near_serve(kb, policy)
            if value is not NEAR_NOT_SERVED:
                return Fetched(value, None if value is None else "cache")
        out = self._callp
        check(lib.xf_call_start(out, self._client, kb, len(kb), policy, now_ms()))
        call = out[0]
        exc, took = await steps(self, call, loader, key, kb)
        if policy.background_refresh == lib.XF_BACKGROUND_ON:  # a won refresh, handed over
            refresh = lib.xf_call_take_refresh(call)
            if refresh != ffi.NULL:
                self._spawn_refresh(refresh, loader, key, kb)
        try:
            value = self._value
            rc = lib.xf_call_result(call, value)
            if rc == 0 and exc is None:  # the hot path
                return value_of(value)
            return outcome(rc, value, exc, key, kb, self._config.failures,
                           lambda: call_error(rc, call), self._config.events, took, lease)
        finally:
            exc = None
            lib.xf_call_free(call)

    def _track(self, coro):
        """Runs coro as a task close() drains (a load a timed-out call left)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    def _spawn_refresh(self, call, loader, key, kb):
        """Runs C refresh call as a task the Cache tracks (close() drains it);
        closing: not started (its lease expires)."""
        if self._closing:
            lib.xf_call_free(call)
            return
        self._track(self._refresh(call, loader, key, kb))

    async def _refresh(self, call, loader, key, kb):
        exc, _ = await steps(self, call, loader, key, kb)  # cancelled: abandoned there
        try:
            rc = lib.xf_call_result(call, ffi.NULL)
            if exc is not None or rc != 0:
                log_failure(key, exc if exc is not None else call_error(rc, call))
        finally:
            exc = None
            lib.xf_call_free(call)

    async def get_many(self, keys: Iterable[Key], loader: Callable[..., Any], ttl: Any = None,
                       beta: float = 1.0, *, batch: bool = False,
                       **policy: Any) -> dict[Key, Any]:
        """xfetch.Cache.get_many, awaited: the keys' calls pipelined on the
        stream (one round trip for the reads), loader(key) awaited for each
        key this caller must compute, or with batch=True loader(list of keys)
        once per round with every such key, returning a mapping. **policy:
        every keyword of get_or_compute, for every key."""
        return await self._get_many_with(self._codec, keys, loader, ttl, beta, batch=batch,
                                         **policy)

    async def _get_many_with(self, codec, keys, loader, ttl=None, beta=1.0, *, batch=False,
                             **policy):
        check_loader(loader)
        return await values_of_many(AioFace(self), codec, keys, loader, batch,
                                    dict(policy, ttl=ttl, beta=beta))

    async def _get_many_raw(self, keys, loader, ttl=None, beta=1.0, *, batch=False, **policy):
        return await get_many(self._policies, self._links, self._fetch_raw, keys, loader, ttl,
                              beta, batch, policy)

    # ---- reads and writes -------------------------------------------------------

    async def _oneshot(self, start, *args, detail=True):
        """Starts a get, set or delete call (start: its xf_call_start_*, with
        args; detail: a refusal names the client's message) and runs it
        (SEND steps only) to its end; returns (rc, value or None); errors
        other than not found and superseded raise (nothing to fall back to)."""
        out = ffi.new("xf_call **")
        check(start(out, self._client, *args, now_ms()), self._client if detail else ffi.NULL)
        call = out[0]
        await steps(self, call)
        try:
            rc = lib.xf_call_result(call, self._value)
            if rc == 0:
                return rc, (value_of(self._value)[0] if self._value.data else None)
            if rc in (lib.XF_ENOTFOUND, lib.XF_ESUPERSEDED):
                return rc, None
            raise call_error(rc, call)
        finally:
            lib.xf_call_free(call)

    async def get(self, key: Key) -> Any:
        """xfetch.Cache.get, awaited: the cached value while within its ttl,
        else None; computes nothing, takes no lease (xf_call_start_get)."""
        return await self._get_with(self._codec, key)

    async def _get_with(self, codec, key):
        return self._config.codecs.read(codec, key, await self._get_raw(key))

    async def _get_raw(self, key):
        kb = self._start(key)
        if self._near and self._enabled:
            value = self._near_serve(kb, ffi.NULL)
            if value is not NEAR_NOT_SERVED:
                return value
        return (await self._oneshot(lib.xf_call_start_get, kb, len(kb), detail=False))[1]

    async def set(self, key: Key, value: Any, ttl: Any = None, *, stale: float = 0.0,
                  jitter: float = 0.0, tags: Iterable[str] | None = None) -> bool:
        """xfetch.Cache.set, awaited (xf_call_start_set): True when written,
        False when a newer value or a delete holds the entry."""
        return await self._set_with(self._codec, key, value, ttl, stale=stale, jitter=jitter,
                                    tags=tags)

    async def _set_with(self, codec, key, value, ttl=None, *, stale=0.0, jitter=0.0,
                        tags=None):
        return await self._set_raw(key, Codecs.for_set(codec, key, value), ttl,
                                   stale=stale, jitter=jitter, tags=tags)

    async def _set_raw(self, key, value, ttl=None, *, stale=0.0, jitter=0.0, tags=None):
        kb = self._start(key)
        buf = check_value(value)
        policy = self._policies.of_set(ttl, stale, jitter, tags)
        rc, _ = await self._oneshot(lib.xf_call_start_set, kb, len(kb), buf, len(buf), policy)
        return rc != lib.XF_ESUPERSEDED

    async def invalidate_tags(self, tags: Iterable[str]) -> None:
        """xfetch.Cache.invalidate_tags, awaited (xf_call_start_invalidate_tags)."""
        names = tag_names(tags)
        if not names:
            return
        array, keep = tag_array(names)
        self._ready()
        await self._oneshot(lib.xf_call_start_invalidate_tags, array, len(names))
        del keep  # copied by the call as it started

    async def clear(self) -> None:
        """xfetch.Cache.clear, awaited (xf_call_start_clear_namespace)."""
        if not self._config.namespace_tag:
            raise ValueError("clear() needs setup(..., namespace_tag=True)")
        self._ready()
        await self._oneshot(lib.xf_call_start_clear_namespace)

    async def delete(self, key: Key) -> None:
        """xfetch.Cache.delete, awaited (xf_call_start_delete)."""
        kb = self._start(key)
        await self._oneshot(lib.xf_call_start_delete, kb, len(kb), detail=False)

    async def delete_many(self, keys: Iterable[Key]) -> None:
        """Removes each key's entry, the deletes pipelined on the stream."""
        await asyncio.gather(*[self.delete(k) for k in keys])

    # ---- stats and decorators -----------------------------------------------------

    def stats(self) -> dict[str, int]:
        """xfetch.Cache.stats's counters (the C call's and link's)."""
        s = stats_of([self._client])
        s["connections"] = self._links.connected()
        s.update(self._config.codecs.counters())
        return s

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

