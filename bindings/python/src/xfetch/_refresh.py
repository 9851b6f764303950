"""Background refresh (background_refresh=True): where an early refresh a
call won runs once that call has returned the current value.

xfetch.Cache: the C blocking client hands the refresh to this face's
executor (C options.refresh_executor, _xf_py_refresh, called inside the
winning call, on its thread): a bounded queue and two daemon threads per
Cache, which run the loader and the write (C xf_refresh_run, on a client
opened like the caller's). xfetch.aio.Cache: the C event-loop driver runs
it on the loop as a call of its own, its loader a task the Cache tracks
(_aio_loop). Either way a failed refresh keeps the cached value, releases the
lease, counts load_errors and logs a WARNING with the traceback on the
`xfetch` logger; close() stops taking refreshes, waits up to `timeout` for
the running ones and abandons the rest (their leases expire). Daemon
threads: interpreter exit never waits for a refresh."""
from __future__ import annotations

import _thread
import collections
import logging
import os
import threading
import time

from ._native import ffi, lib
from ._runtime import CallState

log = logging.getLogger("xfetch")

DRAIN_S = 2.0  # close()'s default wait for running refreshes (C XF_REFRESH_DRAIN_MS)


def log_failure(key, exc):
    log.warning("background refresh of %r failed; the cached value stays", key,
                exc_info=exc)


class Refresher:
    """The sync face's bounded background refreshes (one per Cache)."""

    THREADS, QUEUE = 2, 64
    IDLE_S = 2.0  # a thread with no refresh to run for this long ends

    def __init__(self, config):
        # The Cache's Config: the C share and the event hook's handle the
        # refresh's C client uses stay alive while a refresh runs.
        self.config = config
        self.failures = config.failures  # a loader's exception for the share
        self.load_errors = 0  # counted here: the C client that ran it is gone
        self._fresh()

    def _fresh(self):
        """A new process (a fork child): the parent's threads are not here."""
        self.pid = os.getpid()
        self.cv = threading.Condition(threading.Lock())
        self.queue = collections.deque()
        self.threads = self.running = 0
        self.closing = False

    def submit(self, r, loader):
        """Takes C refresh r (0) or refuses it (1: C releases its lease)."""
        if self.pid != os.getpid():
            self._fresh()
        with self.cv:
            if self.closing or len(self.queue) >= self.QUEUE or loader is None:
                return 1
            self.queue.append((r, loader))
            # Started all at once, without waiting for them to run
            # (threading.Thread.start would wait for its bootstrap, which
            # needs the GIL: on the winning call's path, that wait was up to
            # ~100 ms with 8 busy threads). Like daemon threads, they are not
            # waited for at exit.
            while self.threads < self.THREADS:
                _thread.start_new_thread(self._work, ())
                self.threads += 1
            self.cv.notify()
        return 0

    def _work(self):
        cv = self.cv
        while True:
            with cv:
                # Idle threads end (submit starts them again): a Cache dropped
                # without close() would keep them waiting for ever, 2 per Cache
                while not self.queue and not self.closing:
                    if not cv.wait(self.IDLE_S) and not self.queue:
                        break
                if not self.queue:
                    self.threads -= 1
                    return
                r, loader = self.queue.popleft()
                self.running += 1
            try:
                self._run(r, loader)
            finally:
                with cv:
                    self.running -= 1
                    cv.notify_all()

    def _run(self, r, loader):
        n = ffi.new("size_t *")
        key = ffi.unpack(lib.xf_refresh_key(r, n), n[0])
        state = CallState(self.failures)
        state.loader = loader
        rc = lib.xf_refresh_run(r, lib._xf_py_loader, ffi.new_handle(state))
        if rc == 0:
            return
        with self.cv:
            self.load_errors += rc == lib.XF_ELOADER
        exc = state.exc
        if exc is None:
            from ._errors import error_for
            exc = error_for(rc)
        log_failure(key, exc)

    def close(self, timeout=DRAIN_S):
        """Stops taking refreshes, drops the queued ones, waits up to timeout
        seconds for the running ones (left to finish on their own after)."""
        if self.pid != os.getpid():
            self._fresh()
        with self.cv:
            self.closing = True
            dropped = list(self.queue)
            self.queue.clear()
            self.cv.notify_all()
        for r, _ in dropped:
            lib.xf_refresh_drop(r)
        deadline = time.monotonic() + timeout
        with self.cv:
            while self.running:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cv.wait(left)


@ffi.def_extern(onerror=lambda *exc: 1)
def _xf_py_refresh(r, ud):
    """The C blocking client's refresh executor: ud is the connection's
    CallState, whose loader is the winning call's."""
    state = ffi.from_handle(ud)
    return state.refresher.submit(r, state.loader)
