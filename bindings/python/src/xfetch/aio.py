"""xfetch.aio: the asyncio twin of xfetch.Cache.

    cache = xfetch.aio.Cache("redis://127.0.0.1:6379/0", prefix="app:")
    value = await cache.get_or_compute("user:42", load_user, ttl=60.0)

    @cache.cached(ttl=60.0, serializer="json")
    async def profile(user_id): ...

The decisions are the C library's (the sans-I/O call, xf_call_*: the same
state machine as every other driver); this module only moves bytes on one
asyncio stream per Cache, runs loaders (plain or async def) and sleeps with
asyncio. Concurrent calls pipeline their commands on the stream; replies are
matched in order. The event loop is never blocked: no call waits on a thread.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import time

from . import _decorator
from ._cache import SOURCES, Fetched, _key_bytes, _seconds_ms
from ._errors import AuthError, ConnectionError, Error, check, error_for
from ._native import ffi, lib
from ._policy import PolicyCache
from ._url import parse_url

from typing import Any, Awaitable, Callable, Union  # noqa: E402

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
Loader = Callable[[], Union[Value, None, Awaitable[Union[Value, None]]]]

log = logging.getLogger("xfetch")
_BYTES_LIKE = (bytes, bytearray, memoryview)


class _Stream(asyncio.Protocol):
    """One connection, as an asyncio protocol: requests written in order,
    replies parsed by the C reader as bytes arrive (in the loop's own read
    callback: no reader task, one loop iteration less per reply) and handed to
    the oldest waiting request."""

    def __init__(self, timeout):
        self.timeout = timeout
        out = ffi.new("xf_reader **")
        check(lib.xf_reader_open(out))
        self.parser = ffi.gc(out[0], lib.xf_reader_close)
        self.reply = ffi.new("xf_reply **")
        self.waiting = collections.deque()  # futures, in request order
        self.broken = None  # the exception that ended the stream
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        try:
            check(lib.xf_reader_feed(self.parser, data, len(data)))
            while True:
                rc = lib.xf_reader_next(self.parser, self.reply)
                if rc != 0:
                    raise error_for(rc)
                reply = self.reply[0]
                if reply == ffi.NULL:
                    return
                fut = self.waiting.popleft() if self.waiting else None
                if fut is None or fut.done():
                    lib.xf_reply_free(reply)
                else:
                    fut.set_result(reply)
        except Error as e:
            self._break(e)

    def connection_lost(self, exc):
        self._break(ConnectionError(lib.XF_EIO, f"connection lost: {exc or 'closed'}"))

    def _break(self, exc):
        if self.broken is None:
            self.broken = exc
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    async def request(self, data):
        """Writes data and returns the cdata reply (owned by the caller)."""
        if self.broken:
            raise self.broken
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiting.append(fut)
        self.transport.write(data)
        # A timed-out or cancelled request keeps its place in the stream: its
        # reply is freed when it arrives (the future is done by then).
        timer = loop.call_later(self.timeout, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()

    async def close(self):
        self._break(ConnectionError(lib.XF_EIO, "closed"))


def _expire(fut):
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError("no reply within the command timeout"))


def _command(*args):
    """RESP encoding of a setup command (AUTH, SELECT)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Cache:
    """The asyncio twin of xfetch.Cache: the same arguments (but share,
    max_connections and lazy_connect: one stream, opened by the first call),
    the same calls, awaited. A Redis Cluster is not routed here: point it at
    a standalone server (a cluster URL raises ValueError when it says
    cluster=on; an auto-detected cluster answers MOVED: RedisError)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str | bytes = "",
                 timeout: float = 1.0, connect_timeout: float | None = None,
                 breaker: float = 1.0, seed: int | None = None,
                 max_key_len: int | None = None, max_value_len: int | None = None) -> None:
        fields = parse_url(url)
        if fields["cluster"] == 1:
            raise ValueError("xfetch.aio does not route a Redis Cluster: use xfetch.Cache")
        if "," in (fields["host"] or ""):
            raise ValueError("xfetch.aio takes one server, not a seed list")
        self._fields = fields
        self._timeout = _seconds_ms("timeout", timeout, 1000) / 1000
        self._connect_timeout = _seconds_ms("connect_timeout", connect_timeout,
                                            round(self._timeout * 1000)) / 1000
        self._breaker = breaker
        prefix_b = prefix.encode() if isinstance(prefix, str) else prefix
        self._keep = ffi.new("char[]", prefix_b)
        opts = ffi.new("xf_options *", {
            "key_prefix": self._keep, "seed": seed or 0, "lazy_connect": 1,
            "cluster": 2,  # XF_CLUSTER_OFF: this client is never connected
            "max_key_len": max_key_len or 0, "max_value_len": max_value_len or 0})
        out = ffi.new("xf_client **")
        check(lib.xf_client_open(out, opts))
        self._client = ffi.gc(out[0], lib.xf_client_close)  # configuration only: no I/O
        self._policies = PolicyCache()
        # Scratch cdata for the hot path: used between two awaits only.
        self._callp = ffi.new("xf_call **")
        self._size = ffi.new("size_t *")
        self._value = ffi.new("xf_value *")
        self._stream = None
        self._opening = None
        self._retry_after = 0.0
        self._prefix = prefix

    def __repr__(self):
        f = self._fields
        where = (f"unix://{f['unix_path']}" if f["unix_path"] else
                 f"redis://{f['host']}:{f['port']}") + f"/{f['db']}"
        return f"<xfetch.aio.Cache {where} prefix={self._prefix!r}>"

    # ---- the stream ---------------------------------------------------------------

    async def _open(self):
        f = self._fields
        loop = asyncio.get_running_loop()
        make = lambda: _Stream(self._timeout)  # noqa: E731
        if f["unix_path"]:
            conn = loop.create_unix_connection(make, f["unix_path"])
        else:
            conn = loop.create_connection(make, f["host"], f["port"])
        _, stream = await asyncio.wait_for(conn, self._connect_timeout)
        setup = []
        if f["password"] is not None:
            setup.append(("AUTH", f["username"] or "default", f["password"]))
        if f["db"]:
            setup.append(("SELECT", str(f["db"])))
        for args in setup:
            reply = await stream.request(_command(*args))
            msg, n = ffi.new("const char **"), ffi.new("size_t *")
            refused = lib.xf_reply_is_error(reply, msg, n)
            text = ffi.unpack(msg[0], n[0]).decode(errors="replace") if refused else ""
            lib.xf_reply_free(reply)
            if refused:
                await stream.close()
                raise AuthError(lib.XF_EAUTH, f"{args[0]}: {text}")
        return stream

    async def _connection(self):
        """The open stream, opening one if needed (one opener at a time); a
        failure arms the breaker: calls fail open without trying until then."""
        if self._stream is not None and not self._stream.broken:
            return self._stream
        if time.monotonic() < self._retry_after:
            raise ConnectionError(lib.XF_ECONNECT, "circuit open after a connection failure")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        opening = self._opening
        try:
            self._stream = await asyncio.shield(opening)
            return self._stream
        except Error:  # AUTH / SELECT refused: loud, not a fail-open
            raise
        except (OSError, asyncio.TimeoutError) as e:
            self._retry_after = time.monotonic() + self._breaker
            raise ConnectionError(lib.XF_ECONNECT, f"connect: {e}") from e
        finally:
            if self._opening is opening and opening.done():
                self._opening = None

    async def close(self) -> None:
        """Closes the stream; calls made afterwards open a new one."""
        if self._stream is not None:
            await self._stream.close()
            self._stream = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # ---- the API ----------------------------------------------------------------

    async def fetch(self, key: Key, loader: Loader, ttl: float, beta: float = 1.0, *,
                    lease: float = 5.0, wait: float = 5.0, stale: float = 0.0,
                    stale_if_error: float = 0.0, negative_ttl: float = 0.0,
                    jitter: float = 0.0, on_wait_timeout: str = "load") -> Fetched:
        """Like get_or_compute, but returns Fetched(value, source)."""
        kb = _key_bytes(key)
        if not callable(loader):
            raise TypeError(f"loader must be callable, not {type(loader).__name__}")
        policy = self._policies.get((ttl, beta, lease, wait, stale, stale_if_error,
                                     negative_ttl, jitter, on_wait_timeout))
        out = self._callp
        check(lib.xf_call_start(out, self._client, kb, len(kb), policy))
        call = out[0]
        exc = None
        try:
            step = lib.xf_call_next(call)
            while step != lib.XF_CALL_DONE:
                if step == lib.XF_CALL_SEND:
                    step = await self._send(call)
                elif step == lib.XF_CALL_LOAD:
                    step, exc = await self._load(call, loader, lease, key)
                else:
                    await asyncio.sleep(lib.xf_call_wait_ms(call) / 1000)
                    step = lib.xf_call_woke(call)
            value = self._value
            rc = lib.xf_call_result(call, value)
            if rc == 0:
                try:
                    result = Fetched(ffi.unpack(value.data, value.len), SOURCES[value.source])
                finally:
                    lib.xf_value_free(value)
                if exc is not None:
                    log.warning("loader for %r failed; served the %s value", key,
                                result.source, exc_info=exc)
                return result
            if rc == lib.XF_ENOTFOUND:
                return Fetched(None, None)
            if exc is not None:
                raise exc
            msg = ffi.string(lib.xf_call_errmsg(call)).decode(errors="replace")
            raise type(error_for(rc))(rc, msg)
        finally:
            exc = None
            lib.xf_call_free(call)

    async def _send(self, call):
        n = self._size
        data = ffi.unpack(lib.xf_call_request(call, n), n[0])
        stream = self._stream
        if stream is None or stream.broken:
            try:
                stream = await self._connection()
            except ConnectionError:
                return lib.xf_call_io_failed(call, lib.XF_ECONNECT)
        try:
            reply = await stream.request(data)
        except (Error, OSError, asyncio.TimeoutError):
            return lib.xf_call_io_failed(call, lib.XF_EIO)
        return lib.xf_call_reply(call, reply)

    async def _load(self, call, loader, lease, key):
        t0 = time.monotonic()
        try:
            value = loader()
            if inspect.isawaitable(value):
                value = await value
        except Exception as e:  # nothing is cached; raised (or logged) at the end
            return lib.xf_call_load_failed(call, -1), e
        took = time.monotonic() - t0
        if took > lease:
            log.warning("loader for %r took %.3f s, longer than its lease (%.3f s): other "
                        "callers may have run it too; pass lease= above the loader's time",
                        key, took, lease)
        if value is None:
            return lib.xf_call_not_found(call), None
        if not isinstance(value, _BYTES_LIKE):
            return lib.xf_call_load_failed(call, -1), TypeError(
                f"the loader must return bytes or None, not {type(value).__name__}")
        buf = ffi.from_buffer(value)
        return lib.xf_call_loaded(call, buf, len(buf)), None

    async def get_or_compute(self, key: Key, loader: Loader, ttl: float, beta: float = 1.0,
                             **policy: Any) -> bytes | None:
        """Returns the bytes cached under key, awaiting loader() (a plain
        function or an async def) to compute them when missing, expired or
        elected for early recomputation. Same keywords and errors as
        xfetch.Cache.get_or_compute."""
        return (await self.fetch(key, loader, ttl, beta, **policy))[0]

    async def set(self, key: Key, value: Value, ttl: float, *, stale: float = 0.0,
                  jitter: float = 0.0) -> bool:
        """Writes value for key as if a loader had produced it now (the C
        sans-I/O call of xf_set): True when written, False when a newer value
        or a delete holds the entry (as xfetch.Cache.set)."""
        kb = _key_bytes(key)
        if not isinstance(value, _BYTES_LIKE):
            raise TypeError(f"value must be bytes-like, not {type(value).__name__}")
        buf = ffi.from_buffer(value)
        policy = self._policies.get((ttl, 1.0, 5.0, 5.0, stale, 0.0, 0.0, jitter, "load"))
        out = self._callp
        check(lib.xf_call_start_set(out, self._client, kb, len(kb), buf, len(buf), policy),
              self._client)
        return await self._run_one(out[0]) != lib.XF_ESUPERSEDED

    async def delete(self, key: Key) -> None:
        """Removes key's entry (value and lease); no error if it is absent."""
        kb = _key_bytes(key)
        out = self._callp
        check(lib.xf_call_start_delete(out, self._client, kb, len(kb)), self._client)
        await self._run_one(out[0])

    async def _run_one(self, call):
        """Sends a set's or delete's call to its end; raises its error but
        XF_ESUPERSEDED, which it returns (else 0)."""
        try:
            step = lib.xf_call_next(call)
            while step != lib.XF_CALL_DONE:
                step = await self._send(call)
            rc = lib.xf_call_result(call, ffi.NULL)
            if rc not in (0, lib.XF_ESUPERSEDED):
                msg = ffi.string(lib.xf_call_errmsg(call)).decode(errors="replace")
                raise type(error_for(rc))(rc, msg)
            return rc
        finally:
            lib.xf_call_free(call)

    def stats(self) -> dict[str, int]:
        """The counters of the C state machine (xfetch.Cache.stats's names)."""
        out = ffi.new("xf_stats *")
        lib.xf_client_stats(self._client, out)
        s = {name: getattr(out, name) for name, _ in ffi.typeof("xf_stats").fields}
        s["connections"] = int(self._stream is not None and not self._stream.broken)
        return s

    def cached(self, ttl, key=None, serializer=None, *, namespace=None, version=None,
               **policy):
        """Decorator for async def functions: caches the awaited result, with
        xfetch.Cache.cached's keys (canonical, self/cls left out), serializers,
        namespace and version; the wrapper has .key(*args)."""
        dumps, loads = _decorator._serializer(serializer)
        policy = dict(policy, ttl=ttl)
        _decorator._validate(**policy)

        def decorate(func):
            if not inspect.iscoroutinefunction(func):
                raise TypeError(f"{func.__qualname__} is not an async def: use "
                                f"xfetch.Cache.cached")
            make_key = _decorator._key_builder(func, key, namespace, version)
            method = _decorator._takes_self(func)

            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                async def load():
                    result = await func(*args, **kwargs)
                    return result if dumps is None or result is None else dumps(result)
                k = make_key(*(args[1:] if method else args), **kwargs)
                value = await self.get_or_compute(k, load, **policy)
                return value if loads is None or value is None else loads(value)

            wrapper.key = make_key
            wrapper.original = func
            return wrapper

        return decorate
