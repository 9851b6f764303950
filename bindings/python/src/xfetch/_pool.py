"""xfetch.Cache's waiting and I/O half: a pool of C blocking clients (one
connection each), borrowed one per call and thread, bounded by
max_connections, reused by nested calls, and fork-safe; and spare clients
for near hits, which need no connection (they never connect)."""
from __future__ import annotations

import os
import threading
import weakref

from ._core import BYPASS, STAT_FIELDS, enabled_now, stats_of
from ._errors import check, error_for
from ._native import ffi, lib
from ._refresh import Refresher
from ._runtime import CallState


class Conn:
    """One xf_client, used by one thread at a time. Its CallState carries the
    loader and the loader's exception for the call in progress; the state's
    handle is the loader's user data, so a call allocates nothing for the
    callback (and the state does not refer back to the connection)."""

    __slots__ = ("ptr", "value", "handle", "state", "gen", "share", "enabled",
                 "__weakref__")

    def __init__(self, ptr, gen, share, state, handle):
        self.ptr = ptr
        self.share = share  # the C client borrows it: it must outlive the client
        self.value = ffi.new("xf_value *")
        self.state, self.handle = state, handle  # the handle outlives the client
        self.gen = gen
        self.enabled = True  # the C client's bypass switch (xf_client_set_enabled)

    def switch(self, enabled):
        """The C client's bypass switch, as this call wants it (Cache(enabled=),
        Cache.disabled()); read by each C call when it starts."""
        if self.enabled is not enabled:
            self.enabled = enabled
            lib.xf_client_set_enabled(self.ptr, 1 if enabled else 0)


_pools = weakref.WeakSet()


def _after_fork_in_child():
    for pool in list(_pools):
        pool.forget_parent_connections()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Pool:
    """The connections of one Cache. enter() gives the calling thread its
    connection (its outer call's, when nested), exit() gives it back."""

    def __init__(self, config):
        self.config = config
        self.refresher = Refresher(config)
        self.gen = 0
        self.closed = False
        self._fresh_process()
        self._fresh_slots()
        # The Cache checked the URL, password and db (Config.check_now, which
        # reports no events), unless lazy_connect: this first one connects now.
        self.idle.append(self._open(lazy=config.lazy_connect))
        _pools.add(self)

    def _fresh_process(self):
        self.lock = threading.Lock()
        self.idle = []  # idle connections; list.pop/append are atomic
        self.all = weakref.WeakSet()  # every live connection, for stats()
        self.spares = []  # idle near-hit clients (near_client)
        self.all_spares = weakref.WeakSet()  # every live one, for stats()
        self.retired = dict.fromkeys(STAT_FIELDS, 0)
        self.opened = 0

    def _fresh_slots(self):
        # max_connections bounds the connections in use (so, open) at once.
        n = self.config.max_connections
        self.slots = threading.BoundedSemaphore(n) if n else None
        self.tls = threading.local()  # the connection this thread's call holds

    def forget_parent_connections(self):
        # In a fork child. Idle connections are closed: that closes only the
        # child's copy of each socket, so the parent's connections live on.
        # Connections another parent thread was using at fork time may be
        # mid-command: they are abandoned untouched (never used, never freed).
        idle = set(map(id, self.idle + self.spares))
        for conn in list(self.all) + list(self.all_spares):
            if id(conn) in idle:
                ffi.release(conn.ptr)
            else:
                ffi.gc(conn.ptr, None)
        self.gen += 1
        self._fresh_process()
        self._fresh_slots()

    def _open(self, lazy=True, spare=False):
        # Pooled connections connect lazily: if Redis is down, the C client
        # fails open and its circuit breaker spares the connect timeouts.
        config = self.config
        out = ffi.new("xf_client **")
        opts = ffi.new("xf_options *", config.opts[0])
        opts.lazy_connect = 1
        state = CallState(config.failures, self.refresher)
        handle = ffi.new_handle(state)
        opts.interrupt = lib._xf_py_interrupt  # a Ctrl-C ends a C wait at once
        opts.interrupt_ud = handle
        opts.refresh_executor = lib._xf_py_refresh  # background_refresh: _refresh.py
        opts.refresh_executor_ud = handle
        with self.lock:
            if config.seeded:  # reproducible, yet distinct draws per connection
                opts.seed = (config.opts.seed + 0x9E3779B97F4A7C15 * self.opened) % 2**64 or 1
            self.opened += 1
        rc = lib.xf_client_open(out, opts)
        if rc != 0:
            raise error_for(rc)
        ptr = ffi.gc(out[0], lib.xf_client_close)
        if not lazy:  # connect now, keeping the detail of a failure
            check(lib.xf_ping(ptr), ptr)
        conn = Conn(ptr, self.gen, config.share, state, handle)
        conn.enabled = config.enabled  # opened with options.disabled
        with self.lock:
            (self.all_spares if spare else self.all).add(conn)
        return conn

    def near_client(self):
        """A C client for a near hit when no connection is idle under a free
        slot, never waited for: a spare, which serves near hits only, so it
        never connects and counts under no slot. Given back with near_done,
        or, when its draw may have elected an early refresh (the near hit
        passed to the call), by the call's enter(), which moves that
        election to the call's connection."""
        try:
            return self.spares.pop()
        except IndexError:
            if self.closed:
                raise ValueError("the Cache is closed") from None
            return self._open(spare=True)

    def near_done(self, conn):
        if conn.gen == self.gen and not self.closed:
            self.spares.append(conn)
        elif conn.gen == self.gen:
            self._retire(conn)

    def enter(self):
        """The connection for a call: the one this thread's outer call holds
        (a loader or decorated function calling the Cache again: the C client
        allows nested calls, so nesting never opens more connections), else
        one from the pool, waiting for a slot under max_connections."""
        outer = getattr(self.tls, "conn", None)
        if outer is not None and outer.gen == self.gen:
            st = outer.state
            saved = (st.loader, st.exc, st.load_s, st.keys, outer.value)
            st.loader = st.exc = st.keys = None
            outer.value = ffi.new("xf_value *")
            outer.switch(enabled_now(self.config))
            return outer, saved
        slots = self.slots
        if slots is not None:
            slots.acquire()
        try:
            conn = self.idle.pop()  # _acquire's common case, inline
        except IndexError:
            try:
                conn = self._acquire()
            except BaseException:
                if slots is not None:
                    slots.release()
                raise
        tls = self.tls
        tls.conn = conn
        spare = getattr(tls, "spare", None)
        if spare is not None:  # a near hit passed to this call: its election too
            tls.spare = None
            lib.xf_near_move_refresh(spare.ptr, conn.ptr)
            self.near_done(spare)
        config = self.config
        enabled = config.enabled and config not in BYPASS.get()  # enabled_now, inline
        if conn.enabled is not enabled:
            conn.switch(enabled)
        return conn, None

    def exit(self, conn, saved):
        # A Ctrl-C that ended a C reply wait of a call with no loader (get,
        # set, delete) is raised here, never left for the next call.
        exc, conn.state.exc = conn.state.exc, None
        if saved is not None:  # back to the outer call on this connection
            st = conn.state
            st.loader, st.exc, st.load_s, st.keys, conn.value = saved
        else:
            self.tls.conn = None
            if conn.gen == self.gen and not self.closed:
                self.idle.append(conn)  # _release's common case, inline
            else:
                self._release(conn)
            if self.slots is not None:
                self.slots.release()
        if exc is not None and not isinstance(exc, Exception):
            raise exc

    def _acquire(self):
        try:
            return self.idle.pop()
        except IndexError:
            pass
        if self.closed:
            raise ValueError("the Cache is closed")
        return self._open()

    def _release(self, conn):
        if conn.gen == self.gen and not self.closed:
            self.idle.append(conn)
        elif conn.gen == self.gen:
            self._retire(conn)

    def _retire(self, conn):
        stats = stats_of([conn.ptr])
        with self.lock:
            for name in STAT_FIELDS:
                self.retired[name] += stats[name]
            self.all.discard(conn)
            self.all_spares.discard(conn)
        ffi.release(conn.ptr)

    def close(self):
        self.closed = True
        for idle in (self.idle, self.spares):
            while True:
                try:
                    conn = idle.pop()
                except IndexError:
                    break
                self._retire(conn)

    def _share_revalidated(self):
        """Revalidations done off the calls, on the share's refresh clients
        (a background refresh, a load past its soft timeout): this Cache's
        own share, so they are its own."""
        if self.config.share == ffi.NULL:
            return 0
        info = ffi.new("xf_refresh_info *")
        lib.xf_share_refresh_stats(self.config.share, info)
        return info.clients.revalidated

    def stats(self):
        with self.lock:
            retired = dict(self.retired)
            conns = list(self.all)
            spares = list(self.all_spares)
        total = stats_of([c.ptr for c in conns + spares], retired)
        total["load_errors"] += self.refresher.load_errors  # background refreshes'
        total["revalidated"] += self._share_revalidated()
        total["connections"] = len(conns)
        return total
