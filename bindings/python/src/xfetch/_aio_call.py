"""Running one C sans-I/O call (xf_call_*) for xfetch.aio: each SEND goes on
the link of the server the call names (xf_call_target, xf_call_send:
_aio_link), its loader is awaited, its waits are asyncio sleeps. A call its
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
from ._runtime import sink_value

# steps() compares with these literals (no attribute lookups on the hot path)
assert (lib.XF_CALL_SEND, lib.XF_CALL_LOAD, lib.XF_CALL_DONE) == (0, 1, 3)
_monotonic = time.monotonic


async def steps(cache, call, loader=None, key=None, kb=None):
    """Runs call to XF_CALL_DONE. Returns (the loader's exception or None,
    how long the loader took). On a BaseException (CancelledError,
    KeyboardInterrupt) the call is finished in the background and not to be
    touched again; else the caller takes its result and frees it."""
    links = cache._links
    hostp, portp = cache._hostp, cache._portp
    exc, took, moving = None, 0.0, None
    try:
        step = lib.xf_call_next(call)
        while step != 3:  # XF_CALL_DONE
            if step == 0:  # XF_CALL_SEND: on the link of the server it names
                lib.xf_call_target(call, hostp, portp)
                moving = links.get(hostp[0], portp[0]).send(call)
                if moving is not None:
                    await moving
                    moving = None
                step = lib.xf_call_received(call, now_ms())  # in this task: its events
            elif step == 1:  # XF_CALL_LOAD
                t0 = _monotonic()
                step, exc = await _load(cache, call, loader, kb)
                took = _monotonic() - t0
            else:  # XF_CALL_WAIT: another caller's lease, or its load in the share
                seconds = lib.xf_call_wait_ms(call, now_ms()) / 1000
                if links.wake_event is not None:  # near cache: woken by the write
                    await _wait_woken(links, call, seconds)
                else:
                    await asyncio.sleep(seconds)
                step = lib.xf_call_woke(call, now_ms())
    except BaseException:
        if moving is not None and not moving.done():
            moving.cancel()
        if moving is None or not moving.cancelled():
            abandoned(links, call)  # else the link does, once it moved
        raise
    return exc, took


async def _wait_woken(links, call, seconds):
    """Waits up to seconds, less when the call's key is invalidated meanwhile
    (xf_call_woken: its value written, or a connection lost)."""
    deadline = _monotonic() + seconds
    while not lib.xf_call_woken(call):
        left = deadline - _monotonic()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(links.wake_event.wait(), left)
        except asyncio.TimeoutError:
            return


async def _load(cache, call, loader, kb):
    """Runs the loader into the call's sink (C xf_sink: bytes, None for not
    found, a result with its own ttl; a wrong type or size raises as on the
    sync face). Returns (next step, the loader's Exception or None)."""
    token = enter_load(cache._config.namespace, kb)
    t0 = _monotonic()
    try:
        value = loader()
        if inspect.isawaitable(value):
            value = await value
        sink_value(value, lib.xf_call_sink(call))
    except Exception as e:  # nothing is cached; raised (or logged) at the end
        cache._config.failures.record(kb, e)  # for the share's followers
        return lib.xf_call_load_done(call, -1, int((_monotonic() - t0) * 1e6), now_ms()), e
    finally:
        leave_load(token)
    return lib.xf_call_load_done(call, 0, int((_monotonic() - t0) * 1e6), now_ms()), None


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
