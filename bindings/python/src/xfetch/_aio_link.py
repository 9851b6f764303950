"""xfetch.aio.Cache's connections: one Link per server (host, port) the C
call names (xf_call_target: the seed in use, or each cluster node). A Link
is the C link (xf_link: the setup, tracking, clock estimate, breaker and
resend are decided there) and a non-blocking socket on the Cache's event
loop (over TLS for rediss://, _aio_tls): this module only connects, moves
bytes both ways, says when the socket failed or the time came (the link's
deadline, its wake pipe), and wakes the calls that moved."""
from __future__ import annotations

import asyncio
import socket
import time
import weakref

from ._aio_tls import handshake
from ._errors import TLSError, check
from ._native import ffi, lib

_NO_DEADLINE = 2 ** 63 - 1
_BROKEN = (lib.XF_LINK_CLOSED, lib.XF_LINK_BROKEN)
_monotonic = time.monotonic


def now_ms():
    """The time every xf_call_* and xf_link_* input carries: the C side reads
    no clock (time.monotonic: CLOCK_MONOTONIC on Linux, the share's clock)."""
    return int(_monotonic() * 1000)


class Link:
    """One server's C link and socket. waiting: call -> the future its task
    awaits; early: calls that moved before they had one (the fast path)."""

    FAST_LIMIT = 16
    READ_SIZE = 256 * 1024

    def __init__(self, links, fields):
        self.links, self.fields = links, fields
        out = ffi.new("xf_link **")
        host = fields["host"].encode() if fields["host"] else ffi.NULL
        check(lib.xf_link_open(out, links.client, host, fields["port"] or 0, 0))
        self.l = out[0]
        links.opened.append(self.l)  # closed before the client (Links' finalizer)
        self.wake_fd = lib.xf_link_wake_fd(self.l)  # -1: no near cache
        self.sock = self.tls = self.opening = self.timer = None
        self.timer_at = _NO_DEADLINE
        self.pending = bytearray()  # bytes the socket did not take yet
        self.waiting, self.early, self.fast = {}, set(), 0
        self.corked = []  # calls to send together (C xf_call_send_many: one MGET)
        self.size = ffi.new("size_t *")

    def send(self, call):
        """Puts call (in XF_CALL_SEND) on the link; None when it moved at
        once (its reply was there already), else a future set once it moved.
        While the Links are corked (a get_many starting) it goes with the
        others sent meanwhile (send_corked)."""
        if self.links.corked is not None:
            if not self.corked:
                self.links.corked.append(self)
            self.corked.append(call)
            fut = self.waiting[call] = self.links.loop.create_future()
            return fut
        check(lib.xf_call_send(call, self.l, now_ms()))
        if lib.xf_link_wants_stream(self.l):
            self.open()
        elif self.sock is not None:
            self.flush()  # may lose the socket (a send refused)
            if (self.sock is not None and not self.waiting and not self.pending
                    and self.fast < self.FAST_LIMIT):
                self.readable()  # the reply may be there already
        return self.moved(call)

    def send_corked(self):
        calls, self.corked = self.corked, []
        if lib.xf_call_send_many(ffi.new("xf_call *[]", calls), len(calls), self.l,
                                 now_ms()) != 0:
            for call in calls:  # out of memory: one at a time (a sent one refuses)
                lib.xf_call_send(call, self.l, now_ms())
        if lib.xf_link_wants_stream(self.l):
            self.open()
        self.flush()
        self.arm()

    def park(self, call):
        """Parks call (in XF_CALL_WAIT) on the link: as send's, until its wait
        ends (its time, or a write of its key: the wake pipe)."""
        check(lib.xf_call_park(call, self.l, now_ms()))
        if self.wake_fd >= 0 and self.links.watched.get(self.wake_fd) is not self.links.loop:
            self.links.loop.add_reader(self.wake_fd, self.tick)
            self.links.watched[self.wake_fd] = self.links.loop
        self.drain()
        return self.moved(call)

    def moved(self, call):
        if call in self.early:
            self.early.discard(call)
            self.fast += 1
            return None
        self.fast = 1  # through the loop: other tasks ran; this is the first since
        fut = self.links.loop.create_future()
        self.waiting[call] = fut
        self.arm()
        return fut

    # ---- the stream ---------------------------------------------------------

    def open(self):
        """A new stream for the calls waiting: the C link says whether the
        breaker allows it (else the calls moved on), then the connect runs."""
        if self.opening is not None:
            return
        self.close_sock()
        if lib.xf_link_start(self.l, now_ms()) != 0:
            self.drain()
            return
        self.opening = self.links.loop.create_task(self.connect())

    async def connect(self):
        loop, ls = self.links.loop, self.links
        t0, sock, tls = loop.time(), None, None
        try:
            sock = await asyncio.wait_for(_connect(loop, self.fields), ls.connect_timeout)
            if ls.tls is not None:
                tls = await handshake(loop, sock, ls.tls[0], self.fields,
                                      max(ls.connect_timeout - (loop.time() - t0), 0.001),
                                      ls.tls[1])
        except (TLSError, OSError, asyncio.TimeoutError) as e:
            if sock is not None:
                sock.close()
            self.opening = None
            tls_refused = isinstance(e, TLSError)
            self.fail(lib.XF_LINK_TLS if tls_refused else lib.XF_LINK_BROKEN,
                      e.message if tls_refused else f"connect: {e or 'timed out'}")
            return
        except BaseException:  # cancelled: the Cache closed, or moved loops
            if sock is not None:
                sock.close()
            raise
        self.opening = None
        self.sock, self.tls = sock, tls
        loop.add_reader(sock, self.readable)
        lib.xf_link_connected(self.l, sock.fileno(), now_ms())
        self.flush()
        self.arm()

    def close_sock(self):
        sock, self.sock, self.tls = self.sock, None, None
        self.pending.clear()
        if sock is not None:
            try:
                self.links.loop.remove_reader(sock)
                self.links.loop.remove_writer(sock)
            except Exception:  # its loop is closed
                pass
            sock.close()

    def fail(self, how, why):
        """The socket failed: the C link decides what its calls do."""
        lib.xf_link_failed(self.l, how, (why or "").encode(), now_ms())
        self.close_sock()
        self.drain()

    def lost(self, e):
        """The socket failed (e None: closed by the server). Over TLS, closed
        before any reply: how TLS 1.3 refuses a client certificate."""
        how = lib.XF_LINK_CLOSED if e is None else _broken(e)
        if self.tls is not None and not self.tls.got_data and how == lib.XF_LINK_CLOSED:
            return self.fail(lib.XF_LINK_TLS, self.tls.closed_early().message)
        self.fail(how, str(e) if e is not None else "closed")

    def drop(self, why, unbind=True):
        """Drops the stream (the Cache closed, or moved loops); unbind: the
        timer and the wake pipe's reader too (else the parked calls' waits
        still end on this loop)."""
        if self.opening is not None:
            try:
                self.opening.cancel()
            except RuntimeError:  # its loop is closed
                pass
            self.opening = None
        if self.timer is not None and unbind:
            self.timer.cancel()
            self.timer = None
        loop = self.links.watched.pop(self.wake_fd, None) if unbind else None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.wake_fd)
        self.fail(lib.XF_LINK_CANCELED, why)

    # ---- bytes --------------------------------------------------------------

    def flush(self):
        if self.sock is None:
            return
        data = lib.xf_link_output(self.l, self.size)
        n = self.size[0]
        if n:
            out = ffi.buffer(data, n)
            out = self.tls.wrap(out[:]) if self.tls is not None else out
            sent = 0
            if not self.pending:
                try:
                    sent = self.sock.send(out)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as e:
                    return self.lost(e)
            if sent < len(out):
                if not self.pending:
                    self.links.loop.add_writer(self.sock, self.writable)
                self.pending += out[sent:]
            lib.xf_link_written(self.l, n)

    def writable(self):
        try:
            n = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            return self.lost(e)
        del self.pending[:n]
        if not self.pending:
            self.links.loop.remove_writer(self.sock)
            self.flush()

    def readable(self):
        try:
            data = (self.tls or self.sock).recv(self.READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except TLSError as e:  # a client certificate refused
            return self.fail(lib.XF_LINK_TLS, e.message)
        except OSError as e:
            return self.lost(e)
        if not data:
            return self.lost(None)
        if lib.xf_link_feed(self.l, data, len(data), now_ms()) != 0:
            self.close_sock()  # a setup refused, an unreadable reply
        self.drain()

    # ---- calls that moved, and the timeout -----------------------------------

    def drain(self):
        while True:
            call = lib.xf_link_ready(self.l)
            if call == ffi.NULL:
                break
            fut = self.waiting.pop(call, None)
            if fut is None:
                self.early.add(call)
            elif fut.cancelled():  # its task left it: finished in the background
                from ._aio_call import abandoned
                abandoned(self.links, call)
            elif not fut.done():
                try:
                    fut.set_result(None)
                except RuntimeError:  # its loop is closed: nobody awaits it
                    pass
        if lib.xf_link_wants_stream(self.l):
            self.open()
        self.flush()

    def arm(self):
        """The timer for the link's deadline (the stream's, a parked wait's);
        a passed one while connecting is the connect's own timeout's."""
        deadline = lib.xf_link_deadline(self.l)
        if self.timer is not None:
            if self.timer_at <= deadline:
                return
            self.timer.cancel()
        self.timer = None
        if deadline != _NO_DEADLINE and (self.opening is None or deadline > now_ms()):
            self.timer_at = deadline
            self.timer = self.links.loop.call_at(deadline / 1000, self.expire)

    def expire(self):
        self.timer = None
        self.tick()

    def tick(self):
        """The time came, or the wake pipe was readable: the C link moves the
        parked calls whose wait ended and says whether the stream timed out."""
        if lib.xf_link_tick(self.l, now_ms()) and self.opening is None:
            self.fail(lib.XF_LINK_TIMEOUT, None)
        self.drain()
        self.arm()


def _broken(e):
    return _BROKEN[0] if isinstance(e, (ConnectionResetError, BrokenPipeError)) else _BROKEN[1]


async def _connect(loop, fields):
    """A connected non-blocking socket to the server."""
    if fields["unix_path"]:
        targets = [(socket.AF_UNIX, socket.SOCK_STREAM, 0, fields["unix_path"])]
    else:
        infos = await loop.getaddrinfo(fields["host"], fields["port"], type=socket.SOCK_STREAM)
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
        except BaseException as e:  # cancelled too (the connect timeout)
            sock.close()
            if not isinstance(e, OSError):
                raise
            error = e
    raise error or OSError(f"no address for {fields['host']!r}")


class Links:
    """The Cache's Links, one per (host, port), on one event loop at a time.

    loop: the loop the Cache is bound to; bind() moves it to the running
    loop once the old one no longer runs (an earlier asyncio.run), and
    refuses while it runs in another thread (the C client and the sockets
    are one thread's)."""

    def __init__(self, client, fields, connect_timeout, tls=None, share=None):
        self.client, self.unix_path = client, fields["unix_path"]
        self.connect_timeout, self.tls = connect_timeout, tls
        self.by_target = {}  # (host as the C client's char *, port) -> Link: the hot path
        self.by_name = {}  # (host, port) -> Link: one per server
        self.loop = None
        self.opened = []  # the C links, closed before the client and share
        self.watched = {}  # a link's wake pipe -> the loop its reader is on
        self.corked = None  # a list while sends wait to go together: its Links
        weakref.finalize(self, _close, self.opened, self.watched, share)

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

    def cork(self):
        """The calls sent from now on wait for uncork, then go together on
        each link (their hits: one MGET per node and slot)."""
        if self.corked is None:
            self.corked = []

    def uncork(self):
        links, self.corked = self.corked, None
        for link in links or ():
            link.send_corked()

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
        self.drop("opened by another event loop")
        self.loop = loop

    def drop(self, why, unbind=True):
        if self.watched.get("closed"):  # finalized (a cycle's collection): nothing left
            return
        for link in list(self.by_name.values()):
            link.drop(why, unbind)

    def connected(self):
        return sum(1 for link in self.by_name.values() if link.sock is not None)


def _close(opened, watched, share):
    """The Links are gone: the wake pipes' readers off their loops, then the C
    links; the client and the share (held here) outlive them."""
    for fd, loop in list(watched.items()):
        if not loop.is_closed():
            try:
                loop.remove_reader(fd)
            except Exception:  # its loop is being torn down
                pass
    watched["closed"] = True
    for link in opened:
        lib.xf_link_close(link)
