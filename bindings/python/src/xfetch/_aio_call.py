"""Running one C sans-I/O call (xf_call_*) for xfetch.aio: each request goes
on the stream of the server the call names (xf_call_target: _aio_link), its
loader is awaited, its waits are asyncio sleeps. A call its task leaves (cancelled, interrupted) is finished in the
background without a loader: a lease it holds, or is about to be granted,
is released at once instead of being left for `lease` seconds."""
from __future__ import annotations

import asyncio
import inspect
import time

from ._aio_link import arm_later
from ._core import enter_load, leave_load
from ._errors import Error, TLSError
from ._native import ffi, lib
from ._runtime import sink_value

# steps() compares with these literals (no attribute lookups on the hot path)
assert (lib.XF_CALL_SEND, lib.XF_CALL_LOAD, lib.XF_CALL_DONE) == (0, 1, 3)
_Future = asyncio.Future
_monotonic = time.monotonic


def now_ms():
    """The time every xf_call_* input carries: the C call reads no clock
    (time.monotonic: CLOCK_MONOTONIC on Linux, the share's clock)."""
    return int(_monotonic() * 1000)


async def steps(cache, call, loader=None, key=None, kb=None):
    """Runs call to XF_CALL_DONE. Returns (the loader's exception or None,
    how long the loader took). On a BaseException (CancelledError,
    KeyboardInterrupt) the call is handed to abandon() and not to be
    touched again; else the caller takes its result and frees it."""
    links = cache._links
    near = links.near
    n, hostp, portp = cache._size, cache._hostp, cache._portp
    exc, took = None, 0.0
    stream = pending = None
    resend = True  # the request may go again once (a connection the server closed)
    try:
        step = lib.xf_call_next(call)
        while step != 3:  # XF_CALL_DONE
            if step == 0:  # XF_CALL_SEND: to the server xf_call_target names
                replies = lib.xf_call_target(call, hostp, portp)
                link = links.get(hostp[0], portp[0])
                stream = link.current
                again = resend  # on a stream that was working before this request
                if stream is None or stream.broken is not None:
                    again = False  # opened for it: its loss is the server's failure
                    try:
                        stream = await link.connect()
                    except TLSError:  # never failed open (abandoned below)
                        raise
                    except ConnectionError:  # the breaker, or the connect failed
                        step = lib.xf_call_io_failed(call, lib.XF_ECONNECT, now_ms())
                        resend = True
                        continue
                # on this stream: a read is one HMGET / GET while its clock
                # estimate is fresh, else the read script (which refreshes it)
                lib.xf_call_use_conn(call, stream.conn, now_ms())
                # the call's own bytes: start() sends them now, or copies them
                data = ffi.buffer(lib.xf_call_request(call, n), n[0])
                try:
                    reply = stream.start(data, replies)
                    if reply.__class__ is _Future or isinstance(reply, _Future):
                        pending = reply
                        reply = await reply
                        pending = None
                except (Error, OSError, asyncio.TimeoutError) as e:
                    pending = None
                    if again and e is stream.broken and stream.closed_by_server:
                        # The server closed a working connection (its idle
                        # timeout, CLIENT KILL, a restart), as the blocking
                        # transport judges it (conn.c): no reply came, so the
                        # same request goes once more on a new connection,
                        # the breaker not told. Every request a call makes is
                        # safe to repeat (conn.c says why).
                        resend = False
                        continue
                    link.failed()
                    step = lib.xf_call_io_failed(call, lib.XF_EIO, now_ms())
                else:
                    # 1: tracked under a lost invalidation connection; 2: not
                    # tracked yet, now it can be; either way armed again on
                    # this stream, its calls in flight unharmed
                    if near and lib.xf_call_track_reply(call, stream.track or ffi.NULL):
                        arm_later(links, link, stream)
                    step = lib.xf_call_reply(call, reply, now_ms())
                resend = True
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
        abandon(links, call, stream if pending is not None else None, pending)
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


def abandon(links, call, stream, pending):
    """Finishes call in the background, with no loader: the reply to pending
    (its request in flight on stream) is fed to it when it comes, a LOAD is
    failed (a lease held is released, a share flight ended), further
    requests are sent (each to its server) with their replies handled the
    same way; the call is freed once DONE, or when no open stream can take
    it (nothing to hold)."""
    size, host, port = ffi.new("size_t *"), ffi.new("const char **"), ffi.new("int *")

    def replied(reply):
        if links.near:  # not known which stream it came on: never kept near
            lib.xf_call_track_reply(call, ffi.NULL)
        go(lib.xf_call_reply(call, reply, now_ms()) if reply is not None else
           lib.xf_call_io_failed(call, lib.XF_EIO, now_ms()))

    def go(step):
        while step != lib.XF_CALL_DONE:
            if step == lib.XF_CALL_LOAD:
                step = lib.xf_call_load_failed(call, -1, now_ms())
                continue
            if step != lib.XF_CALL_SEND:
                break  # waiting (nothing held)
            replies = lib.xf_call_target(call, host, port)
            s = links.get(host[0], port[0]).current
            if s is None or s.broken is not None:
                break  # no stream to send on
            lib.xf_call_use_conn(call, s.conn, now_ms())
            try:
                reply = s.start(ffi.unpack(lib.xf_call_request(call, size), size[0]), replies)
            except (Error, OSError):
                break
            if isinstance(reply, asyncio.Future):
                s.adopt(reply, replied)
                return
            if links.near:
                lib.xf_call_track_reply(call, s.track or ffi.NULL)
            step = lib.xf_call_reply(call, reply, now_ms())
        lib.xf_call_free(call)

    if pending is not None:
        stream.adopt(pending, replied)
    else:
        go(lib.xf_call_next(call))
