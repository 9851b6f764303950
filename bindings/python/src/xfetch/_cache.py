"""xfetch.Cache: the sync face. The options, checks and results are the
core's (_core); this face waits and does I/O on a pool of C blocking clients
(_pool), one per concurrent thread."""
from __future__ import annotations

import datetime

from ._core import (BYPASS, NEAR_NOT_SERVED, Config, check_loader, check_value, key_bytes,
                    outcome, unique_keys)
from ._errors import check, error_for
from ._face import SyncFace, drive, fetch_of, set_of
from ._native import ffi, lib
from ._policy import tag_array, tag_names
from ._pool import Pool
from ._runtime import CallState, batch_result
from ._setup import LateSetup
from ._types import Fetched  # a typed NamedTuple
from ._values import Unreadable, recover, values_of_many

from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar, Union  # noqa: E402

if TYPE_CHECKING:
    from ._types import CachedDecorator

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
F = TypeVar("F", bound=Callable[..., Any])
# The keywords' defaults, by name: `is` tells a call that passed none of them
# (the near hit's fast path) at the cost of a pointer comparison.
_5, _0, _LOAD = 5.0, 0.0, "load"
_BLOCKING = lib.XF_DRIVER_BLOCKING


class Cache(LateSetup):
    """A stampede-safe cache on one Redis server.

    Cache(url=None, prefix="", timeout=1.0, connect_timeout=None, breaker=1.0,
          seed=None, max_key_len=None, max_value_len=None, share=True,
          ttl=None, serializer="pickle", secret=None, ...)

    url: redis://[[user]:password@]host[:port][/db] or
         unix://[[user]:password@]/path/to/socket[?db=N]; None (the default):
         made now (at import time, for the decorators), connected later by
         setup(url, **options) at startup; a call before it raises
         xfetch.NotSetUpError.
    ttl: the calls' and decorators' default ttl: seconds, a timedelta or a
         string such as "30s", "10m", "2h"; None: every call names one.
    serializer: how values are stored: "pickle" (the default: any picklable
         object), "json" (tagged: Decimal, datetime, date, time, timedelta,
         UUID and bytes round-trip), "bytes" (values are bytes, stored as
         they are) or an object with dumps/loads.
    secret: str or bytes (or a list: the first signs, each verifies): every
         value is signed (HMAC-SHA256), and a value that does not verify is
         never decoded: it reads as a miss, counted in stats()["refused"],
         and is recomputed. Without it, whoever can write the Redis keys can
         run code in this process through pickle.
    prefix: prepended (UTF-8) to every key on Redis.
    timeout: per-command timeout, seconds; connect_timeout defaults to timeout.
    breaker: after a connection failure, seconds during which calls skip Redis
             (fail open: the loader runs, nothing is cached); 0 = never skip.
    seed: fixed PCG32 seed for the XFetch draws (tests); None = random.
    share: while Redis cannot be used, the Cache's threads join one load per
           key and reuse its value for up to its ttl (source "local"), instead
           of each running the loader (C xf_share; bounded, LRU); False = off.

    lazy_connect: True = do not connect now (a module-level Cache must not
           break start-up while Redis is down): the first call connects, or
           fails open.
    max_connections: None = one connection per concurrent caller (opened on
           demand and kept); an int bounds them: callers beyond it wait for one.
           A call made from inside a loader (or a decorated function calling
           another) reuses its thread's connection, so nesting never opens more.

    on_event: None, or a callable given an xfetch.Event for each thing the
           cache does (hit, miss, load_done with its duration, breaker_opened,
           ...), synchronously in the calling thread: keep it quick. The
           `xfetch` logger and xfetch.metrics are fed by the same events.
    entry_format: the format of the entries this Cache writes on Redis: None
           = the C library's default, 2 = one string whose hit is a single
           GET (a batch one MGET), 1 = a hash (HMGET), for a fleet that still
           runs a pre-release build reading hashes only. Every client of this
           version reads both (docs/design.md, "The entry on Redis").
    enabled: False = bypass: every call runs the loader and nothing is sent
           to Redis (no connection is made); see also disabled().
    background_refresh: the calls' default for background_refresh= (see
           get_or_compute): True (default) = an early refresh runs on the
           Cache's two refresh threads while the winning call returns the
           current value; False = in the winning call.
    refresh_ahead: the calls' default for refresh_ahead= (see get_or_compute;
           None: the C default).
    near_cache_bytes: 0 = off (default); N = keep up to N bytes of values
           read from Redis in this process (C xf_share near cache): a hit on
           them sends nothing, kept correct by Redis' CLIENT TRACKING (a write
           anywhere invalidates the key, own set/delete drop it at once), and
           callers waiting for another caller's load wake on its write. Needs
           share=True and Redis 6+ (plain or rediss://).
    write_fence: None = on when near_cache_bytes > 0 (default), True = always,
           False = never. A fenced write (set, delete, a load's write) sends
           one PING after the write's reply and returns after its answer: by
           then Redis has sent the invalidations the write caused, so no near
           cache of the fleet serves the old value once the write returned
           (one round trip more per write; docs/design.md, "The near cache"). Turn it on
           in a writer without a near cache whose readers have one.
    namespace_tag: True = every entry this Cache writes carries the tag of its
           prefix, so that clear() invalidates all of them in O(1) (one write,
           in every process); each call then reads that tag's version (with
           the entry on standalone Redis, one more command on Redis Cluster,
           none while the near cache keeps it). Every Cache of the prefix
           must set it.
    compress_min_bytes: values of at least this many bytes (as the serializer
           wrote them) are stored zstd-compressed when that makes them smaller;
           0 (default) = off. Every client of this version reads compressed
           entries; an older one reloads them, so turn it on once the whole
           fleet runs this version. 1024 is a good value: small values stay
           as they are, large JSON or pickles shrink 3-10x.

    Thread-safe: each concurrent caller borrows its own connection from the
    Cache's pool (connections are opened on demand and kept). Fork-safe: a
    child process never uses the parent's connections. One connection is
    opened at construction, so a wrong URL or password raises here
    (xfetch.ConnectionError, xfetch.AuthError).
    """

    _is_async = False  # for the decorators' face (_face)

    def _connect(self, url, **options):
        # Fails fast on a wrong URL, password or db (a check that reports no
        # events), unless the service must start without Redis.
        config = Config.of(url, "sync", options)
        pool = Pool(config)
        self._closed = False
        self._config = config
        self._pool = pool
        self._codec = config.codecs.default
        self._policies = self._config.policies
        self._near = config.near and config.enabled  # the near hit's fast path
        self._events = self._config.events
        self._moved = set()  # the handles of loads a timed-out call left running

    def close(self, timeout: float = 2.0) -> None:
        """Closes the idle connections; ones in use close when their call ends.
        Further calls raise ValueError (until setup() again). Background
        refreshes: none are taken any more, queued ones are dropped, running
        ones are waited for up to timeout seconds, then left (their leases
        expire). Nothing to do on a Cache not set up."""
        pool = self.__dict__.get("_pool")
        if pool is None:
            return
        self._closed = True
        pool.refresher.close(timeout)
        pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the API ----------------------------------------------------------------

    def fetch(self, key: Key, loader: Callable[[], Any], ttl: Any = None,
              beta: float = 1.0, *, lease: float = _5, wait: float = _5,
              stale: float = _0, stale_if_error: float = _0, negative_ttl: float = _0,
              jitter: float = _0, on_wait_timeout: str = _LOAD,
              background_refresh: bool | None = None,
              refresh_ahead: float | None = None, tags: Iterable[str] | None = None,
              max_load: float | None = None, soft_timeout: float | None = None,
              hard_timeout: float | None = None,
              failsafe_throttle: float | None = None, tags_never_stale: bool = False,
              previous: bool = False) -> Fetched:
        """Like get_or_compute, but returns Fetched(value, source)."""
        return drive(fetch_of(SyncFace(self), self._codec, key, loader, ttl, beta, previous,
                              lease=lease, wait=wait,
                              stale=stale, stale_if_error=stale_if_error,
                              negative_ttl=negative_ttl, jitter=jitter,
                              on_wait_timeout=on_wait_timeout,
                              background_refresh=background_refresh,
                              refresh_ahead=refresh_ahead, tags=tags, max_load=max_load,
                              soft_timeout=soft_timeout, hard_timeout=hard_timeout,
                              failsafe_throttle=failsafe_throttle,
                              tags_never_stale=tags_never_stale))

    def _fetch_raw(self, key: Key, loader: Callable[[], Any], ttl: Any = None,
                   beta: float = 1.0, *, lease: float = _5, wait: float = _5,
                   stale: float = _0, stale_if_error: float = _0, negative_ttl: float = _0,
                   jitter: float = _0, on_wait_timeout: str = _LOAD,
                   background_refresh: bool | None = None,
                   refresh_ahead: float | None = None, tags=None,
                   max_load: float | None = None, soft_timeout: float | None = None,
                   hard_timeout: float | None = None,
                   failsafe_throttle: float | None = None,
                   tags_never_stale: bool = False) -> Fetched:
        """fetch of the bytes C caches (loader returns them)."""
        kb = key_bytes(key)
        check_loader(loader)
        policy = self._policies.of_call(ttl, beta, lease, wait, stale, stale_if_error,
                                        negative_ttl, jitter, on_wait_timeout,
                                        background_refresh, refresh_ahead, tags, max_load,
                                        soft_timeout, hard_timeout, failsafe_throttle,
                                        tags_never_stale)
        if self._near:  # a tagged hit: served when C knows it current for its tags
            value = self._near_serve(kb, policy)
            if value is not NEAR_NOT_SERVED:
                return Fetched(value, None if value is None else "cache")
        return self._call(key, kb, loader, policy, lease)

    def _call(self, key, kb, loader, policy, lease):
        """The get-or-compute on a connection of the pool (C xf_get_or_compute)."""
        if policy.soft_timeout_ms or policy.hard_timeout_ms:
            return self._call_bounded(key, kb, loader, policy)
        conn, saved = self._pool.enter()
        st = conn.state
        st.loader = loader
        st.load_s = 0.0
        try:
            v = conn.value
            rc = lib.xf_get_or_compute(conn.ptr, kb, len(kb), policy, lib._xf_py_loader,
                                       conn.handle, v)
            exc, st.exc, st.loader = st.exc, None, None
            return outcome(rc, v, exc, key, kb, st.failures, lambda: error_for(rc, conn.ptr),
                           self._config.events, st.load_s, lease)
        finally:
            exc = None
            self._pool.exit(conn, saved)

    def _call_bounded(self, key, kb, loader, policy):
        """_call under a soft or hard timeout: the loader runs on a worker of
        the C share and may go on after the call returned (C xf_load_moved),
        so it gets user data of its own, kept (self._moved) until it returns."""
        conn, saved = self._pool.enter()
        st = CallState(conn.state.failures)
        handle = ffi.new_handle(st)
        moved = self._moved
        moved.add(handle)

        def load(*previous):
            try:
                return loader(*previous)
            finally:
                moved.discard(handle)
        load.wants_previous = getattr(loader, "wants_previous", False)
        st.loader = load
        try:
            v = conn.value
            rc = lib.xf_get_or_compute(conn.ptr, kb, len(kb), policy, lib._xf_py_loader,
                                       handle, v)
            exc = None
            if lib.xf_load_moved(conn.ptr):  # its outcome is the worker's, not this call's
                st = CallState(conn.state.failures)
            else:
                moved.discard(handle)
                exc = st.exc
            return outcome(rc, v, exc, key, kb, st.failures, lambda: error_for(rc, conn.ptr),
                           self._config.events)
        finally:
            exc = None
            self._pool.exit(conn, saved)

    def get_or_compute(self, key: Key, loader: Callable[[], Any], ttl: Any = None,
                       beta: float = 1.0, *, lease: float = _5, wait: float = _5,
                       stale: float = _0, stale_if_error: float = _0,
                       negative_ttl: float = _0, jitter: float = _0,
                       on_wait_timeout: str = _LOAD,
                       background_refresh: bool | None = None,
                       refresh_ahead: float | None = None,
                       tags: Iterable[str] | None = None, max_load: float | None = None,
                       soft_timeout: float | None = None,
                       hard_timeout: float | None = None,
                       failsafe_throttle: float | None = None,
                       tags_never_stale: bool = False,
                       previous: bool = False) -> Any:
        """Returns the value cached under key, calling loader() to compute it
        when missing, expired or elected for early recomputation (XFetch).
        Across every client of the Redis server one caller at a time runs the
        loader for a key; the others wait for its value or serve the old one.

        key: str (UTF-8) or bytes. loader: a callable with no arguments that
        returns the value (any object the Cache's serializer takes: pickle by
        default; bytes with serializer="bytes") or None for "not found" (then
        None is returned, and cached for negative_ttl seconds when > 0).
        ttl: seconds, a timedelta or a string such as "10m" (None: the
        Cache's default). Other times are seconds: lease (how long a loader may hold the
        key), wait (how long a miss waits for another caller's loader), stale
        (serve an expired value this long while one caller refreshes it),
        stale_if_error, negative_ttl; jitter in [0, 1) shortens each ttl at
        random by up to that fraction; beta >= 0 is XFetch's eagerness, used
        with refresh_ahead < 0 (0 = never early, math.inf = always).
        on_wait_timeout: "load" or "fail"
        (raise xfetch.TimeoutError).

        background_refresh (None: the Cache's default, True): when this call
        wins an early refresh of a still-valid value, it returns that value
        at once and the loader runs on the Cache's refresh threads (the
        lease keeps it the only one); False: the loader runs in this call. A
        refresh that fails keeps the value, is counted in
        stats()["load_errors"] and logged (WARNING, `xfetch`). Misses and
        expired values are still loaded in the call.
        refresh_ahead (None: the Cache's default): the early-refresh rule
        (C policy.refresh_ahead): None or 0 rate-aware with factor 1.5 (about
        1.5 x the loader's last time before expiry: about one load per ttl
        however hot the key), > 0 rate-aware with this factor, < 0 XFetch
        (beta) always. A finite number; else TypeError/ValueError.
        tags: names (str or bytes, at most 15) the value depends on:
        invalidate_tags(names) makes it a miss everywhere, in O(1). Give a
        key the same tags on every call; a tagged call reads the tags'
        versions with the entry on standalone Redis (one command), with one
        more command per master holding some of them on Redis Cluster, and
        not at all while the near cache keeps them (a warm tagged hit sends
        nothing). After an invalidation, an entry of the tag is never
        returned as fresh: it counts as a value that expired then, so stale
        and stale_if_error apply from the invalidation on (source "stale");
        tags_never_stale=True returns it in no case.

        The loader under control (seconds; None: the default). max_load: a
        loader slower than its lease renews it (every third of the lease,
        from another thread) for up to this long (None: 60 s; at most the
        lease: never), so no second caller loads the key meanwhile; a
        process that dies stops renewing and the key is free again within
        the lease. soft_timeout: a call that has a value to give (an early
        refresh, a stale value) returns it once its load has run this long;
        the load goes on, on the Cache's refresh threads, and is cached.
        hard_timeout: no call waits longer for a load: it raises
        xfetch.TimeoutError (or returns a stale value within
        stale_if_error); its own load goes on and is cached.
        previous=True (conditional refresh): loader is called with one
        argument, an xfetch.Previous(value, validator, age) when the cache
        holds a value for the key (a refresh), else None; it may return
        xfetch.UNCHANGED (the entry keeps its value, not rewritten, and its
        life is extended as a write's would be) or xfetch.Validated(value,
        validator) to store a validator (e.g. an ETag) with the value.
        failsafe_throttle: after a failed load that returned the last good
        value (stale_if_error), every client of the fleet that sets it returns
        that value (source "stale", event "failsafe") for this long instead
        of calling its loader; then one caller loads again.

        An exception raised by loader propagates unchanged; nothing is cached
        and the lease is released. Library errors raise xfetch.Error
        subclasses; bad arguments raise TypeError/ValueError before any I/O.
        """
        if (lease is _5 and wait is _5 and stale is _0 and stale_if_error is _0
                and negative_ttl is _0 and jitter is _0 and on_wait_timeout is _LOAD
                and background_refresh is None and refresh_ahead is None
                and max_load is None and soft_timeout is None and hard_timeout is None
                and failsafe_throttle is None and not tags_never_stale and not previous):
            # fetch's steps, without its call and bigger memo (a str key and a
            # callable loader inline: the checks' cost is the hit's)
            kb = key.encode() if type(key) is str and key else key_bytes(key)
            if not callable(loader):
                check_loader(loader)
            p = self._policies.plan(ttl, beta, tags)  # tagged: near once C knows it current
            codec = self._codec
            value = self._near_serve(kb, p) if self._near else NEAR_NOT_SERVED
            if value is NEAR_NOT_SERVED:
                value = self._call(key, kb, codec.loader(kb, loader), p, _5)[0]
            if codec.raw or value is None:
                return value
            try:
                return codec.decode(kb, value)
            except Unreadable as e:
                self._config.codecs.count(key, e)
                return drive(recover(SyncFace(self), codec, key, kb, loader,
                                     {"ttl": ttl, "beta": beta, "tags": tags}))[0]
        return drive(fetch_of(SyncFace(self), self._codec, key, loader, ttl, beta, previous,
                              lease=lease, wait=wait,
                              stale=stale, stale_if_error=stale_if_error,
                              negative_ttl=negative_ttl, jitter=jitter,
                              on_wait_timeout=on_wait_timeout,
                              background_refresh=background_refresh,
                              refresh_ahead=refresh_ahead, tags=tags, max_load=max_load,
                              soft_timeout=soft_timeout, hard_timeout=hard_timeout,
                              failsafe_throttle=failsafe_throttle,
                              tags_never_stale=tags_never_stale))[0]

    def _near_get(self, key, policy):
        """(key's bytes, the near hit's value or NEAR_NOT_SERVED): the call's
        first step, for the decorators' near hits."""
        kb = key_bytes(key)
        return kb, self._near_serve(kb, policy) if self._near else NEAR_NOT_SERVED

    def _near_serve(self, kb, policy):
        """C xf_near_serve on an idle connection of the pool (policy NULL: a
        get): the near hit's draw, counters and events as the call's, in
        one C call; the value (None: a kept not-found), or NEAR_NOT_SERVED:
        make the call (the C client keeps a draw that elected an early refresh for
        it, and the connection goes back to the pool's end: the call's). A
        near hit needs no connection: with none idle under a free slot, it
        is served on a spare client (Pool.near_client), never waited for. Not
        in a loader's nested call (its own key must raise) nor under
        disabled()."""
        pool = self._pool
        if getattr(pool.tls, "conn", None) is not None or BYPASS.get():
            return NEAR_NOT_SERVED
        slots = pool.slots
        conn = None
        if slots is None or slots.acquire(False):
            try:
                conn = pool.idle.pop()
            except IndexError:
                if slots is not None:
                    slots.release()
        spare = conn is None
        if spare:
            conn = pool.near_client()
        rc = 0
        try:
            if not conn.enabled:
                conn.switch(True)
            v = conn.value
            rc = lib.xf_near_serve(conn.ptr, kb, len(kb), policy, _BLOCKING,
                                   self._events.near_count(), v)
            if rc != 0:
                # None: a kept not-found
                return NEAR_NOT_SERVED if rc == NEAR_NOT_SERVED else None
            try:
                return ffi.unpack(v.data, v.len)
            finally:
                lib.xf_value_free(v)
        finally:
            if spare:
                if rc == NEAR_NOT_SERVED:  # its draw's election: the call's (Pool.enter)
                    pool.tls.spare = conn
                else:
                    pool.near_done(conn)
            else:
                if conn.gen == pool.gen and not pool.closed:
                    pool.idle.append(conn)  # Pool._release's common case, inline
                else:
                    pool._release(conn)
                if slots is not None:
                    slots.release()

    def set(self, key: Key, value: Any, ttl: Any = None, *, stale: float = 0.0,
            jitter: float = 0.0, tags: Iterable[str] | None = None) -> bool:
        """Writes value (encoded by the Cache's serializer; not None) for key
        as if a loader had produced it now (ttl None: the Cache's default).
        Returns True when written, False when the entry holds a value dated
        later than now (a newer write won, or the server's clock stepped back):
        nothing is written then. Other failures raise xfetch.Error. tags: as
        get_or_compute's (the versions are read before the write)."""
        return drive(set_of(SyncFace(self), self._codec, key, value, ttl, stale=stale,
                            jitter=jitter, tags=tags))

    def _set_raw(self, key, value, ttl=None, *, stale=0.0, jitter=0.0, tags=None):
        kb = key_bytes(key)
        buf = check_value(value)
        policy = self._policies.of_set(ttl, stale, jitter, tags)
        conn, saved = self._pool.enter()
        try:
            rc = lib.xf_set(conn.ptr, kb, len(kb), buf, len(buf), policy)
            if rc == lib.XF_ESUPERSEDED:
                return False
            check(rc, conn.ptr)
            return True
        finally:
            self._pool.exit(conn, saved)

    def delete(self, key: Key) -> None:
        """Removes key's entry (value and lease); no error if it is absent."""
        self.delete_many([key])

    def delete_many(self, keys: Iterable[Key]) -> None:
        """Removes each key's entry (value and lease), in order, on one
        connection; no error for absent keys."""
        kbs = [key_bytes(k) for k in keys]
        conn, saved = self._pool.enter()
        try:
            for kb in kbs:
                check(lib.xf_delete(conn.ptr, kb, len(kb)), conn.ptr)
        finally:
            self._pool.exit(conn, saved)

    def invalidate_tags(self, tags: Iterable[str]) -> None:
        """Invalidates each tag (str or bytes, at most 15): one write of the
        tag's own key, whatever the number of entries that carry it. Once it
        returns, no call of any process serves an entry loaded before it as
        fresh. Errors raise xfetch.Error (then call it again)."""
        names = tag_names(tags)
        if not names:
            return
        array, keep = tag_array(names)
        conn, saved = self._pool.enter()
        try:
            check(lib.xf_invalidate_tags(conn.ptr, array, len(names)), conn.ptr)
        finally:
            del keep
            self._pool.exit(conn, saved)

    def clear(self) -> None:
        """Invalidates every entry of this Cache's prefix in O(1) (one write),
        in every process: needs setup(..., namespace_tag=True), which makes
        every entry carry the prefix's tag (and each call read it: one more
        round trip). Raises ValueError without it."""
        if not self._config.namespace_tag:
            raise ValueError("clear() needs setup(..., namespace_tag=True)")
        conn, saved = self._pool.enter()
        try:
            check(lib.xf_clear_namespace(conn.ptr), conn.ptr)
        finally:
            self._pool.exit(conn, saved)

    def get(self, key: Key) -> Any:
        """The value cached under key while within its ttl, else None (absent,
        expired, a cached not-found, or a value the serializer or secret=
        refuses: counted). Computes nothing, takes no lease; one round trip
        for a hit. Errors raise (there is no loader to fail open to)."""
        data = self._get_raw(key)
        codec = self._codec
        if codec.raw or data is None:  # _get_with's steps inline: the hit's cost
            return data
        return self._config.codecs.read(codec, key, data)

    def _get_raw(self, key):
        kb = key.encode() if type(key) is str and key else key_bytes(key)
        if self._near:
            value = self._near_serve(kb, ffi.NULL)
            if value is not NEAR_NOT_SERVED:
                return value
        conn, saved = self._pool.enter()
        v = conn.value
        try:
            rc = lib.xf_get(conn.ptr, kb, len(kb), v)
            if rc == lib.XF_ENOTFOUND:
                return None
            check(rc, conn.ptr)
            try:
                return ffi.unpack(v.data, v.len)
            finally:
                lib.xf_value_free(v)
        finally:
            self._pool.exit(conn, saved)

    def get_many(self, keys: Iterable[Key], loader: Callable[[Any], Any],
                 ttl: Any = None, beta: float = 1.0, *, batch: bool = False,
                 **policy: Any) -> dict[Key, Any]:
        """get_or_compute for many keys at once on the C batch driver: the
        reads travel in one round trip (one script per Redis Cluster slot),
        and loader(key) runs for each key this caller must compute, its
        lease taken at its turn. Returns {key: bytes or None}, in the
        order given (duplicates once). The first exception a loader raises
        propagates once every key is done (the others' values are cached).
        batch=True: loader(list of keys) is called once per round with every
        key this caller must compute, and returns a mapping key -> bytes or
        None (a key left out is "not found"); an exception fails them all.
        With Redis down, a key another thread is loading is waited for (the
        Cache's share), not loaded again. Values go through the Cache's
        serializer; ones it refuses are computed again. **policy: every
        keyword of get_or_compute, for every key; background_refresh has no
        effect (the batch refreshes in the call); with max_load,
        soft_timeout or hard_timeout the keys go through a get_or_compute
        each, one after the other (with batch=True, loader([key]) per key)."""
        return drive(values_of_many(SyncFace(self), self._codec, keys, loader, batch,
                                    dict(policy, ttl=ttl, beta=beta)))

    def _get_many_raw(self, keys, loader, ttl=None, beta=1.0, *, batch=False, **options):
        originals = unique_keys(keys)
        check_loader(loader)
        policy, per_key = self._policies.of_many(ttl, beta, options)
        n = len(originals)
        if n == 0:
            return {}
        if per_key:
            return self._get_many_per_key(originals, loader, ttl, beta, batch, options)
        kbs = list(originals)
        cbufs = [ffi.from_buffer(kb) for kb in kbs]
        ckeys = ffi.new("const char *[]", [ffi.cast("const char *", b) for b in cbufs])
        clens = ffi.new("size_t[]", [len(kb) for kb in kbs])
        values = ffi.new("xf_value[]", n)
        rcs = ffi.new("int[]", n)
        conn, saved = self._pool.enter()
        st = conn.state
        st.loader, st.keys, st.exc = loader, originals, None
        try:
            if batch:
                check(lib.xf_get_or_compute_many_batch(conn.ptr, n, ckeys, clens, policy,
                                                       lib._xf_py_batch_loader, conn.handle,
                                                       values, rcs), conn.ptr)
            else:
                check(lib.xf_get_or_compute_many(conn.ptr, n, ckeys, clens, policy,
                                                 lib._xf_py_key_loader, conn.handle, values,
                                                 rcs), conn.ptr)
            exc, st.exc, st.loader = st.exc, None, None
            out, first_error = {}, None
            for i, kb in enumerate(kbs):
                if rcs[i] == 0:
                    out[originals[kb]] = ffi.unpack(values[i].data, values[i].len)
                    lib.xf_value_free(ffi.addressof(values, i))
                elif rcs[i] == lib.XF_ENOTFOUND:
                    out[originals[kb]] = None
                elif first_error is None:
                    first_error = error_for(rcs[i], conn.ptr)
            if exc is not None:
                raise exc
            if first_error is not None:
                raise first_error
            return out
        finally:
            for i in range(n):
                lib.xf_value_free(ffi.addressof(values, i))
            exc = None
            self._pool.exit(conn, saved)

    def _get_many_per_key(self, originals, loader, ttl, beta, batch, policy):
        """_get_many_raw with a get-or-compute per key (PolicyCache.PER_KEY)."""
        out, first_error = {}, None
        for key in originals.values():
            if batch:
                def load(key=key):
                    return batch_result(loader([key])).get(key)
            else:
                def load(key=key):
                    return loader(key)
            try:
                out[key] = self._fetch_raw(key, load, ttl, beta,
                                           **dict(policy, background_refresh=False))[0]
            except Exception as e:  # the first is raised once every key is done
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return out

    def stats(self) -> dict[str, int]:
        """Counters of this Cache in this process (a fork child starts at 0):
        hits, misses, early, loads, load_errors, lease_lost, waits, stale,
        uncached, redis_errors, superseded, local, redirects, map_refreshes
        (Redis Cluster), malformed (entries not as xfetch writes them: each a
        miss, recomputed), bypassed (calls made while disabled: enabled=False
        or disabled()), near_hits (hits served from the near cache, also in
        hits), near_evictions, fence_failed (write fences whose PING failed
        after an acknowledged write: the write stood), tag_invalidated (entries
        a tagged call refused: a tag they carry was invalidated since they
        were loaded; also misses), failsafe (stale values served because a
        load of the key failed lately, failsafe_throttle; also stale), refused (values whose
        signature did not verify, secret=) and undecodable (values the
        serializer could not read: each a miss, recomputed), plus
        connections (clients open now)."""
        return dict(self._pool.stats(), **self._config.codecs.counters())

    def cached(self, ttl: Any = None,
               key: str | Callable[..., str | bytes] | None = None,
               serializer: Any = None, *, namespace: str | None = None,
               version: Any = None, condition: Callable[[Any], bool] | None = None,
               **policy: Any) -> CachedDecorator:
        """Decorator: caches the function's result; see xfetch.cached."""
        from ._decorator import cached
        return cached(self, ttl, key=key, serializer=serializer, namespace=namespace,
                      version=version, condition=condition, **policy)

    def cached_many(self, ttl: Any = None, key: str | Callable[[Any], Key] = "{}",
                    serializer: Any = None, *, namespace: str | None = None,
                    version: Any = None, **policy: Any) -> Callable[[F], F]:
        """Decorator for a function that takes a list of ids and returns a
        mapping id -> result (an id left out is "not found"); see
        xfetch._decorator.cached_many."""
        from ._decorator import cached_many
        return cached_many(self, ttl, key, serializer=serializer, namespace=namespace,
                           version=version, **policy)
