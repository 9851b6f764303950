"""Running one C sans-I/O call (xf_call_*) for xfetch.aio: each SEND goes on
the link of the server the call names (xf_call_target, xf_call_send:
_aio_link), its loader is awaited, each WAIT is parked on its last link
(xf_call_park: the link ends it, at its time or on a write). A call its
task leaves (cancelled, interrupted) is finished in the background without a
loader: a lease it holds, or is about to be granted, is released at once
instead of being left for `lease` seconds."""
from __future__ import annotations

import asyncio
import inspect
import time

from ._aio_link import now_ms
from ._core import enter_load, leave_load
from ._native import ffi, lib
from ._revalidate import call_loader
from ._runtime import sink_value

# steps() compares with these literals (no attribute lookups on the hot path)
assert (lib.XF_CALL_SEND, lib.XF_CALL_LOAD, lib.XF_CALL_DONE) == (0, 1, 3)
_monotonic = time.monotonic
_NEVER = (1 << 63) - 1  # xf_call_renew_at: no renewal


async def steps(cache, call, loader=None, key=None, kb=None):
    """Runs call to XF_CALL_DONE. Returns (the loader's exception or None,
    how long the loader took). On a BaseException (CancelledError,
    KeyboardInterrupt) the call is finished in the background and not to be
    touched again; else the caller takes its result and frees it."""
    links = cache._links
    hostp, portp = cache._hostp, cache._portp
    exc, took, moving, link = None, 0.0, None, None
    try:
        step = lib.xf_call_next(call)
        while step != 3:  # XF_CALL_DONE
            if step != 1:  # XF_CALL_SEND: on the link of the server it names; WAIT: parked
                if step == 0:
                    lib.xf_call_target(call, hostp, portp)
                    link = links.get(hostp[0], portp[0])
                    moving = link.send(call)
                else:
                    link = link or links.get(ffi.NULL, 0)
                    moving = link.park(call)
                if moving is not None:
                    await moving
                    moving = None
                step = lib.xf_call_received(call, now_ms())  # in this task: its events
            else:  # XF_CALL_LOAD
                t0 = _monotonic()
                step, exc = await _load(cache, call, loader, kb, key)
                took = _monotonic() - t0
    except BaseException:
        if moving is not None and not moving.done():
            moving.cancel()
        if step == 2:  # XF_CALL_WAIT: forgotten by its link at once
            link.waiting.pop(call, None)
            lib.xf_call_free(call)
        elif moving is None or not moving.cancelled():
            abandoned(links, call)  # else the link does, once it moved
        raise
    return exc, took


async def _load(cache, call, loader, kb, key):
    """Runs the loader into the call's sink (C xf_sink: bytes, None for not
    found, a result with its own ttl; a wrong type or size raises as on the
    sync face). Returns (next step, the loader's Exception or None). While
    it runs, the call's times (C xf_call_load_deadline, xf_call_renew_at)
    are kept by _watch: then the loader runs as a task."""
    sink = lib.xf_call_sink(call)
    if lib.xf_call_load_deadline(call) == _NEVER and lib.xf_call_renew_at(call) == _NEVER:
        return _feed(cache, call, kb, *await _value(cache, loader, kb, sink))
    work = asyncio.get_running_loop().create_task(_value(cache, loader, kb, sink))
    try:
        if await _watch(cache, call, work, True):  # timed out: the load moved to a call
            moved = lib.xf_call_take_refresh(call)
            cache._track(_finish_moved(cache, moved, work, kb, key))
            return 3, None  # XF_CALL_DONE
    except BaseException:
        work.cancel()
        raise
    return _feed(cache, call, kb, *work.result())


async def _watch(cache, call, work, bounded):
    """Awaits work (call's loader, in XF_CALL_LOAD) doing what the C call
    asks at its times: a lease renewal (xf_call_renew_at,
    xf_call_start_renew: a call of its own, driven as a task) and, bounded,
    the timeout (xf_call_load_deadline, xf_call_load_timeout: a soft or hard
    timeout; a plain loader runs on the loop, it cannot be timed out).
    Returns True when the call timed out (ended: its load moved)."""
    out = ffi.new("xf_call **")
    while not work.done():
        deadline = lib.xf_call_load_deadline(call) if bounded else _NEVER
        at = min(deadline, lib.xf_call_renew_at(call))
        left = None if at == _NEVER else (at - now_ms()) / 1000
        if left is None or left > 0:
            await asyncio.wait((work,), timeout=left)
        if work.done():
            break
        now = now_ms()
        if now >= deadline:
            if lib.xf_call_load_timeout(call, now) == 3:  # XF_CALL_DONE
                return True
            bounded = False  # no memory to move the load: wait for it
        elif lib.xf_call_start_renew(out, call, now) != 0:
            await work  # nothing more to renew
        elif out[0] != ffi.NULL:
            cache._track(_renew(cache, out[0]))
    return False


async def _renew(cache, renew):
    """Drives a lease renewal to its end (its failure waits for the next)."""
    await steps(cache, renew)  # cancelled: finished in the background there
    lib.xf_call_result(renew, ffi.NULL)
    lib.xf_call_free(renew)


async def _value(cache, loader, kb, sink):
    """Runs the loader (given sink's previous value when it asked for it):
    (its value, its Exception or None, its time in us)."""
    token = enter_load(cache._config.namespace, kb)
    t0 = _monotonic()
    try:
        value = call_loader(loader, sink)
        if inspect.isawaitable(value):
            value = await value
        return value, None, int((_monotonic() - t0) * 1e6)
    except Exception as e:  # nothing is cached; raised (or logged) at the end
        return None, e, int((_monotonic() - t0) * 1e6)
    finally:
        leave_load(token)


def _feed(cache, call, kb, value, exc, took_us):
    """The loader's outcome into call (in XF_CALL_LOAD): (next step, the
    Exception or None)."""
    if exc is None:
        try:
            sink_value(value, lib.xf_call_sink(call))
        except Exception as e:  # noqa: B902 - a wrong type or size: the loader's failure
            exc = e
    if exc is not None:
        cache._config.failures.record(kb, exc)  # for the share's followers
        return lib.xf_call_load_done(call, -1, took_us, now_ms()), exc
    return lib.xf_call_load_done(call, 0, took_us, now_ms()), None


async def _finish_moved(cache, call, work, kb, key):
    """A load a timed-out call left (work, its loader's task): renews its
    lease until the loader returns, then feeds it and drives its write."""
    try:
        await _watch(cache, call, work, False)
        got = await work
    except BaseException:  # closing: the lease is released, the load dropped
        work.cancel()
        abandoned(cache._links, call)
        raise
    _, exc = _feed(cache, call, kb, *got)
    await steps(cache, call)  # cancelled: abandoned there
    try:
        rc = lib.xf_call_result(call, ffi.NULL)
        if exc is not None or (rc != 0 and rc != lib.XF_ENOTFOUND):
            from ._core import call_error
            from ._refresh import log_failure
            log_failure(key, exc if exc is not None else call_error(rc, call))
    finally:
        exc = None
        lib.xf_call_free(call)


def abandoned(links, call):
    """Finishes a call its task left, with no loader: a LOAD is failed (a
    lease held is released, a share flight ended), a SEND goes on its link
    when that one has a stream (this again once it moved); the call is
    freed once DONE, waiting, or with no stream to take it."""
    host, port = ffi.new("const char **"), ffi.new("int *")
    step = lib.xf_call_received(call, now_ms())
    while step == lib.XF_CALL_LOAD:
        step = lib.xf_call_load_failed(call, -1, now_ms())
    if step == lib.XF_CALL_SEND:
        lib.xf_call_target(call, host, port)
        link = links.get(host[0], port[0])
        if link.sock is not None and lib.xf_call_send(call, link.l, now_ms()) == 0:
            fut = links.loop.create_future()
            fut.cancel()
            link.waiting[call] = fut
            link.flush()
            return
    lib.xf_call_free(call)
