"""xfetch.aio's engine: the C event-loop driver (xf_async) on the running
asyncio loop. The driver does everything a call needs: the connections
(plain or TLS), the Redis Cluster routing, the flow, waits, timeouts, lease
renewals and background refreshes. This module is its loop adapter
(xf_async_loop: watch a socket, one timer) and the glue of its callbacks:
each call's future, each loader run as a task in its caller's context."""
from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import time
import weakref

from ._core import enter_load, leave_load
from ._errors import error_for
from ._native import ffi, lib
from ._refresh import log_failure
from ._revalidate import call_loader
from ._runtime import sink_value

_READ, _WRITE = lib.XF_ASYNC_READ, lib.XF_ASYNC_WRITE
_FORKS = [0]  # forks this process is the child of: an Engine of an earlier one is its parent's
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))
_KEPT = {}  # a kept call's handle (an int) -> [the call, how many refreshes keep it]
_OPEN = set()  # the Engines C holds (its hooks' data): never freed before their close


def _address(ptr):
    return int(ffi.cast("uintptr_t", ptr))


class Engine:
    """One xf_async handle on one event loop; owner: the Cache (its Config,
    the background tasks it tracks), weakly: the Cache closes it (close(),
    or when it is dropped)."""

    def __init__(self, loop, opts, owner):
        self.loop, self.owner = loop, weakref.ref(owner)
        self.config = owner._config
        self.me = ffi.new_handle(self)
        self.watches = {}  # token (a serial) -> [fd, events watched]
        self.serial = 0
        self.timer = None
        self.soon = None  # a firing on the loop's next turn (a timer armed at 0)
        self.live = {}  # call -> its handle, until its callback fired
        self.retiring = False
        self.corked = False  # until the loop's next turn (cork_turn)
        self.shutdown = None  # retired with calls in flight: closed as its loop ends
        self.forks = _FORKS[0]  # a fork's child leaves its loop and sockets alone
        hooks = ffi.new("xf_async_loop *", {
            "data": self.me, "watch": lib._xf_aio_watch, "unwatch": lib._xf_aio_unwatch,
            "timer_start": lib._xf_aio_timer_start, "timer_stop": lib._xf_aio_timer_stop,
            "cleanup": lib._xf_aio_cleanup})
        out = ffi.new("xf_async **")
        rc = lib.xf_async_open(out, opts, hooks)
        if rc != 0:
            raise _error(rc, ffi.NULL)
        self.ac = out[0]
        _OPEN.add(self)
        lib.xf_async_set_eager(self.ac, 1)  # a command goes out as its call starts,
        lib.xf_async_set_autocork(self.ac, 1)  # or with the others of this loop turn

    def retire(self):
        """Closes the handle once the calls in flight are over (their waits,
        loads and replies end as they would have), or as its loop shuts down
        before they are (asyncio.run's end cancelled their callers)."""
        self.retiring = True
        if not self.live:
            self.close()
        elif self.shutdown is None:
            self.shutdown = _closing_at_shutdown(self)

    def forked(self):
        """Whether this process is a fork's child of the one that opened it:
        its connections and loop registrations are the parent's."""
        return self.forks != _FORKS[0]

    def close(self):
        """Ends the calls in flight (XF_ECANCELED) and the connections (in a
        fork's child: forgotten, the parent's loop and sockets untouched)."""
        if self.ac is not None:
            lib.xf_async_close(self.ac)  # the callbacks still read its messages
            self.ac = None
            _OPEN.discard(self)
        hook, self.shutdown = self.shutdown, None
        if hook is not None:  # finished here, not by a loop that may be closed by then
            try:
                hook.aclose().send(None)
            except StopIteration:
                pass

    def start(self, call, start, *args, value=True):
        """Starts call: start (an xf_async_*) with args, then (call.loader:
        a get-or-compute) the loader and its ud, then the callback (value: a
        get's, else a set's) and its privdata: the call's handle."""
        me = self.live[call] = ffi.new_handle(call)  # not the call's: no cycle
        if call.loader is not None:
            args += (lib._xf_aio_loader, me)
        rc = start(self.ac, *args, lib._xf_aio_done if value else lib._xf_aio_done_rc, me)
        if rc != 0:
            del self.live[call]
            raise _error(rc, self.ac)

    def cork_turn(self):
        """The hits' reads of the calls started from now until the loop's
        next turn go together: one MGET per node and slot (C
        xf_async_cork), the first call's too (get_many). Without it, C
        corks a call started while others are in flight (autocork): a
        burst of calls costs one write and one command, a lone call goes
        at once."""
        if not self.corked:
            self.corked = True
            lib.xf_async_cork(self.ac)
            self.loop.call_soon(self._uncork)

    def _uncork(self):
        self.corked = False
        if self.ac is not None:
            lib.xf_async_uncork(self.ac)

    def fired(self, soon=False):
        if soon:
            self.soon = None
        else:
            self.timer = None
        if self.ac is not None:
            lib.xf_async_timer_fired(self.ac)

    def stats(self, out):
        lib.xf_async_stats(self.ac, out)


async def _until_shutdown(engine):
    try:
        yield
    finally:
        engine.shutdown = None  # running: not to be finished again by close()
        engine.close()


def _closing_at_shutdown(engine):
    """A hook that closes engine when its loop shuts down: an async
    generator, started on the running loop, which the loop finishes at
    loop.shutdown_asyncgens (the end of asyncio.run, asyncio.Runner.close):
    asyncio reports no other end of a loop. For a retired handle whose calls
    in flight were left (cancelled) by a loop ending: nothing else would ever
    close it. The loop holds the hook weakly: the engine keeps it."""
    hook = _until_shutdown(engine)
    try:
        hook.asend(None).send(None)  # to its yield; the loop's firstiter hook adds it
    except StopIteration:
        pass
    return hook


def _error(rc, ac):
    return type(error_for(rc))(rc, ffi.string(lib.xf_async_errmsg(ac)).decode(errors="replace"))


# ---- the loop adapter (xf_async_loop) ----------------------------------------------

@ffi.def_extern(onerror=lambda *exc: -1)
def _xf_aio_watch(data, watch, fd, events, conn):
    eng = ffi.from_handle(data)
    if watch[0] == ffi.NULL:
        eng.serial += 1
        token = eng.serial
        eng.watches[token] = w = [fd, 0]
        watch[0] = ffi.cast("void *", token)
    else:
        w = eng.watches[_address(watch[0])]
    loop, old = eng.loop, w[1]
    if (events ^ old) & _READ:
        if events & _READ:
            loop.add_reader(fd, lib.xf_async_ready, conn, _READ)
        else:
            loop.remove_reader(fd)
    if (events ^ old) & _WRITE:
        if events & _WRITE:
            loop.add_writer(fd, lib.xf_async_ready, conn, _WRITE)
        else:
            loop.remove_writer(fd)
    w[1] = events
    return 0


@ffi.def_extern()
def _xf_aio_unwatch(data, watch):
    eng = ffi.from_handle(data)
    fd, events = eng.watches.pop(_address(watch))
    if not eng.loop.is_closed() and not eng.forked():  # its epoll set is the parent's too
        if events & _READ:
            eng.loop.remove_reader(fd)
        if events & _WRITE:
            eng.loop.remove_writer(fd)


@ffi.def_extern()
def _xf_aio_timer_start(data, delay_ms):
    """An armed timer due sooner is kept: firing early, C finds nothing due
    and arms it again (each call moves the watchdog's time a little later:
    one loop timer per watchdog period, not per call). One at 0 (autocork's
    uncork, a completion for the next tick) is a call_soon beside it."""
    eng = ffi.from_handle(data)
    loop = eng.loop
    if delay_ms == 0:
        if eng.soon is None and not loop.is_closed():
            eng.soon = loop.call_soon(eng.fired, True)
        return
    when = loop.time() + delay_ms / 1000
    if eng.timer is not None:
        if eng.timer.when() <= when:
            return
        eng.timer.cancel()
    eng.timer = None if loop.is_closed() else loop.call_at(when, eng.fired)


@ffi.def_extern()
def _xf_aio_timer_stop(data):
    pass  # kept: its firing finds nothing due (xf_async_timer_fired)


@ffi.def_extern()
def _xf_aio_cleanup(data):
    pass  # the Engine (data's object) lives as long as its Cache holds it


# ---- calls ------------------------------------------------------------------------

class Call:
    """One xf_async call: its future (set by its callback), its loader and
    the context it runs in (its caller's: contextvars, the bypass switch)."""

    __slots__ = ("engine", "fut", "loader", "key", "kb", "ctx", "rc", "value",
                 "source", "error", "exc", "task", "left", "took")

    def __init__(self, engine, key=None, kb=None, loader=None):
        self.engine, self.key, self.kb, self.loader = engine, key, kb, loader
        self.fut = engine.loop.create_future()
        self.ctx = contextvars.copy_context() if loader is not None else None
        self.rc, self.value, self.source, self.error = 0, None, 0, ""
        self.exc = self.task = None
        self.left = False
        self.took = 0.0

    async def wait(self):
        """Awaits the callback; the task leaving (cancelled, interrupted)
        leaves the call to finish without it: a loader not started yet is
        not (its lease released at once), a running one is cancelled."""
        try:
            await self.fut
        except BaseException:
            self.left = True
            if self.task is not None:
                self.task.cancel()
            raise

    def error_of(self):
        return type(error_for(self.rc))(self.rc, self.error)


@ffi.def_extern()
def _xf_aio_done(rc, value, privdata):
    call = ffi.from_handle(privdata)
    call.rc = rc
    if rc == 0:
        call.value = ffi.unpack(value.data, value.len)
        call.source = value.source
    elif rc != lib.XF_ENOTFOUND:
        call.error = ffi.string(lib.xf_async_errmsg(call.engine.ac)).decode(errors="replace")
    _finished(call)


@ffi.def_extern()
def _xf_aio_done_rc(rc, privdata):
    call = ffi.from_handle(privdata)
    call.rc = rc
    if rc not in (0, lib.XF_ENOTFOUND, lib.XF_ESUPERSEDED):
        call.error = ffi.string(lib.xf_async_errmsg(call.engine.ac)).decode(errors="replace")
    _finished(call)


def _finished(call):
    eng = call.engine
    eng.live.pop(call, None)
    if eng.retiring and not eng.live:
        eng.close()
    if not call.fut.done():
        try:
            call.fut.set_result(None)
        except RuntimeError:  # its loop is closed: nobody awaits it
            pass


@ffi.def_extern()
def _xf_aio_keep(ud):
    """policy.loader_ud_keep: a background refresh keeps the call (its loader)."""
    call = ffi.from_handle(ud)
    kept = _KEPT.setdefault(_address(ud), [call.engine.live[call], 0])
    kept[1] += 1
    return ud


@ffi.def_extern()
def _xf_aio_drop(ud):
    kept = _KEPT[_address(ud)]
    kept[1] -= 1
    if not kept[1]:
        del _KEPT[_address(ud)]


KEEP = (lib._xf_aio_keep, lib._xf_aio_drop)  # for the face's policies


@ffi.def_extern()
def _xf_aio_loader(ud, key, keylen, load):
    call = ffi.from_handle(ud)
    eng = call.engine
    if call.left or eng.loop.is_closed():  # its task left: nothing to compute for
        lib.xf_async_load_complete(load, lib.XF_ELOADER)
        return
    me = eng.live.get(call) or _KEPT[_address(ud)][0]  # ud's owner, alive while it loads
    loading = _Loading(load, me)
    coro = _load(call, loading)
    try:  # in a copy of the caller's context: a task factory (loop, coro) takes no context=
        task = call.ctx.run(eng.loop.create_task, coro)
    except BaseException as e:  # noqa: B902 - the loop will not run it: the load fails
        coro.close()
        _failed(call, e)
        loading.complete(lib.XF_ELOADER)
        return
    task.add_done_callback(loading.ended)
    owner = eng.owner()
    if call.fut.done() and owner is not None:  # a background refresh, a timed-out load
        owner._tracked(task)
    else:
        call.task = task


class _Loading:
    """A load a task completes, exactly once: by _load, or as failed once
    the task is over without it (cancelled before its first step, which
    runs none of _load: close(), asyncio.run's end, a task group). C waits
    for the completion: the call, its lease and its loader's data with it."""

    __slots__ = ("load", "me", "completed")

    def __init__(self, load, me):
        self.load, self.me, self.completed = load, me, False  # me: ud's handle, kept alive

    def complete(self, rc):
        if not self.completed:
            self.completed = True
            lib.xf_async_load_complete(self.load, rc)

    def sink(self):  # once completed, C may have freed load
        return ffi.NULL if self.completed else lib.xf_async_load_sink(self.load)

    def ended(self, task):
        self.complete(lib.XF_ELOADER)


async def _load(call, loading):
    """Runs call's loader (given the previous value when it asked for it)
    and completes its load with its result; a failure is the call's (raised
    by it), or logged once the call is over (a refresh, a timed-out load)."""
    token = enter_load(call.engine.config.namespace, call.kb)
    exc = None
    t0 = time.monotonic()
    try:
        value = call_loader(call.loader, loading.sink())
        if inspect.isawaitable(value):
            value = await value
    except Exception as e:  # noqa: B902 - nothing is cached; raised (or logged) at the end
        exc = e
    except BaseException as e:  # cancelled (its task left, or close()), interrupted
        if not isinstance(e, asyncio.CancelledError):
            if call.fut.done():  # no caller to raise it in (a refresh): out of the
                loading.complete(lib.XF_ELOADER)  # loop, as from any task
                raise
            call.exc = e
        loading.complete(lib.XF_ELOADER)
        return
    finally:
        leave_load(token)
        call.took = time.monotonic() - t0
    if exc is None:
        sink = loading.sink()
        try:
            if sink != ffi.NULL:  # NULL: the handle closed, the result goes nowhere
                sink_value(value, sink)
        except Exception as e:  # noqa: B902 - a wrong type or size: the loader's failure
            exc = e
    if exc is None:
        loading.complete(0)
        return
    _failed(call, exc)
    loading.complete(lib.XF_ELOADER)


def _failed(call, exc):
    """exc is the call's loader's failure: raised by the call, or logged
    once the call is over (a refresh, a timed-out load); kept for the
    share's followers."""
    if isinstance(exc, Exception):
        call.engine.config.failures.record(call.kb, exc)
    if call.fut.done():
        log_failure(call.key, exc)
    else:
        call.exc = exc
