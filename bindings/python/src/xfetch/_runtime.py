"""What runs inside a C call, for both faces: the loader trampolines C calls
back, the interrupt check that lets a signal (Ctrl-C) through a C wait, and
the exceptions a failed load leaves for the callers that shared it.

The rule for exceptions: a loader's Exception is the call's outcome (raised
once C returns, or logged when a valid value is served); a BaseException
that is not an Exception (KeyboardInterrupt, SystemExit) ends the call at
once: C is told the loader failed or, in a wait, that it must stop
(options.interrupt), and the exception itself is raised when C returns."""
from __future__ import annotations

import collections.abc
import copy
import time

from ._errors import InvalidArgumentError, check, error_for
from ._native import ffi, lib
from ._revalidate import UNCHANGED, call_loader, sink_answer

_BYTES_LIKE = (bytes, bytearray, memoryview)


class CallState:
    """The Python side of one C client's call in progress: the loader, the
    exception to raise once C returns, the last load's duration, get_many's
    keys. Its handle is the C user data of the loader and of the interrupt
    check; it refers to nothing that owns the C client, so a Cache dropped
    without close() frees its connections at once (no reference cycle
    through the handle, which only the cyclic collector could free)."""

    __slots__ = ("loader", "exc", "load_s", "keys", "failures", "refresher")

    def __init__(self, failures=None, refresher=None):
        self.refresher = refresher  # the sync face's background refreshes (_refresh)
        self.loader = None
        self.exc = None
        self.load_s = 0.0  # how long the last loader call took
        self.keys = None  # get_many: key bytes -> the caller's key
        self.failures = failures  # a Failures shared by the Cache's connections

    def keep(self, e):
        """Records e as the call's exception: the first one, unless a
        KeyboardInterrupt (or another non-Exception) comes later: it wins."""
        if self.exc is None or (isinstance(self.exc, Exception)
                                and not isinstance(e, Exception)):
            self.exc = e

    def stopping(self):
        """Whether a KeyboardInterrupt, SystemExit... ends the call."""
        return self.exc is not None and not isinstance(self.exc, Exception)


class Failures:
    """The last exception each key's loader raised, for the callers that
    shared that load (the C share, while Redis is down: they get XF_ELOADER,
    and re-raise the loader's exception instead of a LoaderError). Bounded:
    the most recent MAX keys, each for AGE seconds."""

    MAX, AGE = 256, 30.0

    def __init__(self):
        self._by_key = {}

    def record(self, key, exc):
        by_key = self._by_key
        by_key.pop(key, None)
        by_key[key] = (exc, time.monotonic())
        while len(by_key) > self.MAX:
            try:
                del by_key[next(iter(by_key))]
            except (KeyError, RuntimeError, StopIteration):  # another thread's
                break

    def exception(self, key):
        """A copy of the key's last loader exception (the same object if it
        cannot be copied), or None."""
        exc, at = self._by_key.get(key, (None, 0.0))
        if exc is None or time.monotonic() - at > self.AGE:
            return None
        try:
            return copy.copy(exc).with_traceback(exc.__traceback__)
        except Exception:
            return exc


def _state_of(tb):
    """The CallState of the callback frame an exception was raised in."""
    while tb is not None:
        ud = tb.tb_frame.f_locals.get("ud")
        if ud is not None:
            return ffi.from_handle(ud)
        tb = tb.tb_next
    return None


def _raised_on_entry(rc):
    """onerror for the callbacks: a pending signal's handler may raise
    (KeyboardInterrupt) as the callback starts, before its own try: keep the
    exception for the call and answer rc (failure / stop) instead of letting
    cffi print and swallow it."""
    def onerror(exc_type, exc, tb):
        state = _state_of(tb)
        if state is not None and exc is not None:
            state.keep(exc)
        return rc
    return onerror


def _signals():
    """Nothing: calling it lets the interpreter run the main thread's pending
    signal handlers (a Python-level PyErr_CheckSignals)."""


@ffi.def_extern(onerror=_raised_on_entry(1))
def _xf_py_interrupt(ud):
    state = ffi.from_handle(ud)
    if state.stopping():
        return 1
    try:
        _signals()
    except BaseException as e:  # KeyboardInterrupt from the SIGINT handler
        state.keep(e)
        return 1
    return 0


class Timed:
    """A loader's result with its own ttl (seconds; 0 = return it uncached):
    the decorator's ttl callable and condition= (C xf_sink_ttl)."""

    __slots__ = ("value", "ttl")

    def __init__(self, value, ttl):
        self.value, self.ttl = value, ttl


def sink_value(value, sink):
    """Hands a loader's result to the C sink (a Timed's ttl, UNCHANGED, a
    Validated's validator); raises for a wrong type or size."""
    if type(value) is Timed:
        ttl = value.ttl
        if type(ttl) is bool or not isinstance(ttl, (int, float)) or not 0 <= ttl < 2**40 / 1000:
            raise ValueError(f"a ttl must be a number of seconds >= 0, not {ttl!r}")
        check(lib.xf_sink_ttl(sink, max(1, round(ttl * 1000)) if ttl > 0 else 0))
        value = value.value
    value = sink_answer(value, sink)
    if value is UNCHANGED:
        return
    if value is None:
        lib.xf_sink_not_found(sink)
        return
    if not isinstance(value, _BYTES_LIKE):
        raise TypeError(f"the loader must return bytes or None with serializer='bytes', not "
                        f"{type(value).__name__}: pass serializer='pickle' (the default) or "
                        f"'json' to cache objects")
    buf = ffi.from_buffer(value)
    rc = lib.xf_sink_set(sink, buf, len(buf))
    if rc != 0:
        raise error_for(rc) if rc != lib.XF_EINVAL else InvalidArgumentError(
            rc, f"the loader returned {len(buf)} bytes, above max_value_len")


@ffi.def_extern(onerror=_raised_on_entry(-1))
def _xf_py_loader(ud, key, keylen, sink):
    state = ffi.from_handle(ud)
    t0 = time.monotonic()
    try:
        value = call_loader(state.loader, sink)
        state.load_s = time.monotonic() - t0
        sink_value(value, sink)
        return 0
    except BaseException as e:  # re-raised by the caller once C returns
        state.keep(e)
        if isinstance(e, Exception) and state.failures is not None:
            state.failures.record(ffi.unpack(key, keylen), e)
        return -1


@ffi.def_extern(onerror=_raised_on_entry(-1))
def _xf_py_key_loader(ud, key, keylen, sink):
    state = ffi.from_handle(ud)
    if state.stopping():  # a KeyboardInterrupt ends the batch: run no more loaders
        return -1
    try:
        sink_value(state.loader(state.keys[ffi.unpack(key, keylen)]), sink)
        return 0
    except BaseException as e:  # the first is re-raised once C returns
        state.keep(e)
        return -1


def batch_result(values):
    """values, a batch loader's result (every face's): a mapping of key to
    bytes or None, a key left out "not found"; else TypeError."""
    if not isinstance(values, collections.abc.Mapping):
        raise TypeError(f"a batch loader must return a mapping of key to bytes or None, "
                        f"not {type(values).__name__}")
    return values


@ffi.def_extern(onerror=_raised_on_entry(-1))
def _xf_py_batch_loader(ud, n, keys, keylens, sinks):
    state = ffi.from_handle(ud)
    if state.stopping():
        return -1
    try:
        asked = [state.keys[ffi.unpack(keys[i], keylens[i])] for i in range(n)]
        values = batch_result(state.loader(asked))
        for i, k in enumerate(asked):
            sink_value(values.get(k), sinks[i])  # a key left out is "not found"
        return 0
    except BaseException as e:  # re-raised once C returns
        state.keep(e)
        return -1
