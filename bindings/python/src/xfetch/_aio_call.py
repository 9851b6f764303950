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
                if lib.xf_call_load_deadline(call) == _NEVER:
                    step, exc = await _load(cache, call, loader, kb)
                else:  # soft_timeout, hard_timeout
                    step, exc = await _load_bounded(cache, call, loader, kb, key)
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


async def _load(cache, call, loader, kb):
    """Runs the loader into the call's sink (C xf_sink: bytes, None for not
    found, a result with its own ttl; a wrong type or size raises as on the
    sync face). Returns (next step, the loader's Exception or None)."""
    keeper = None
    if lib.xf_call_renew_at(call) != _NEVER:  # the loop renews its lease meanwhile
        keeper = asyncio.get_running_loop().create_task(_keep_lease(cache, call))
    try:
        got = await _value(cache, loader, kb, lib.xf_call_sink(call))
    finally:
        if keeper is not None:  # cancelled before the call moves on: it never sees it again
            keeper.cancel()
    return _feed(cache, call, kb, *got)


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


async def _load_bounded(cache, call, loader, kb, key):
    """_load under a soft or hard timeout (C xf_call_load_deadline): the
    loader runs as a task; past the deadline the call ends with what it had
    (xf_call_load_timeout) and the load goes on as a task the Cache tracks,
    fed into the call it moved to and driven to its write. A plain (not
    async) loader runs on the loop: it cannot be timed out."""
    loop = asyncio.get_running_loop()
    work = loop.create_task(_value(cache, loader, kb, lib.xf_call_sink(call)))
    keeper = None
    if lib.xf_call_renew_at(call) != _NEVER:
        keeper = loop.create_task(_keep_lease(cache, call))
    try:
        left = (lib.xf_call_load_deadline(call) - now_ms()) / 1000
        if left > 0:
            await asyncio.wait((work,), timeout=left)
        if not work.done():
            step = lib.xf_call_load_timeout(call, now_ms())
            if step == 3:  # XF_CALL_DONE: the load moved to a call of its own
                moved = lib.xf_call_take_refresh(call)
                cache._track(_finish_moved(cache, moved, work, kb, key))
                return step, None
            await work  # no memory to move it: wait for it
    except BaseException:
        work.cancel()
        raise
    finally:
        if keeper is not None:
            keeper.cancel()
    return _feed(cache, call, kb, *work.result())


async def _finish_moved(cache, call, work, kb, key):
    """A load a timed-out call left (work, its loader's task): renews its
    lease until the loader returns, then feeds it and drives its write."""
    keeper = None
    if lib.xf_call_renew_at(call) != _NEVER:
        keeper = asyncio.get_running_loop().create_task(_keep_lease(cache, call))
    try:
        got = await work
    except BaseException:  # closing: the lease is released, the load dropped
        work.cancel()
        abandoned(cache._links, call)
        raise
    finally:
        if keeper is not None:
            keeper.cancel()
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


async def _keep_lease(cache, call):
    """Renews the lease of call, in XF_CALL_LOAD, while its loader is awaited
    (C xf_call_renew_at, xf_call_start_renew: every third of the lease, up to
    max_load_ms); cancelled once the loader returned. A renewal's failure
    waits for the next one."""
    out = ffi.new("xf_call **")
    while True:
        at = lib.xf_call_renew_at(call)
        if at == _NEVER:
            return
        delay = (at - now_ms()) / 1000
        if delay > 0:
            await asyncio.sleep(delay)
        if lib.xf_call_start_renew(out, call, now_ms()) != 0:
            return
        renew = out[0]
        if renew == ffi.NULL:
            continue
        await steps(cache, renew)  # cancelled: finished in the background there
        lib.xf_call_result(renew, ffi.NULL)
        lib.xf_call_free(renew)


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
