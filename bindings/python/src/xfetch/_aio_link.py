"""xfetch.aio.Cache's connection: the stream (_stream) on the event loop the
Cache belongs to, opened by the first call that needs it, with the same
circuit breaker as the C client's (a failed connect or request: calls skip
Redis for `breaker` seconds and fail open). One stream today; a Redis
Cluster would hold one Link per node, chosen by the call's slot."""
from __future__ import annotations

import asyncio
import time

from ._errors import ConnectionError, Error, InvalidArgumentError, UnavailableError, error_for
from ._native import ffi, lib
from ._stream import _connect, _Stream

# CLUSTER MYID answers a cluster node and is an error anywhere else (cluster
# support disabled, or not allowed to this user: then no cluster can be told,
# and a call on a key of another node gets MOVED as a RedisError).
_CLUSTER_MYID = b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nMYID\r\n"


async def open_stream(client, fields, timeout, connect_timeout):
    """A new stream on the running loop, its setup done: the C side's
    (xf_call_setup: AUTH, SELECT, what every xfetch transport runs), then
    CLUSTER MYID, pipelined: one round trip. Raises AuthError (refused),
    UnavailableError (busy, loading), InvalidArgumentError (a cluster node),
    OSError or a timeout."""
    loop = asyncio.get_running_loop()
    sock = await asyncio.wait_for(_connect(loop, fields), connect_timeout)
    stream = _Stream(loop, sock, timeout)
    size = ffi.new("size_t *")
    n = lib.xf_call_setup_count(client, 0)
    setup = [ffi.unpack(lib.xf_call_setup(client, 0, i, size), size[0]) for i in range(n)]
    replies = await asyncio.gather(*[stream.request(r) for r in setup + [_CLUSTER_MYID]],
                                   return_exceptions=True)
    failure = None
    for i, reply in enumerate(replies):
        if isinstance(reply, BaseException):
            failure = failure or reply
        elif i < n:  # judged (and freed) by C: XF_EAUTH, XF_EUNAVAILABLE (busy), ...
            rc = lib.xf_call_setup_reply(client, 0, i, reply)
            failure = failure or (error_for(rc, client) if rc else None)
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


class Link:
    """The Cache's stream and breaker, on one event loop at a time.

    current: the open stream while the breaker is closed, else None (the
    calls' hot path reads it and nothing else). loop: the loop the Cache is
    bound to; bind() moves it to the running loop once the old one no longer
    runs (an earlier asyncio.run), and refuses while it runs in another
    thread (the C client and the stream are one thread's)."""

    def __init__(self, client, fields, timeout, connect_timeout, breaker):
        self.client = client
        self.fields, self.timeout, self.connect_timeout = fields, timeout, connect_timeout
        self.breaker = breaker
        self.stream = self.current = None
        self.opening = None
        self.loop = None
        self.retry_after = 0.0
        self.errors = 0  # failed connects and requests (the C client does no I/O)

    def bind(self):
        loop = asyncio.get_running_loop()
        old = self.loop
        if loop is old:
            return
        if old is not None and old.is_running() and not old.is_closed():
            raise RuntimeError(
                f"this xfetch.aio.Cache belongs to event loop {old!r}, which runs in "
                f"another thread; it cannot be used from event loop {loop!r} meanwhile: "
                f"open one xfetch.aio.Cache per event loop")
        self.drop(ConnectionError(lib.XF_EIO, "opened by another event loop"))
        self.opening = None
        self.loop = loop

    def failed(self):
        """A connect or request failed: the breaker opens."""
        self.errors += 1
        self.current = None
        if self.breaker > 0:
            self.retry_after = time.monotonic() + self.breaker

    async def connect(self):
        """The open stream, opening one if needed (one opener at a time);
        ConnectionError while the breaker is open or when the connect fails."""
        if self.retry_after:
            if time.monotonic() < self.retry_after:
                raise ConnectionError(lib.XF_ECONNECT, "circuit open after a failure")
            self.retry_after = 0.0
        stream = self.stream
        if stream is not None and stream.broken is None:
            self.current = stream
            return stream
        if self.opening is None:
            self.opening = asyncio.ensure_future(
                open_stream(self.client, self.fields, self.timeout,
                            self.connect_timeout))
        opening = self.opening
        try:
            self.stream = self.current = await asyncio.shield(opening)
            return self.stream
        except UnavailableError as e:  # busy or loading: as if down, calls fail open
            self.failed()
            raise ConnectionError(lib.XF_ECONNECT, str(e)) from e
        except Error:  # AUTH / SELECT refused, a cluster: loud, not a fail-open
            raise
        except (OSError, asyncio.TimeoutError) as e:
            self.failed()
            raise ConnectionError(lib.XF_ECONNECT, f"connect: {e}") from e
        finally:
            if self.opening is opening and opening.done():
                self.opening = None

    def drop(self, exc):
        stream, self.stream, self.current = self.stream, None, None
        if stream is not None and stream.broken is None:
            try:
                stream._break(exc)
            except Exception:  # its loop is gone: the socket at least
                stream.sock.close()

    def connected(self):
        return int(self.stream is not None and self.stream.broken is None)
