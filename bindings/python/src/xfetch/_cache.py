"""xfetch.Cache: a pool of C clients (one connection each) behind a
thread-safe, fork-safe Pythonic API."""
from __future__ import annotations

import datetime
import logging
import os
import threading
import weakref

from ._errors import check, error_for
from ._native import ffi, lib
from ._policy import PolicyCache
from ._types import Fetched  # a typed NamedTuple
from ._runtime import CallState, Failures
from ._url import parse_url, tls_options

from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar, Union  # noqa: E402

if TYPE_CHECKING:
    from ._types import CachedDecorator

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
F = TypeVar("F", bound=Callable[..., Any])

SOURCES = {lib.XF_SOURCE_CACHE: "cache", lib.XF_SOURCE_LOADER: "loader",
           lib.XF_SOURCE_STALE: "stale", lib.XF_SOURCE_UNCACHED: "uncached",
           lib.XF_SOURCE_LOCAL: "local"}
STAT_FIELDS = [name for name, _ in ffi.typeof("xf_stats").fields]
_BYTES_LIKE = (bytes, bytearray, memoryview)
log = logging.getLogger("xfetch")


class _Conn:
    """One xf_client, used by one thread at a time. Its CallState carries the
    loader and the loader's exception for the call in progress; the state's
    handle is the loader's user data, so a call allocates nothing for the
    callback (and the state does not refer back to the connection)."""

    __slots__ = ("ptr", "value", "handle", "state", "gen", "share", "__weakref__")

    def __init__(self, ptr, gen, share, state, handle):
        self.ptr = ptr
        self.share = share  # the C client borrows it: it must outlive the client
        self.value = ffi.new("xf_value *")
        self.state, self.handle = state, handle  # the handle outlives the client
        self.gen = gen


def _key_bytes(key):
    if type(key) is str:
        key = key.encode("utf-8")
    elif isinstance(key, str):  # a str subclass (StrEnum, SafeString): its characters
        key = str.encode(key, "utf-8")
    elif type(key) is not bytes:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
        key = bytes(key)
    if not key:
        raise ValueError("key must not be empty")
    return key


def _seconds_ms(name, v, default_ms):
    if v is None:
        return default_ms
    if type(v) is bool or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(v).__name__}")
    ms = round(v * 1000) if v == v and v >= 0 and v < 2**31 / 1000 else -1
    if ms < 1:
        raise ValueError(f"{name} must be in [0.001, 2147483] seconds, not {v!r}")
    return ms


def _size(name, v):
    if v is None:
        return 0
    if type(v) is bool or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, not {v!r}")
    return v


_caches = weakref.WeakSet()


def _after_fork_in_child():
    for cache in list(_caches):
        cache._forget_parent_connections()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Cache:
    """A stampede-safe cache on one Redis server.

    Cache(url, prefix="", timeout=1.0, connect_timeout=None, breaker=1.0,
          seed=None, max_key_len=None, max_value_len=None, share=True)

    url: redis://[[user]:password@]host[:port][/db] or
         unix://[[user]:password@]/path/to/socket[?db=N]
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

    Thread-safe: each concurrent caller borrows its own connection from the
    Cache's pool (connections are opened on demand and kept). Fork-safe: a
    child process never uses the parent's connections. One connection is
    opened at construction, so a wrong URL or password raises here
    (xfetch.ConnectionError, xfetch.AuthError).
    """

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str | bytes = "",
                 timeout: float = 1.0, connect_timeout: float | None = None,
                 breaker: float = 1.0, seed: int | None = None,
                 max_key_len: int | None = None, max_value_len: int | None = None,
                 share: bool = True, lazy_connect: bool = False,
                 max_connections: int | None = None, ssl_ca_certs: str | None = None,
                 ssl_ca_path: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, ssl_check_hostname: bool | None = None,
                 ssl_cert_reqs: str | None = None) -> None:
        fields = parse_url(url)
        tls = tls_options(fields, ssl_ca_certs=ssl_ca_certs, ssl_ca_path=ssl_ca_path,
                          ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                          ssl_check_hostname=ssl_check_hostname, ssl_cert_reqs=ssl_cert_reqs)
        if not isinstance(prefix, (str, bytes)):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if seed is not None and (type(seed) is bool or not isinstance(seed, int)
                                 or not 0 < seed < 2**64):
            raise ValueError("seed must be None or an int in [1, 2**64)")
        if type(breaker) is bool or not isinstance(breaker, (int, float)):
            raise TypeError(f"breaker must be a number of seconds, not {type(breaker).__name__}")
        if not 0 <= breaker < 2**31 / 1000:
            raise ValueError(f"breaker must be >= 0 seconds, not {breaker!r}")
        strings = [s.encode() if isinstance(s, str) else s
                   for s in (fields["host"], fields["unix_path"], fields["username"],
                             fields["password"], prefix)]
        if any(s is not None and b"\0" in s for s in strings):
            raise ValueError("the URL and prefix must not contain NUL characters")
        self._keep = [ffi.new("char[]", s) if s is not None else ffi.NULL for s in strings]
        timeout_ms = _seconds_ms("timeout", timeout, 1000)
        self._opts = ffi.new("xf_options *", {
            "host": self._keep[0], "port": fields["port"], "unix_path": self._keep[1],
            "cluster": fields["cluster"], "read_from_replicas": fields["read_from_replicas"],
            "username": self._keep[2], "password": self._keep[3], "db": fields["db"],
            "connect_timeout_ms": _seconds_ms("connect_timeout", connect_timeout, timeout_ms),
            "command_timeout_ms": timeout_ms, "key_prefix": self._keep[4],
            "seed": seed or 0, "max_key_len": _size("max_key_len", max_key_len),
            "max_value_len": _size("max_value_len", max_value_len),
            "breaker_ms": round(breaker * 1000) if breaker > 0 else -1,
        })
        if tls is not None:  # rediss://: every connection of the pool over TLS
            for name in ("ca_file", "ca_dir", "cert_file", "key_file"):
                if tls[name] is not None:
                    self._keep.append(ffi.new("char[]", tls[name].encode()))
                    setattr(self._opts.tls, name, self._keep[-1])
            self._opts.tls.no_verify = tls["no_verify"]
            self._opts.tls.enable = 1
        self._where = (f"unix://{fields['unix_path']}" if fields["unix_path"] else
                       f"redis{'s' if tls else ''}://{fields['host']}:{fields['port']}") + f"/{fields['db']}"
        self._prefix = prefix
        self._seeded = seed is not None
        self._share = ffi.NULL
        self._failures = Failures()  # loader exceptions, for the share's followers
        if share:  # single-flight and a fallback cache while Redis is down
            out = ffi.new("xf_share **")
            check(lib.xf_share_open(out, ffi.NULL))
            self._share = ffi.gc(out[0], lib.xf_share_close)
        self._policies = PolicyCache()
        self._gen = 0
        self._fresh_process()
        self._closed = False
        if max_connections is not None and (type(max_connections) is not int
                                            or max_connections < 1):
            raise ValueError(f"max_connections must be None or an int >= 1, "
                             f"not {max_connections!r}")
        self._max_connections = max_connections
        self._fresh_slots()
        # Fail fast on a wrong URL or password, unless the service must start
        # without Redis (lazy_connect: the first call connects, or fails open).
        self._pool.append(self._open(lazy=bool(lazy_connect)))
        _caches.add(self)

    # ---- the connection pool ------------------------------------------------

    def _fresh_process(self):
        self._lock = threading.Lock()
        self._pool = []  # idle connections; list.pop/append are atomic
        self._all = weakref.WeakSet()  # every live connection, for stats()
        self._retired = dict.fromkeys(STAT_FIELDS, 0)
        self._opened = 0

    def _forget_parent_connections(self):
        # In a fork child. Idle connections are closed: that closes only the
        # child's copy of each socket, so the parent's connections live on.
        # Connections another parent thread was using at fork time may be
        # mid-command: they are abandoned untouched (never used, never freed).
        idle = set(map(id, self._pool))
        for conn in list(self._all):
            if id(conn) in idle:
                ffi.release(conn.ptr)
            else:
                ffi.gc(conn.ptr, None)
        self._gen += 1
        self._fresh_process()
        self._fresh_slots()

    def _open(self, lazy=True):
        # Pooled connections connect lazily: if Redis is down, the C client
        # fails open and its circuit breaker spares the connect timeouts.
        out = ffi.new("xf_client **")
        opts = ffi.new("xf_options *", self._opts[0])
        opts.lazy_connect = 1
        opts.share = self._share
        state = CallState(self._failures)
        handle = ffi.new_handle(state)
        opts.interrupt = lib._xf_py_interrupt  # a Ctrl-C ends a C wait at once
        opts.interrupt_ud = handle
        with self._lock:
            if self._seeded:  # reproducible, yet distinct draws per connection
                opts.seed = (self._opts.seed + 0x9E3779B97F4A7C15 * self._opened) % 2**64 or 1
            self._opened += 1
        rc = lib.xf_client_open(out, opts)
        if rc != 0:
            raise error_for(rc)
        ptr = ffi.gc(out[0], lib.xf_client_close)
        if not lazy:  # connect now, keeping the detail of a failure
            check(lib.xf_ping(ptr), ptr)
        conn = _Conn(ptr, self._gen, self._share, state, handle)
        with self._lock:
            self._all.add(conn)
        return conn

    def _fresh_slots(self):
        # max_connections bounds the connections in use (so, open) at once.
        self._slots = (threading.BoundedSemaphore(self._max_connections)
                       if self._max_connections else None)
        self._tls = threading.local()  # the connection this thread's call holds

    def _enter(self):
        """The connection for a call: the one this thread's outer call holds
        (a loader or decorated function calling the Cache again: the C client
        allows nested calls, so nesting never opens more connections), else
        one from the pool, waiting for a slot under max_connections."""
        outer = getattr(self._tls, "conn", None)
        if outer is not None and outer.gen == self._gen:
            st = outer.state
            saved = (st.loader, st.exc, st.load_s, st.keys, outer.value)
            st.loader = st.exc = st.keys = None
            outer.value = ffi.new("xf_value *")
            return outer, saved
        if self._slots is not None:
            self._slots.acquire()
        try:
            conn = self._acquire()
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise
        self._tls.conn = conn
        return conn, None

    def _exit(self, conn, saved):
        # A Ctrl-C that ended a C reply wait of a call with no loader (get,
        # set, delete) is raised here, never left for the next call.
        exc, conn.state.exc = conn.state.exc, None
        if saved is not None:  # back to the outer call on this connection
            st = conn.state
            st.loader, st.exc, st.load_s, st.keys, conn.value = saved
        else:
            self._tls.conn = None
            self._release(conn)
            if self._slots is not None:
                self._slots.release()
        if exc is not None and not isinstance(exc, Exception):
            raise exc

    def _acquire(self):
        try:
            return self._pool.pop()
        except IndexError:
            pass
        if self._closed:
            raise ValueError("the Cache is closed")
        return self._open()

    def _release(self, conn):
        if conn.gen == self._gen and not self._closed:
            self._pool.append(conn)
        elif conn.gen == self._gen:
            self._retire(conn)

    def _retire(self, conn):
        stats = ffi.new("xf_stats *")
        lib.xf_client_stats(conn.ptr, stats)
        with self._lock:
            for name in STAT_FIELDS:
                self._retired[name] += getattr(stats, name)
            self._all.discard(conn)
        ffi.release(conn.ptr)

    def close(self) -> None:
        """Closes the idle connections; ones in use close when their call ends.
        Further calls raise ValueError."""
        self._closed = True
        while True:
            try:
                conn = self._pool.pop()
            except IndexError:
                return
            self._retire(conn)

    def __repr__(self):  # never shows the password
        return f"<xfetch.Cache {self._where} prefix={self._prefix!r}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the API ----------------------------------------------------------------

    def fetch(self, key: Key, loader: Callable[[], Value | None], ttl: float,
              beta: float = 1.0, *, lease: float = 5.0, wait: float = 5.0,
              stale: float = 0.0, stale_if_error: float = 0.0, negative_ttl: float = 0.0,
              jitter: float = 0.0, on_wait_timeout: str = "load") -> Fetched:
        """Like get_or_compute, but returns Fetched(value, source)."""
        kb = _key_bytes(key)
        if not callable(loader):
            raise TypeError(f"loader must be callable, not {type(loader).__name__}")
        policy = self._policies.get((ttl, beta, lease, wait, stale, stale_if_error,
                                     negative_ttl, jitter, on_wait_timeout))
        conn, saved = self._enter()
        st = conn.state
        st.loader = loader
        st.load_s = 0.0
        try:
            v = conn.value
            rc = lib.xf_get_or_compute(conn.ptr, kb, len(kb), policy, lib._xf_py_loader,
                                       conn.handle, v)
            exc, st.exc, st.loader = st.exc, None, None
            if exc is not None and not isinstance(exc, Exception):
                lib.xf_value_free(v)
                raise exc  # KeyboardInterrupt, SystemExit: at once, whatever C did
            if rc == 0:
                try:
                    result = Fetched(ffi.unpack(v.data, v.len), SOURCES[v.source])
                finally:
                    lib.xf_value_free(v)
                if st.load_s > lease and result.source == "uncached":
                    # Its lease ran out and another caller took the key over
                    # (so loaded it too): the write was refused. The lease is
                    # twice the entry's last load time once one is cached, so
                    # this is a key's first slow load (or Redis was down).
                    log.warning("loader for %r took %.3f s, longer than its lease "
                                "(%.3f s), and its value was not cached: other callers "
                                "may have run it too; pass lease= above the loader's "
                                "time", key, st.load_s, lease)
                # A failed refresh may still serve a valid (or stale-if-error)
                # value: the loader's Exception is logged, not raised (it is
                # counted in stats()["load_errors"]).
                if exc is not None:
                    log.warning("loader for %r failed; served the %s value", key,
                                result.source, exc_info=exc)
                return result
            if rc == lib.XF_ENOTFOUND:
                return Fetched(None, None)
            if exc is not None:
                raise exc
            if rc == lib.XF_ELOADER:  # another thread's load of the key (the share)
                exc = st.failures.exception(kb)  # failed: its exception, not ours
                if exc is not None:
                    raise exc
            raise error_for(rc, conn.ptr)
        finally:
            exc = None
            self._exit(conn, saved)

    def get_or_compute(self, key: Key, loader: Callable[[], Value | None], ttl: float,
                       beta: float = 1.0, *, lease: float = 5.0, wait: float = 5.0,
                       stale: float = 0.0, stale_if_error: float = 0.0,
                       negative_ttl: float = 0.0, jitter: float = 0.0,
                       on_wait_timeout: str = "load") -> bytes | None:
        """Returns the bytes cached under key, calling loader() to compute them
        when missing, expired or elected for early recomputation (XFetch).
        Across every client of the Redis server one caller at a time runs the
        loader for a key; the others wait for its value or serve the old one.

        key: str (UTF-8) or bytes. loader: a callable with no arguments that
        returns bytes (bytearray, memoryview) or None for "not found" (then
        None is returned, and cached for negative_ttl seconds when > 0).
        Times are seconds: ttl (> 0), lease (how long a loader may hold the
        key), wait (how long a miss waits for another caller's loader), stale
        (serve an expired value this long while one caller refreshes it),
        stale_if_error, negative_ttl; jitter in [0, 1) shortens each ttl at
        random by up to that fraction; beta >= 0 is XFetch's eagerness (0 =
        never early, math.inf = always). on_wait_timeout: "load" or "fail"
        (raise xfetch.TimeoutError).

        An exception raised by loader propagates unchanged; nothing is cached
        and the lease is released. Library errors raise xfetch.Error
        subclasses; bad arguments raise TypeError/ValueError before any I/O.
        """
        return self.fetch(key, loader, ttl, beta, lease=lease, wait=wait, stale=stale,
                          stale_if_error=stale_if_error, negative_ttl=negative_ttl,
                          jitter=jitter, on_wait_timeout=on_wait_timeout)[0]

    def set(self, key: Key, value: Value, ttl: float, *, stale: float = 0.0,
            jitter: float = 0.0) -> bool:
        """Writes value (bytes-like) for key as if a loader had produced it now.
        Returns True when written, False when the entry holds a value dated
        later than now (a newer write won, or the server's clock stepped back):
        nothing is written then. Other failures raise xfetch.Error."""
        kb = _key_bytes(key)
        if not isinstance(value, _BYTES_LIKE):
            raise TypeError(f"value must be bytes-like, not {type(value).__name__}")
        buf = ffi.from_buffer(value)
        policy = self._policies.get((ttl, 1.0, 5.0, 5.0, stale, 0.0, 0.0, jitter, "load"))
        conn, saved = self._enter()
        try:
            rc = lib.xf_set(conn.ptr, kb, len(kb), buf, len(buf), policy)
            if rc == lib.XF_ESUPERSEDED:
                return False
            check(rc, conn.ptr)
            return True
        finally:
            self._exit(conn, saved)

    def delete(self, key: Key) -> None:
        """Removes key's entry (value and lease); no error if it is absent."""
        self.delete_many([key])

    def delete_many(self, keys: Iterable[Key]) -> None:
        """Removes each key's entry (value and lease), in order, on one
        connection; no error for absent keys."""
        kbs = [_key_bytes(k) for k in keys]
        conn, saved = self._enter()
        try:
            for kb in kbs:
                check(lib.xf_delete(conn.ptr, kb, len(kb)), conn.ptr)
        finally:
            self._exit(conn, saved)

    def get(self, key: Key) -> bytes | None:
        """The bytes cached under key while within their ttl, else None (absent,
        expired or a cached not-found). Computes nothing, takes no lease; one
        round trip. Errors raise (there is no loader to fail open to)."""
        kb = _key_bytes(key)
        conn, saved = self._enter()
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
            self._exit(conn, saved)

    def get_many(self, keys: Iterable[Key], loader: Callable[[Key], Value | None],
                 ttl: float, beta: float = 1.0, *, lease: float = 5.0, wait: float = 5.0,
                 stale: float = 0.0, stale_if_error: float = 0.0, negative_ttl: float = 0.0,
                 jitter: float = 0.0, on_wait_timeout: str = "load", batch: bool = False
                 ) -> dict[Key, bytes | None]:
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
        Cache's share), not loaded again."""
        originals = {}
        for k in keys:
            originals.setdefault(_key_bytes(k), k)
        if not callable(loader):
            raise TypeError(f"loader must be callable, not {type(loader).__name__}")
        policy = self._policies.get((ttl, beta, lease, wait, stale, stale_if_error,
                                     negative_ttl, jitter, on_wait_timeout))
        n = len(originals)
        if n == 0:
            return {}
        kbs = list(originals)
        cbufs = [ffi.from_buffer(kb) for kb in kbs]
        ckeys = ffi.new("const char *[]", [ffi.cast("const char *", b) for b in cbufs])
        clens = ffi.new("size_t[]", [len(kb) for kb in kbs])
        values = ffi.new("xf_value[]", n)
        rcs = ffi.new("int[]", n)
        conn, saved = self._enter()
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
            self._exit(conn, saved)

    def stats(self) -> dict[str, int]:
        """Counters of this Cache in this process (a fork child starts at 0):
        hits, misses, early, loads, load_errors, lease_lost, waits, stale,
        uncached, redis_errors, superseded, local, redirects, map_refreshes
        (Redis Cluster), malformed (entries not as xfetch writes them: each a
        miss, recomputed), plus connections (clients open now)."""
        out = ffi.new("xf_stats *")
        with self._lock:
            total = dict(self._retired)
            conns = list(self._all)
        for conn in conns:
            lib.xf_client_stats(conn.ptr, out)
            for name in STAT_FIELDS:
                total[name] += getattr(out, name)
        total["connections"] = len(conns)
        return total

    def cached(self, ttl: float | datetime.timedelta | Callable[[Any], float],
               key: str | Callable[..., str | bytes] | None = None,
               serializer: Any = None, *, namespace: str | None = None,
               version: Any = None, condition: Callable[[Any], bool] | None = None,
               **policy: Any) -> CachedDecorator:
        """Decorator: caches the function's result; see xfetch.cached."""
        from ._decorator import cached
        return cached(self, ttl, key=key, serializer=serializer, namespace=namespace,
                      version=version, condition=condition, **policy)

    def cached_many(self, ttl: float, key: str | Callable[[Any], Key],
                    serializer: Any = None, *, namespace: str | None = None,
                    version: Any = None, **policy: Any) -> Callable[[F], F]:
        """Decorator for a function that takes a list of ids and returns a
        mapping id -> result (an id left out is "not found"); see
        xfetch._decorator.cached_many."""
        from ._decorator import cached_many
        return cached_many(self, ttl, key, serializer=serializer, namespace=namespace,
                           version=version, **policy)
