"""xfetch.aio.Cache's connections: one Link per server (host, port) the C
call names for each request (xf_call_target: the seed in use, or in a Redis
Cluster the node of the key's slot), each a stream (_stream) on the event
loop the Cache belongs to, opened by the first call that needs it, its setup
the C side's (xf_call_setup: AUTH, SELECT, READONLY for a cluster's replica
reads). Each Link has the C client's circuit breaker: a failed connect or
request makes calls skip that server for `breaker` seconds, and the call
moves on (xf_call_io_failed: the next seed, the cluster's map asked again,
or failing open)."""
from __future__ import annotations

import asyncio
import os
import time
import weakref

from ._aio_tls import handshake
from ._errors import (ConnectionError, Error, ProtocolError, TLSError, UnavailableError,
                      error_for)
from ._native import ffi, lib
from ._stream import _connect, _Stream


async def open_stream(client, fields, timeout, connect_timeout, flags, tls=None, near=False):
    """A new stream on the running loop to fields' server, the C side's setup
    (xf_call_setup with flags) pipelined: one round trip. tls: (ssl context,
    client certificate configured) for rediss:// (_aio_tls), whose setup
    ends with a PING so that a server refusing the client certificate says
    so here (TLSError). Raises AuthError (refused), UnavailableError (busy,
    loading), TLSError, OSError or a timeout."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    sock = await asyncio.wait_for(_connect(loop, fields), connect_timeout)
    if tls is None:
        stream = _Stream(loop, sock, timeout)
    else:
        try:
            stream = await handshake(loop, sock, tls[0], fields,
                                     max(connect_timeout - (loop.time() - t0), 0.001),
                                     timeout, tls[1])
        except BaseException:
            sock.close()
            raise
    size = ffi.new("size_t *")
    n = lib.xf_call_setup_count(client, flags)
    setup = [ffi.unpack(lib.xf_call_setup(client, flags, i, size), size[0]) for i in range(n)]
    if tls is not None:
        setup.append(b"*1\r\n$4\r\nPING\r\n")
    replies = await asyncio.gather(*[stream.request(r) for r in setup], return_exceptions=True)
    failure = None
    for i, reply in enumerate(replies):
        if isinstance(reply, BaseException):
            failure = failure or reply
        elif i == n:  # the PING: its reply says the TLS session works
            lib.xf_reply_free(reply)
        else:  # judged (and freed) by C: XF_EAUTH, XF_EUNAVAILABLE (busy), ...
            rc = lib.xf_call_setup_reply(client, flags, i, reply)
            failure = failure or (error_for(rc, client) if rc else None)
    if failure is not None:
        await stream.close()
        raise failure
    if near:
        await track(client, fields, stream)
    return stream


async def track(client, fields, stream):
    """The near cache: the stream's reads may fill it once Redis tracks them
    (xf_call_track_*: CLIENT TRACKING on REDIRECT to the server's
    invalidation connection, which a C thread opens: never this one). While
    that connection is not open, C gives a ticket without a request: the
    stream serves untracked and xf_call_track_reply says when to ask again
    (arm_later). A refusal leaves the stream untracked (its reads not kept)."""
    ticket, req, size = ffi.new("xf_track **"), ffi.new("const char **"), ffi.new("size_t *")
    host = ffi.new("char[]", fields["host"].encode()) if fields["host"] else ffi.NULL
    rc = lib.xf_call_track_open(client, host, fields["port"] or 0, ticket, req, size)
    old, stream.track = stream.track, None
    if old is not None:  # the ticket that was due, or went stale: no longer watched
        lib.xf_call_track_close(old, stream.sock.fileno())
    if rc != 0 or ticket[0] == ffi.NULL:
        return
    if size[0] == 0:  # not yet: kept until C says it is due
        stream.track = ticket[0]
        return
    try:
        reply = await stream.request(ffi.unpack(req[0], size[0]))
    except BaseException:
        lib.xf_call_track_close(ticket[0], -1)
        raise
    if lib.xf_call_track_armed(ticket[0], reply, stream.sock.fileno()) == 0:
        stream.track = ticket[0]
    else:
        lib.xf_call_track_close(ticket[0], -1)


def arm_later(links, link, stream):
    """xf_call_track_reply said 2 (the stream's server's invalidation
    connection is open now, or to be asked for again) or 1 (the one it was
    tracked under was lost: the near cache dropped that server's entries):
    the stream arms again in the background, in place, as the C event-loop
    driver does (async_conn.c), its CLIENT TRACKING ahead of the commands
    sent after it (replies before its own are read untracked: none kept
    near). One at a time."""
    task = getattr(stream, "arming", None)
    if task is None or task.done():
        stream.arming = asyncio.ensure_future(_arm(links.client, link.fields, stream))


async def _arm(client, fields, stream):
    try:
        await track(client, fields, stream)
    except BaseException:  # the stream broke: its calls are told
        pass


class Link:
    """One server's stream and breaker. current: the open stream while the
    breaker is closed, else None (the calls' hot path reads it and nothing
    else)."""

    def __init__(self, links, fields):
        self.links, self.fields = links, fields
        self.stream = self.current = None
        self.opening = None
        self.retry_after = 0.0
        self.refused = None  # the TLSError the breaker repeats while open
        self.tripped = self.was_up = False  # for the breaker's and reconnects' events

    def name(self):
        f = self.fields
        return f["unix_path"] if f["unix_path"] else f"{f['host']}:{f['port']}"

    def failed(self):
        """A connect or request failed: the breaker opens."""
        self.links.errors += 1
        self.current = None
        if self.links.breaker > 0:
            self.retry_after = time.monotonic() + self.links.breaker
            if not self.tripped:  # an episode starts: told once
                self.tripped = True
                self.links.events.server_event(lib.XF_EV_BREAKER_OPEN, self.name())
        self.refused = None

    async def connect(self):
        """The open stream, opening one if needed (one opener at a time);
        ConnectionError while the breaker is open or when the connect fails."""
        if self.retry_after:
            if time.monotonic() < self.retry_after:
                if self.refused is not None:  # TLS: the same error, never a fail-open
                    raise TLSError(lib.XF_ETLS, self.refused)
                raise ConnectionError(lib.XF_ECONNECT, "circuit open after a failure")
            self.retry_after = 0.0
        stream = self.stream
        if stream is not None and stream.broken is None:
            self.current = stream
            return stream
        ls = self.links
        if self.opening is None:
            self.opening = asyncio.ensure_future(open_stream(
                ls.client, self.fields, ls.timeout, ls.connect_timeout, ls.setup_flags(),
                ls.tls, ls.near))
        opening = self.opening
        try:
            opened = await asyncio.shield(opening)
            if opened is not self.stream:  # the first of the callers that awaited it
                if self.tripped:
                    self.tripped = False
                    self.links.events.server_event(lib.XF_EV_BREAKER_CLOSED, self.name())
                if self.was_up:
                    self.links.events.server_event(lib.XF_EV_RECONNECT, self.name())
                self.was_up = True
            self.stream = self.current = opened
            return self.stream
        except TLSError as e:  # a misconfiguration: raised (by every call), not failed open
            self.failed()
            self.refused = e.message
            raise
        except (UnavailableError, ProtocolError) as e:  # busy, loading, or an unreadable
            self.failed()  # reply to the setup (not Redis): as if down, calls move on
            raise ConnectionError(lib.XF_ECONNECT, str(e)) from e
        except Error:  # AUTH / SELECT refused: loud, not a fail-open
            raise
        except (OSError, asyncio.TimeoutError) as e:
            self.failed()
            raise ConnectionError(lib.XF_ECONNECT, f"connect: {e}") from e
        finally:
            if self.opening is opening and opening.done():
                self.opening = None

    def drop(self, exc):
        stream, self.stream, self.current = self.stream, None, None
        self.opening = None
        if stream is not None and stream.broken is None:
            try:
                stream._break(exc)
            except Exception:  # its loop is gone: the socket at least
                stream.sock.close()


class Links:
    """The Cache's Links, one per (host, port), on one event loop at a time.

    loop: the loop the Cache is bound to; bind() moves it to the running
    loop once the old one no longer runs (an earlier asyncio.run), and
    refuses while it runs in another thread (the C client and the streams
    are one thread's)."""

    def __init__(self, client, fields, timeout, connect_timeout, breaker, replica_reads,
                 events, tls=None, near=False, share=None):
        self.events = events
        self.near = near  # the share has a near cache: streams are tracked
        self.wake_fd = None  # the C wake pipe's read end (xf_call_wake_open), once bound
        self.wake_event = None  # set (then replaced) when a key is invalidated
        self._wake = {"loop": None}  # for the finalizer: the loop its reader is on
        self._share = share  # the near cache's: it must outlive the wake pipe
        self.client, self.unix_path = client, fields["unix_path"]
        self.tls = tls  # (ssl context, client certificate configured) for rediss://
        self.timeout, self.connect_timeout, self.breaker = timeout, connect_timeout, breaker
        self.replica_reads = replica_reads
        self.by_target = {}  # (host as the C client's char *, port) -> Link: the hot path
        self.by_name = {}  # (host, port) -> Link: one per server
        self.loop = None
        self.errors = 0  # failed connects and requests (the C client does no I/O)
        self._stats = ffi.new("xf_stats *")

    def get(self, host, port):
        """The Link for xf_call_target's host (a char * the C client owns:
        stable until it closes; NULL for the URL's Unix socket) and port."""
        link = self.by_target.get((host, port))
        if link is None:
            name = (ffi.string(host).decode() if host != ffi.NULL else None, port)
            link = self.by_name.get(name)
            if link is None:
                fields = ({"unix_path": self.unix_path, "host": None, "port": 0}
                          if name[0] is None else
                          {"unix_path": None, "host": name[0], "port": port})
                link = self.by_name[name] = Link(self, fields)
            self.by_target[(host, port)] = link
        return link

    def setup_flags(self):
        """READONLY on every connection once the client has a cluster map and
        reads go to replicas (a master takes it too; the call also sends it
        first to a replica whose connection may lack it)."""
        if not self.replica_reads:
            return 0
        lib.xf_client_stats(self.client, self._stats)
        return lib.XF_SETUP_REPLICA if self._stats.map_refreshes else 0

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
        self.loop = loop
        if self.near:
            self._bind_wake(old, loop)

    def _bind_wake(self, old, loop):
        """Wake-on-write: the C near cache writes a byte on the pipe whenever a
        key is invalidated; the waiting calls whose key it was read at once."""
        if self.wake_fd is None:
            fd = ffi.new("int *")
            if lib.xf_call_wake_open(self.client, fd) != 0 or fd[0] < 0:
                return
            self.wake_fd = fd[0]
            weakref.finalize(self, _close_wake, self.client, self.wake_fd, self._wake,
                             self._share)
        elif old is not None and not old.is_closed():
            old.remove_reader(self.wake_fd)
        loop.add_reader(self.wake_fd, self._woke)
        self._wake["loop"] = loop
        self.wake_event = asyncio.Event()

    def _woke(self):
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        event, self.wake_event = self.wake_event, asyncio.Event()
        event.set()

    def drop(self, exc):
        for link in list(self.by_name.values()):
            link.drop(exc)

    def connected(self):
        return sum(1 for link in self.by_name.values()
                   if link.stream is not None and link.stream.broken is None)


def _close_wake(client, fd, wake, share):
    """The wake pipe's end (the Links are gone): off its loop, then closed; the
    share (held here) outlives it."""
    loop = wake["loop"]
    if loop is not None and not loop.is_closed():
        try:
            loop.remove_reader(fd)
        except Exception:  # its loop is being torn down
            pass
    lib.xf_call_wake_close(client, fd)
