"""Events, logging and the counters metrics read, for both faces.

The C hook (xf_options.on_event) calls _xf_py_event for each event of a
Cache's C clients (the aio face's: of its event-loop handle).
Per Cache, one Events object: it counts what xfetch.metrics exports (by
namespace: the decorator's, passed with the call in a context variable),
writes the `xfetch` logger's records (WARNING once per episode, INFO when an
episode ends, DEBUG for the rest: never a record per hit above DEBUG) and
builds an Event for the user's on_event callable only when there is one."""
from __future__ import annotations

import contextvars
import logging
import threading
from typing import NamedTuple, Optional

from ._native import ffi, lib

log = logging.getLogger("xfetch")

NAMESPACE = contextvars.ContextVar("xfetch_namespace", default="")
TYPES = [ffi.string(lib.xf_event_name(i)).decode() for i in range(lib.XF_EV_REVALIDATED + 1)]
DRIVERS = [ffi.string(lib.xf_driver_name(i)).decode() for i in range(lib.XF_DRIVER_CALL + 1)]
SOURCES = {0: "cache", 1: "loader", 2: "stale", 3: "uncached", 4: "local"}
# The one result each get-or-compute reports, as xfetch_calls_total's label.
_HIT = lib.XF_EV_HIT
_NEAR = lib.XF_EV_NEAR  # a near-cache hit: the same hot path
_FAIL_OPEN, _LOCAL = lib.XF_EV_FAIL_OPEN, lib.XF_SOURCE_LOCAL
RESULTS = {lib.XF_EV_HIT: "hit", lib.XF_EV_EARLY: "early", lib.XF_EV_MISS: "miss",
           lib.XF_EV_STALE: "stale", lib.XF_EV_FAIL_OPEN: "uncached", lib.XF_EV_NEAR: "near"}
# Load-duration histogram upper bounds, seconds (+Inf implied).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_EPISODES_MAX = 1024  # keys whose refresh failure or slow load was logged


class Event(NamedTuple):
    """What xfetch did, given to Cache(on_event=...). type: "hit", "miss",
    "early", "stale", "fail_open", "near" (one of these per get-or-compute:
    its result), "lease_won", "lease_lost", "load_start", "load_done",
    "wait", "local", "superseded", "breaker_opened", "breaker_closed",
    "reconnect", "redirect", "invalidation", "lease_renewed" (a slow
    loader's lease renewed; error 0, or XF_ESUPERSEDED when it was not the
    loader's any more), "soft_timeout", "hard_timeout" (the caller stopped
    waiting for a load: source the value it got, or error XF_ETIMEDOUT; the
    load goes on), "failsafe" (a load failed lately: the last good value,
    no load; policy failsafe_throttle), "tag_invalidated" (an entry read
    was refused as fresh, error 1: a tag it carries was invalidated since it
    was loaded, so it is served stale at most (tags_never_stale); 2: it
    carries other tags than the call's, or none). key: the key's bytes (without
    the prefix), None for a server's events; for "invalidation" (near cache):
    the Redis key Redis invalidated (prefix included), or None when the near
    cache dropped what it kept from server (error 0: a flush; XF_EIO: a lost
    connection), reported by the Cache's next get after it happened; namespace: the decorator's
    ("" for direct calls); driver: the C driver ("blocking", "call", ...);
    source: the value's source when one was served ("cache", "stale",
    "local"), else None; duration: seconds (load_done: the loader's time;
    wait: the wait's), else None; error: load_done: 0 or the loader's failure
    code; fail_open: the XF_E* code that made Redis unusable; server:
    "host:port" for breaker, reconnect and redirect events; face: "sync" or
    "aio"."""
    type: str
    key: Optional[bytes]
    namespace: str
    driver: str
    source: Optional[str]
    duration: Optional[float]
    error: int
    server: Optional[str]
    face: str


class Events:
    """One Cache's events: counters, log episodes, the user's callable."""

    def __init__(self, on_event, face):
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be callable, not {type(on_event).__name__}")
        self.callback = on_event
        self.face = face
        self.lock = threading.Lock()
        self.calls = {}  # (namespace, result) -> n
        self.near_cells = {}  # namespace -> uint64_t C counts quiet near hits in
        self.loads = {}  # (namespace, "ok" | "error") -> n
        self.load_hist = {}  # namespace -> [bucket counts..., +Inf count, sum]
        self.waits = {}  # namespace -> [n, seconds]
        self.invalidations = {}  # "key" | "flush" | "lost" -> n (near cache)
        self.failsafe = {}  # namespace -> n: stale values served under the fail-safe
        # The aio face's C events come from the loop's callbacks, not from the
        # calls' contexts: a namespaced call's key -> its namespace (noted as it
        # starts; a decorator's keys carry their namespace, so it never changes).
        self.namespaces = {}
        self.open_servers = set()  # breakers open now
        self.failing_open = False  # a fail-open episode was logged
        self.refresh_failed = {}  # key -> True: logged, until a load of it succeeds
        self.slow = {}  # key -> True: logged, until a load of it is not slow
        self._callback_failed = False
        self.handle = ffi.new_handle(self)

    # ---- the counters -----------------------------------------------------------

    def _count(self, table, key):
        with self.lock:
            table[key] = table.get(key, 0) + 1

    def _load_done(self, ns, seconds, ok):
        with self.lock:
            k = (ns, "ok" if ok else "error")
            self.loads[k] = self.loads.get(k, 0) + 1
            h = self.load_hist.get(ns)
            if h is None:
                h = self.load_hist[ns] = [0] * (len(BUCKETS) + 2)
            i = 0
            while i < len(BUCKETS) and seconds > BUCKETS[i]:
                i += 1
            h[i] += 1
            h[-1] += seconds

    def snapshot(self):
        """Copies of the counters, for a scrape."""
        with self.lock:
            calls = dict(self.calls)
            for ns, cell in self.near_cells.items():  # the faces' quiet near hits
                calls[(ns, "near")] = calls.get((ns, "near"), 0) + cell[0]
            return (calls, dict(self.loads),
                    {ns: list(h) for ns, h in self.load_hist.items()},
                    {ns: list(w) for ns, w in self.waits.items()}, len(self.open_servers),
                    dict(self.invalidations), dict(self.failsafe))

    # ---- events -----------------------------------------------------------------

    def quiet(self):
        """Whether a hit's event would only be counted (no user callable, no
        DEBUG logging, no fail-open episode to end): the hot path."""
        return (self.callback is None and not self.failing_open
                and not log.isEnabledFor(logging.DEBUG))

    def near_count(self):
        """Where C xf_near_serve counts a near hit's result (this call's
        namespace's uint64_t, read by snapshot) when the hook would only
        count it, else NULL (the event goes through the hook)."""
        if (self.callback is not None or self.failing_open
                or log.isEnabledFor(logging.DEBUG)):  # not quiet()'s call: the hot path
            return ffi.NULL
        ns = NAMESPACE.get()
        cell = self.near_cells.get(ns)
        if cell is None:
            with self.lock:
                cell = self.near_cells.setdefault(ns, ffi.new("uint64_t *"))
        return cell

    def on_c_event(self, ev):
        """An xf_event from the C hook."""
        t = ev.type
        ns = NAMESPACE.get() if self.face != "aio" else self.namespace_of(ev)
        if (t == _HIT or t == _NEAR) and self.quiet():
            # The hot path: a hit only counts (no key or server string made).
            k = (ns, "hit" if t == _HIT else "near")
            with self.lock:
                self.calls[k] = self.calls.get(k, 0) + 1
            return
        key = ffi.unpack(ev.key, ev.keylen) if ev.key != ffi.NULL else None
        server = ffi.string(ev.server).decode(errors="replace") if ev.server != ffi.NULL else None
        self.on(t, key, DRIVERS[ev.driver] if 0 <= ev.driver < len(DRIVERS) else "?",
                ev.source, ev.duration_us, ev.rc, server, ns)

    def note_namespace(self, kb):
        """An aio call of key kb starts: its events' namespace is the caller's."""
        ns = NAMESPACE.get()
        if ns and self.namespaces.get(kb) != ns:
            if len(self.namespaces) >= 65536:
                self.namespaces.clear()
            self.namespaces[kb] = ns

    def namespace_of(self, ev):
        if not self.namespaces or ev.key == ffi.NULL:
            return ""
        return self.namespaces.get(ffi.unpack(ev.key, ev.keylen), "")

    def on(self, t, key, driver, source, duration_us, rc, server, ns=None):
        if ns is None:
            ns = NAMESPACE.get()
        result = RESULTS.get(t)
        if t == _FAIL_OPEN and source == _LOCAL:
            result = "shared"  # failed open, answered by the process share: no load
        if result is not None:
            self._count(self.calls, (ns, result))
            if t == lib.XF_EV_FAIL_OPEN:
                self._fail_open(rc)
            elif self.failing_open and t != lib.XF_EV_STALE:
                self.failing_open = False  # Redis answered a read again
                log.info("Redis is usable again: values are cached again")
        elif t == lib.XF_EV_LOAD_DONE:
            self._load_done(ns, duration_us / 1e6, rc == 0)
            if rc == 0 and key in self.refresh_failed:
                self.refresh_failed.pop(key, None)
        elif t == lib.XF_EV_WAIT:
            with self.lock:
                w = self.waits.setdefault(ns, [0, 0.0])
                w[0] += 1
                w[1] += duration_us / 1e6
        elif t == lib.XF_EV_FAILSAFE:
            self._count(self.failsafe, ns)
        elif t == lib.XF_EV_INVALIDATION:
            reason = "key" if key is not None else "flush" if rc == 0 and server else "lost"
            self._count(self.invalidations, reason)
        elif t == lib.XF_EV_BREAKER_OPEN:
            self.open_servers.add(server)
            log.warning("Redis %s cannot be reached: circuit breaker opened; calls skip it "
                        "and fail open (the loader runs, nothing is cached) until it is back",
                        server)
        elif t == lib.XF_EV_BREAKER_CLOSED:
            self.open_servers.discard(server)
            log.info("Redis %s is reachable again: circuit breaker closed", server)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("event %s key=%r namespace=%r driver=%s source=%s duration_us=%s rc=%s "
                      "server=%s", TYPES[t], key, ns, driver, SOURCES.get(source), duration_us,
                      rc, server)
        if self.callback is not None:
            self._call_user(Event(
                TYPES[t], key, ns, driver, SOURCES.get(source),
                duration_us / 1e6 if t in (lib.XF_EV_LOAD_DONE, lib.XF_EV_WAIT) else None,
                rc, server, self.face))

    def _fail_open(self, rc):
        if self.failing_open:
            return
        self.failing_open = True
        if not self.open_servers:  # a breaker's opening already said so
            log.warning("Redis cannot be used (%s): failing open, the loader runs and nothing "
                        "is cached until it answers again",
                        ffi.string(lib.xf_strerror(rc)).decode())

    def _call_user(self, event):
        try:
            self.callback(event)
        except Exception:
            if not self._callback_failed:
                self._callback_failed = True
                log.warning("the on_event callable raised (logged once)", exc_info=True)

    # ---- once-per-episode warnings from the faces -----------------------------

    def refresh_failure(self, key, source, exc):
        """A loader failed but a value was served (a failed refresh)."""
        kb = key if isinstance(key, bytes) else str(key).encode()
        if kb in self.refresh_failed:
            log.debug("loader for %r failed again; served the %s value", key, source)
            return
        if len(self.refresh_failed) >= _EPISODES_MAX:
            self.refresh_failed.clear()
        self.refresh_failed[kb] = True
        log.warning("loader for %r failed; served the %s value (logged once until a load "
                    "of it succeeds)", key, source, exc_info=exc)

    def slow_load(self, key, took, lease):
        if key in self.slow:
            return
        if len(self.slow) >= _EPISODES_MAX:
            self.slow.clear()
        self.slow[key] = True
        log.warning("loader for %r took %.3f s, longer than its lease (%.3f s), and its value "
                    "was not cached: other callers may have run it too; pass lease= above the "
                    "loader's time (logged once until a load of it fits)", key, took, lease)

    def load_fit(self, key):
        if self.slow:
            self.slow.pop(key, None)


@ffi.def_extern()
def _xf_py_event(ev, ud):
    try:
        ffi.from_handle(ud).on_c_event(ev)
    except Exception:  # never let an observer break a call
        log.debug("event handling failed", exc_info=True)
