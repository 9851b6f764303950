"""xfetch.aio's connection: one non-blocking socket on the running loop,
requests written in order, replies parsed by the C reader (xf_reader) and
matched to their requests in order, the estimate of its server's clock
(xf_call_conn); and the connect and setup helpers."""
from __future__ import annotations

import asyncio
import collections
import socket

from ._errors import (ConnectionError, ConnectionLostError, Error, TLSError, check,
                      error_for)
from ._native import ffi, lib


class _Stream:
    """One connection on a non-blocking socket of the running loop: requests
    written in order, replies parsed by the C reader and handed to the oldest
    waiting request.

    Reading is the loop's reader callback (no reader task), and a request
    that is alone on the stream also tries one non-blocking recv right after
    its send: when the reply is already there (often, on a nearby Redis) the
    call completes without the two loop iterations an await costs. So that
    a task doing nothing but hits still lets the others run, every
    FAST_LIMIT-th such completion yields to the loop. Timeouts: one timer for
    the oldest request at a time, not one per request."""

    FAST_LIMIT = 16
    READ_SIZE = 256 * 1024
    track = None  # the near cache's ticket (xf_track *) once tracked (_aio_link.track)
    # the server closed it (end of stream, reset, broken pipe: its idle
    # timeout, CLIENT KILL, a restart), not a failing server: stream.c's rule
    closed_by_server = False

    def __init__(self, loop, sock, timeout):
        self.loop, self.sock, self.timeout = loop, sock, timeout
        out = ffi.new("xf_reader **")
        check(lib.xf_reader_open(out))
        self.parser = ffi.gc(out[0], lib.xf_reader_close)
        # the server's clock as this connection's replies taught it: a hit on
        # it is one plain read (HMGET / GET) while it is fresh (xf_call_use_conn)
        conn = ffi.new("xf_call_conn **")
        check(lib.xf_call_conn_open(conn))
        self.conn = ffi.gc(conn[0], lib.xf_call_conn_close)
        self.reply = ffi.new("xf_reply **")
        self.waiting = collections.deque()  # futures, in request order
        self.deadlines = collections.deque()  # their loop.time() deadlines
        self.unsent = bytearray()  # bytes the socket did not take yet
        self.broken = None  # the exception that ended the stream
        self.timer = None  # the timeout of the oldest request, when armed
        self.fast = 0  # completions since the last yield to the loop
        self.orphans = {}  # future -> callback: replies of abandoned calls (adopt)
        self._recv = sock.recv  # bytes in (_aio_tls: decrypted)
        loop.add_reader(sock, self._readable)

    # ---- bytes out --------------------------------------------------------

    def _write(self, data):
        if self.unsent:
            self.unsent += data
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n < len(data):
            self.unsent += data[n:]
            self.loop.add_writer(self.sock, self._writable)

    def _writable(self):
        try:
            n = self.sock.send(self.unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        del self.unsent[:n]
        if not self.unsent:
            self.loop.remove_writer(self.sock)

    # ---- bytes in ---------------------------------------------------------

    def _readable(self):
        try:
            data = self._recv(self.READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if not data:
            self._lost(None)
            return
        try:
            check(lib.xf_reader_feed(self.parser, data, len(data)))
            waiting, deadlines = self.waiting, self.deadlines
            while True:
                rc = lib.xf_reader_next(self.parser, self.reply)
                if rc != 0:
                    raise error_for(rc)
                reply = self.reply[0]
                if reply == ffi.NULL:
                    return
                if waiting:
                    fut = waiting.popleft()
                    deadlines.popleft()
                    if fut is None:  # a reply before the command's (start's n)
                        lib.xf_reply_free(reply)
                        continue
                else:
                    fut = None
                then = self.orphans.pop(fut, None) if self.orphans else None
                if then is not None:  # an abandoned call's
                    then(reply)
                elif fut is None or fut.done():  # timed out or cancelled
                    lib.xf_reply_free(reply)
                else:
                    fut.set_result(reply)
        except Error as e:
            self._break(e)

    # ---- timeouts ---------------------------------------------------------

    def _arm(self):
        """Arms the timer for the oldest request not yet expired, if none is."""
        if self.timer is None and self.waiting and not self.broken:
            self.timer = self.loop.call_at(self.deadlines[0], self._expire)

    def _expire(self):
        """Fails every request past its deadline; each keeps its place in the
        stream (its reply is freed when it arrives)."""
        self.timer = None
        now = self.loop.time()
        for fut, deadline in zip(self.waiting, self.deadlines):
            if deadline > now:
                self.timer = self.loop.call_at(deadline, self._expire)
                return
            if fut is not None and not fut.done():
                fut.set_exception(asyncio.TimeoutError("no reply within the command timeout"))

    # ---- the end ----------------------------------------------------------

    def _lost(self, exc):
        if isinstance(exc, TLSError):  # a client certificate refused (_aio_tls)
            self._break(exc)
            return
        if self.broken is None:
            self.closed_by_server = exc is None or isinstance(
                exc, (ConnectionResetError, BrokenPipeError))
        self._break(ConnectionLostError(lib.XF_EIO, f"connection lost: {exc or 'closed'}"))

    def _break(self, exc):
        if self.broken is None:
            self.broken = exc
            self.loop.remove_reader(self.sock)
            if self.unsent:
                self.loop.remove_writer(self.sock)
            if self.track is not None:  # the near cache's ticket, before the fd goes
                lib.xf_call_track_close(self.track, self.sock.fileno())
                self.track = None
            self.sock.close()
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
        while self.waiting:
            fut = self.waiting.popleft()
            self.deadlines.popleft()
            then = self.orphans.pop(fut, None) if self.orphans else None
            if fut is None:
                continue
            if then is not None:
                then(None)
            elif not fut.done():
                try:
                    fut.set_exception(exc)
                except RuntimeError:  # its loop is closed: nobody awaits it
                    pass

    # ---- requests ---------------------------------------------------------

    def start(self, data, n=1):
        """Writes data (bytes-like; copied if the socket does not take it all
        at once), which produces n replies: the first n-1 are freed (a
        READONLY, ASKING or SCRIPT LOAD before the command: xf_call_target).
        Returns the cdata last reply (owned by the caller) when it is already
        there, else a future of it."""
        if self.broken:
            raise self.broken
        fut = self.loop.create_future()
        deadline = self.loop.time() + self.timeout
        for _ in range(n - 1):
            self.waiting.append(None)
            self.deadlines.append(deadline)
        self.waiting.append(fut)
        self.deadlines.append(deadline)
        self._write(data)
        if len(self.waiting) == n and not self.unsent and self.broken is None:
            if self.fast < self.FAST_LIMIT:
                self._readable()  # the reply may be there already
                if fut.done():
                    self.fast += 1
                    return fut.result()
        # through the loop (other tasks run): this one is the first completion
        # since the last yield
        self.fast = 1
        if self.timer is None:
            self._arm()
        return fut

    def adopt(self, fut, then):
        """The reply to fut, a request whose caller is gone (cancelled), goes
        to then(reply) when it comes (then(None) if it never will) instead of
        being dropped: the abandoned call finishes (releases its lease)."""
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            then(fut.result())
        elif fut.done() and not fut.cancelled():
            then(None)
        elif self.broken is not None:
            then(None)
        else:
            self.orphans[fut] = then

    async def request(self, data):
        """Writes data and returns the cdata reply (owned by the caller)."""
        reply = self.start(data)
        return (await reply) if isinstance(reply, asyncio.Future) else reply

    async def close(self):
        self._break(ConnectionError(lib.XF_EIO, "closed"))


async def _connect(loop, fields):
    """A connected non-blocking socket to the URL's server."""
    if fields["unix_path"]:
        targets = [(socket.AF_UNIX, socket.SOCK_STREAM, 0, fields["unix_path"])]
    else:
        infos = await loop.getaddrinfo(fields["host"], fields["port"],
                                       type=socket.SOCK_STREAM)
        targets = [(fam, typ, proto, addr) for fam, typ, proto, _, addr in infos]
    error = None
    for family, type_, proto, addr in targets:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as e:
            sock.close()
            error = e
        except BaseException:  # cancelled (the connect timeout)
            sock.close()
            raise
    raise error or OSError(f"no address for {fields['host']!r}")
