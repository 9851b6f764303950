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
import functools
import inspect
import logging
import time

from ._cache import SOURCES, Fetched, _key_bytes, _seconds_ms
from ._errors import (ConnectionError, Error, InvalidArgumentError, UnavailableError, check,
                      error_for)
from ._native import ffi, lib
from ._policy import PolicyCache
from ._stream import _connect, _Stream
from ._url import parse_url

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Union  # noqa: E402

if TYPE_CHECKING:
    from ._types import AsyncCachedDecorator

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
Loader = Callable[[], Union[Value, None, Awaitable[Union[Value, None]]]]

log = logging.getLogger("xfetch")
# CLUSTER MYID answers a cluster node and is an error anywhere else (cluster
# support disabled, or not allowed to this user: then no cluster can be told,
# and a call on a key of another node gets MOVED as a RedisError).
_CLUSTER_MYID = b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nMYID\r\n"
_BYTES_LIKE = (bytes, bytearray, memoryview)
# _run compares steps with these literals (no attribute lookups on the hot path)
assert (lib.XF_CALL_SEND, lib.XF_CALL_LOAD, lib.XF_CALL_DONE) == (0, 1, 3)


def _now_ms() -> int:
    """The time every xf_call_* input carries: the C call reads no clock."""
    return int(time.monotonic() * 1000)


class Cache:
    """The asyncio twin of xfetch.Cache: the same arguments (but share,
    max_connections and lazy_connect: one stream, opened by the first call),
    the same calls, awaited. A Redis Cluster is not routed here: point it at
    a standalone server (a seed list or cluster=on URL raises ValueError; a
    server in cluster mode is told when the stream opens, with CLUSTER MYID,
    and every call raises InvalidArgumentError, a ValueError)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str | bytes = "",
                 timeout: float = 1.0, connect_timeout: float | None = None,
                 breaker: float = 1.0, seed: int | None = None,
                 max_key_len: int | None = None, max_value_len: int | None = None) -> None:
        fields = parse_url(url)
        if fields["tls"]:  # its own sockets (_stream.py) have no TLS yet
            raise ValueError("xfetch.aio does not speak TLS yet: use xfetch.Cache for rediss://")
        if fields["cluster"] == 1:
            raise ValueError("xfetch.aio does not route a Redis Cluster: use xfetch.Cache")
        if "," in (fields["host"] or ""):
            raise ValueError("xfetch.aio takes one server, not a seed list")
        self._fields = fields
        self._url = url
        self._timeout = _seconds_ms("timeout", timeout, 1000) / 1000
        self._connect_timeout = _seconds_ms("connect_timeout", connect_timeout,
                                            round(self._timeout * 1000)) / 1000
        self._breaker = breaker
        prefix_b = prefix.encode() if isinstance(prefix, str) else prefix
        self._keep = ffi.new("char[]", prefix_b)
        auth = {k: ffi.new("char[]", fields[k].encode())
                for k in ("username", "password") if fields[k] is not None}
        opts = ffi.new("xf_options *", {
            **auth, "db": fields["db"],  # for xf_call_setup: the C side's AUTH, SELECT
            "key_prefix": self._keep, "seed": seed or 0, "lazy_connect": 1,
            "cluster": 2,  # XF_CLUSTER_OFF: this client is never connected
            "max_key_len": max_key_len or 0, "max_value_len": max_value_len or 0})
        out = ffi.new("xf_client **")
        check(lib.xf_client_open(out, opts))
        self._client = ffi.gc(out[0], lib.xf_client_close)  # configuration only: no I/O
        self._policies = PolicyCache()
        self._fast_policies = {}
        # Scratch cdata for the hot path: used between two awaits only.
        self._callp = ffi.new("xf_call **")
        self._size = ffi.new("size_t *")
        self._value = ffi.new("xf_value *")
        self._stream = None
        self._opening = None
        self._retry_after = 0.0
        self._redis_errors = 0  # failed connects and requests (the C client does no I/O)
        self._prefix = prefix

    def __del__(self):
        # Dropped without close(): the loop's reader would keep the socket open
        stream = getattr(self, "_stream", None)
        if stream is not None and stream.broken is None:
            try:
                stream._break(ConnectionError(lib.XF_EIO, "the Cache was dropped"))
            except Exception:  # the loop is gone: the socket at least
                stream.sock.close()

    def __repr__(self):
        f = self._fields
        where = (f"unix://{f['unix_path']}" if f["unix_path"] else
                 f"redis://{f['host']}:{f['port']}") + f"/{f['db']}"
        return f"<xfetch.aio.Cache {where} prefix={self._prefix!r}>"

    # ---- the stream ---------------------------------------------------------------

    async def _open(self):
        f = self._fields
        loop = asyncio.get_running_loop()
        sock = await asyncio.wait_for(_connect(loop, f), self._connect_timeout)
        stream = _Stream(loop, sock, self._timeout)
        # The C side's setup (AUTH, SELECT: what every xfetch transport runs),
        # then CLUSTER MYID, pipelined: one round trip.
        n, size = lib.xf_call_setup_count(self._client, 0), self._size
        setup = [ffi.unpack(lib.xf_call_setup(self._client, 0, i, size), size[0])
                 for i in range(n)]
        replies = await asyncio.gather(*[stream.request(r) for r in setup + [_CLUSTER_MYID]],
                                       return_exceptions=True)
        failure = None
        for i, reply in enumerate(replies):
            if isinstance(reply, BaseException):
                failure = failure or reply
            elif i < n:  # judged (and freed) by C: XF_EAUTH, XF_EUNAVAILABLE (busy), ...
                rc = lib.xf_call_setup_reply(self._client, 0, i, reply)
                failure = failure or (error_for(rc, self._client) if rc else None)
            else:
                cluster = not lib.xf_reply_is_error(reply, ffi.NULL, ffi.NULL)
                lib.xf_reply_free(reply)
                if cluster:
                    failure = failure or InvalidArgumentError(
                        lib.XF_EINVAL, "xfetch.aio does not route a Redis Cluster (this "
                        "server runs in cluster mode): use xfetch.Cache")
        if failure is not None:
            await stream.close()
            raise failure
        return stream

    async def _connection(self):
        """The open stream, opening one if needed (one opener at a time); a
        failure arms the breaker: calls fail open without trying until then."""
        stream = self._stream
        if stream is not None and not stream.broken:
            if stream.loop is asyncio.get_running_loop():
                return stream
            # opened under another event loop (an earlier asyncio.run): drop it
            stream.waiting.clear()  # futures of that loop: nothing awaits them here
            stream.deadlines.clear()
            stream._break(ConnectionError(lib.XF_EIO, "opened by another event loop"))
        if time.monotonic() < self._retry_after:
            raise ConnectionError(lib.XF_ECONNECT, "circuit open after a connection failure")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        opening = self._opening
        try:
            self._stream = await asyncio.shield(opening)
            return self._stream
        except UnavailableError as e:  # busy or loading: as if down, calls fail open
            self._redis_errors += 1
            self._retry_after = time.monotonic() + self._breaker
            raise ConnectionError(lib.XF_ECONNECT, str(e)) from e
        except Error:  # AUTH / SELECT refused: loud, not a fail-open
            raise
        except (OSError, asyncio.TimeoutError) as e:
            self._redis_errors += 1
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
        policy = self._policies.get((ttl, beta, lease, wait, stale, stale_if_error,
                                     negative_ttl, jitter, on_wait_timeout))
        value, source = await self._run(key, loader, policy, lease)
        return Fetched(value, source)

    async def _run(self, key, loader, policy, lease):
        """One get-or-compute on the C call: (bytes, source name) or (None, None)."""
        kb = _key_bytes(key)
        if not callable(loader):
            raise TypeError(f"loader must be callable, not {type(loader).__name__}")
        out = self._callp
        check(lib.xf_call_start(out, self._client, kb, len(kb), policy, _now_ms()))
        call = out[0]
        exc = None
        try:
            step = lib.xf_call_next(call)
            while step != 3:  # XF_CALL_DONE
                if step == 0:  # XF_CALL_SEND; the open stream inline (the hot path)
                    stream = self._stream
                    if (stream is None or stream.broken is not None
                            or stream.loop is not asyncio.get_running_loop()):
                        step = await self._send(call)
                        continue
                    n = self._size
                    # the call's own bytes: start() sends them now, or copies them
                    data = ffi.buffer(lib.xf_call_request(call, n), n[0])
                    try:
                        reply = stream.start(data)
                        if isinstance(reply, asyncio.Future):
                            reply = await reply
                    except (Error, OSError, asyncio.TimeoutError):
                        self._redis_errors += 1
                        step = lib.xf_call_io_failed(call, lib.XF_EIO, _now_ms())
                    else:
                        step = lib.xf_call_reply(call, reply, _now_ms())
                elif step == 1:  # XF_CALL_LOAD
                    step, exc = await self._load(call, loader, lease, key)
                else:
                    await asyncio.sleep(lib.xf_call_wait_ms(call, _now_ms()) / 1000)
                    step = lib.xf_call_woke(call, _now_ms())
            value = self._value
            rc = lib.xf_call_result(call, value)
            if rc == 0:
                try:
                    result = ffi.unpack(value.data, value.len), SOURCES[value.source]
                finally:
                    lib.xf_value_free(value)
                if exc is not None:
                    log.warning("loader for %r failed; served the %s value", key,
                                result[1], exc_info=exc)
                return result
            if rc == lib.XF_ENOTFOUND:
                return None, None
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
        if stream is None or stream.broken or stream.loop is not asyncio.get_running_loop():
            try:
                stream = await self._connection()
            except ConnectionError:
                return lib.xf_call_io_failed(call, lib.XF_ECONNECT, _now_ms())
        try:
            reply = await stream.request(data)
        except (Error, OSError, asyncio.TimeoutError):
            self._redis_errors += 1
            return lib.xf_call_io_failed(call, lib.XF_EIO, _now_ms())
        return lib.xf_call_reply(call, reply, _now_ms())

    def _release_now(self, call, step):
        """The loader was cancelled or interrupted (KeyboardInterrupt): its
        lease is released at once (the call's RELEASE is written, its reply
        dropped when it comes) instead of being left for lease seconds."""
        stream = self._stream
        if step != lib.XF_CALL_SEND or stream is None or stream.broken is not None:
            return
        n = self._size
        try:
            reply = stream.start(ffi.unpack(lib.xf_call_request(call, n), n[0]))
        except (Error, OSError):
            return
        if isinstance(reply, asyncio.Future):
            reply.add_done_callback(
                lambda f: f.cancelled() or f.exception() or lib.xf_reply_free(f.result()))
        else:
            lib.xf_reply_free(reply)

    async def _load(self, call, loader, lease, key):
        t0 = time.monotonic()
        try:
            value = loader()
            if inspect.isawaitable(value):
                value = await value
        except Exception as e:  # nothing is cached; raised (or logged) at the end
            return lib.xf_call_load_failed(call, -1, _now_ms()), e
        except BaseException:  # CancelledError, KeyboardInterrupt: raised at once
            self._release_now(call, lib.xf_call_load_failed(call, -1, _now_ms()))
            raise
        took = time.monotonic() - t0
        if took > lease:
            log.warning("loader for %r took %.3f s, longer than its lease (%.3f s): other "
                        "callers may have run it too; pass lease= above the loader's time",
                        key, took, lease)
        if value is None:
            return lib.xf_call_not_found(call, int(took * 1e6), _now_ms()), None
        if not isinstance(value, _BYTES_LIKE):
            return lib.xf_call_load_failed(call, -1, _now_ms()), TypeError(
                f"the loader must return bytes or None, not {type(value).__name__}")
        buf = ffi.from_buffer(value)
        return lib.xf_call_loaded(call, buf, len(buf), int(took * 1e6), _now_ms()), None

    async def get_or_compute(self, key: Key, loader: Loader, ttl: float, beta: float = 1.0,
                             **policy: Any) -> bytes | None:
        """Returns the bytes cached under key, awaiting loader() (a plain
        function or an async def) to compute them when missing, expired or
        elected for early recomputation. Same keywords and errors as
        xfetch.Cache.get_or_compute."""
        if policy:
            return (await self.fetch(key, loader, ttl, beta, **policy))[0]
        # ttl and beta only (the common call): a smaller memo than fetch's
        fast = (ttl, beta, type(ttl), type(beta))
        p = self._fast_policies.get(fast)
        if p is None:
            p = self._policies.get((ttl, beta, 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, "load"))
            if len(self._fast_policies) >= 256:
                self._fast_policies.clear()
            self._fast_policies[fast] = p
        return (await self._run(key, loader, p, 5.0))[0]

    async def set(self, key: Key, value: Value, ttl: float, *, stale: float = 0.0,
                  jitter: float = 0.0) -> bool:
        """xfetch.Cache.set, awaited: on the Cache's stream (the C call
        xf_call_start_set), pipelined with the other calls. True when
        written, False when a newer value or a delete holds the entry (as
        xfetch.Cache.set); other errors raise (nothing to fall back to)."""
        kb = _key_bytes(key)
        if not isinstance(value, _BYTES_LIKE):
            raise TypeError(f"value must be bytes-like, not {type(value).__name__}")
        buf = ffi.from_buffer(value)
        policy = self._policies.get((ttl, 1.0, 5.0, 5.0, stale, 0.0, 0.0, jitter, "load"))
        out = ffi.new("xf_call **")
        check(lib.xf_call_start_set(out, self._client, kb, len(kb), buf, len(buf), policy,
                                    _now_ms()))
        return await self._write(out[0]) != lib.XF_ESUPERSEDED

    async def delete(self, key: Key) -> None:
        """xfetch.Cache.delete, awaited, on the Cache's stream
        (xf_call_start_delete); no error if the key is absent."""
        kb = _key_bytes(key)
        out = ffi.new("xf_call **")
        check(lib.xf_call_start_delete(out, self._client, kb, len(kb), _now_ms()))
        await self._write(out[0])

    async def delete_many(self, keys: Iterable[Key]) -> None:
        """Removes each key's entry, the deletes pipelined on the stream."""
        await asyncio.gather(*[self.delete(k) for k in keys])

    async def _write(self, call):
        """Runs a set or delete call (SEND steps only) to its end; returns 0
        or XF_ESUPERSEDED, raises any other error."""
        try:
            step = lib.xf_call_next(call)
            while step == lib.XF_CALL_SEND:
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
        s["redis_errors"] += self._redis_errors
        s["connections"] = int(self._stream is not None and not self._stream.broken)
        return s

    def cached(self, ttl: float, key: str | Callable[..., str | bytes] | None = None,
               serializer: Any = None, *, namespace: str | None = None,
               version: Any = None, **policy: Any) -> AsyncCachedDecorator:
        """Decorator for async def functions: caches the awaited result, with
        xfetch.Cache.cached's keys, serializers, namespace and version; see
        xfetch._aio_decorator.cached."""
        from ._aio_decorator import cached
        return cached(self, ttl, key, serializer, namespace=namespace, version=version,
                      **policy)
