"""The core both faces share: everything that is neither waiting nor I/O.
xfetch.Cache and xfetch.aio.Cache parse their constructor options, check
keys and loaders, memoize policies, open the share, turn a C result into
Fetched or an exception and assemble stats here, so an option or a check
exists on both faces by construction."""
from __future__ import annotations

import contextlib
import contextvars
import logging

from ._errors import InvalidArgumentError, check
from ._events import Events
from ._native import ffi, lib
from ._policy import PolicyCache, check_refresh_ahead
from ._runtime import Failures
from ._types import Fetched
from ._url import parse_url, tls_options
from ._values import Codecs, ttl_seconds

SOURCES = {lib.XF_SOURCE_CACHE: "cache", lib.XF_SOURCE_LOADER: "loader",
           lib.XF_SOURCE_STALE: "stale", lib.XF_SOURCE_UNCACHED: "uncached",
           lib.XF_SOURCE_LOCAL: "local"}
STAT_FIELDS = [name for name, _ in ffi.typeof("xf_stats").fields]
BYTES_LIKE = (bytes, bytearray, memoryview)
log = logging.getLogger("xfetch")


# ---- arguments ------------------------------------------------------------------

def key_bytes(key):
    if type(key) is str:
        key = key.encode("utf-8")
    elif isinstance(key, str):  # a str subclass (StrEnum, SafeString): its characters
        key = str.encode(key, "utf-8")
    elif type(key) is not bytes:
        if not isinstance(key, BYTES_LIKE):
            raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
        key = bytes(key)
    if not key:
        raise ValueError("key must not be empty")
    return key


def unique_keys(keys):
    """get_many's keys: their bytes -> the key as first given (in order,
    duplicates once)."""
    originals = {}
    for k in keys:
        originals.setdefault(key_bytes(k), k)
    return originals


def check_loader(loader):
    if not callable(loader):
        raise TypeError(f"loader must be callable, not {type(loader).__name__}")


def check_value(value):
    if not isinstance(value, BYTES_LIKE):
        raise TypeError(f"value must be bytes-like, not {type(value).__name__}")
    return ffi.from_buffer(value)


def seconds_ms(name, v, default_ms):
    if v is None:
        return default_ms
    if type(v) is bool or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(v).__name__}")
    ms = round(v * 1000) if v == v and v >= 0 and v < 2**31 / 1000 else -1
    if ms < 1:
        raise ValueError(f"{name} must be in [0.001, 2147483] seconds, not {v!r}")
    return ms


def _size(name, v):
    if v is None:
        return 0
    if type(v) is bool or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, not {v!r}")
    return v


def policy_args(ttl, beta=1.0, lease=5.0, wait=5.0, stale=0.0, stale_if_error=0.0,
                negative_ttl=0.0, jitter=0.0, on_wait_timeout="load"):
    """PolicyCache's key (the policy keywords in order)."""
    return (ttl, beta, lease, wait, stale, stale_if_error, negative_ttl, jitter,
            on_wait_timeout)


# ---- the constructor ------------------------------------------------------------

class Config:
    """A Cache's options, checked (the same for both faces): the URL's
    fields, the C options (xf_options, with the strings they point to kept
    alive), the share (xf_share, or NULL), the policy memo, the loader
    exceptions the share's followers re-raise, and where the values come from
    (for repr and the aio face's own-key check)."""

    def __init__(self, url, prefix, timeout, connect_timeout, breaker, seed, max_key_len,
                 max_value_len, share, lazy_connect, max_connections, ssl=None, on_event=None,
                 enabled=True, face="sync", entry_format=None, background_refresh=True,
                 near_cache_bytes=0, refresh_ahead=None, write_fence=None, ttl=None,
                 serializer="pickle", secret=None, namespace_tag=False, compress_min_bytes=0):
        fields = parse_url(url)
        if type(compress_min_bytes) is not int or compress_min_bytes < 0:
            raise ValueError(f"compress_min_bytes must be an int >= 0 (0: off), "
                             f"not {compress_min_bytes!r}")
        if type(namespace_tag) is not bool:
            raise TypeError(f"namespace_tag must be True or False, not {namespace_tag!r}")
        self.namespace_tag = namespace_tag  # clear() needs it
        self.ttl = None  # the calls' default ttl, seconds
        if ttl is not None:
            self.ttl = ttl_seconds(ttl)
            if not 0.001 <= self.ttl < 2**40 / 1000:
                raise ValueError(f"ttl must be at least 1 ms, not {ttl!r}")
        if serializer is None:
            raise TypeError("serializer must be 'pickle', 'json', 'bytes' or an object with "
                            "dumps/loads, not None")
        if not isinstance(prefix, (str, bytes)):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        self.codecs = Codecs(serializer, secret, prefix)  # values <-> bytes, signed or not
        if write_fence is not None and type(write_fence) is not bool:
            raise TypeError(f"write_fence must be None, True or False, not {write_fence!r}")
        if entry_format is not None and (type(entry_format) is not int
                                         or entry_format not in (1, 2)):
            raise ValueError(f"entry_format must be None, 1 (a hash) or 2 (a string), "
                             f"not {entry_format!r}")
        if type(enabled) is not bool:
            raise TypeError(f"enabled must be True or False, not {enabled!r}")
        if type(background_refresh) is not bool:
            raise TypeError(f"background_refresh must be True or False, "
                            f"not {background_refresh!r}")
        self.background_refresh = background_refresh  # the calls' default
        check_refresh_ahead(refresh_ahead)
        self.refresh_ahead = refresh_ahead  # the calls' default (None: C's)
        self.events = Events(on_event, face)  # logging, metrics, on_event
        self.enabled = enabled
        tls = tls_options(fields, **(ssl or {}))
        if not isinstance(prefix, (str, bytes)):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if seed is not None and (type(seed) is bool or not isinstance(seed, int)
                                 or not 0 < seed < 2**64):
            raise ValueError("seed must be None or an int in [1, 2**64)")
        if type(breaker) is bool or not isinstance(breaker, (int, float)):
            raise TypeError(f"breaker must be a number of seconds, not {type(breaker).__name__}")
        if not 0 <= breaker < 2**31 / 1000:
            raise ValueError(f"breaker must be >= 0 seconds, not {breaker!r}")
        if max_connections is not None and (type(max_connections) is not int
                                            or max_connections < 1):
            raise ValueError(f"max_connections must be None or an int >= 1, "
                             f"not {max_connections!r}")
        strings = [s.encode() if isinstance(s, str) else s
                   for s in (fields["host"], fields["unix_path"], fields["username"],
                             fields["password"], prefix)]
        if any(s is not None and b"\0" in s for s in strings):
            raise ValueError("the URL and prefix must not contain NUL characters")
        self._keep = [ffi.new("char[]", s) if s is not None else ffi.NULL for s in strings]
        self.timeout_ms = seconds_ms("timeout", timeout, 1000)
        self.connect_timeout_ms = seconds_ms("connect_timeout", connect_timeout,
                                             self.timeout_ms)
        self.breaker = breaker
        self.opts = ffi.new("xf_options *", {
            "host": self._keep[0], "port": fields["port"], "unix_path": self._keep[1],
            "cluster": fields["cluster"], "read_from_replicas": fields["read_from_replicas"],
            "username": self._keep[2], "password": self._keep[3], "db": fields["db"],
            "connect_timeout_ms": self.connect_timeout_ms,
            "command_timeout_ms": self.timeout_ms, "key_prefix": self._keep[4],
            "seed": seed or 0, "max_key_len": _size("max_key_len", max_key_len),
            "max_value_len": _size("max_value_len", max_value_len),
            "breaker_ms": round(breaker * 1000) if breaker > 0 else -1,
            "on_event": lib._xf_py_event, "on_event_ud": self.events.handle,
            "disabled": 0 if enabled else 1, "entry_format": entry_format or 0,
            # xf_write_fence: None = auto (on with a near cache), True on, False off
            "write_fence": {None: 0, True: 1, False: 2}[write_fence],
            "namespace_tag": 1 if namespace_tag else 0,
        })
        if tls is not None:  # rediss://: every connection over TLS
            for name in ("ca_file", "ca_dir", "cert_file", "key_file"):
                if tls[name] is not None:
                    self._keep.append(ffi.new("char[]", tls[name].encode()))
                    setattr(self.opts.tls, name, self._keep[-1])
            self.opts.tls.no_verify = tls["no_verify"]
            self.opts.tls.enable = 1
        self.tls = tls
        self.fields = fields
        self.where = (f"unix://{fields['unix_path']}" if fields["unix_path"] else
                      f"redis{'s' if tls else ''}://{fields['host']}:{fields['port']}"
                      ) + f"/{fields['db']}"
        self.prefix = prefix
        self.seeded = seed is not None
        self.lazy_connect = bool(lazy_connect) or not enabled  # disabled: no I/O at all
        self.max_connections = max_connections
        self.failures = Failures()  # loader exceptions, for the share's followers
        if type(near_cache_bytes) is not int or near_cache_bytes < 0:
            raise ValueError(f"near_cache_bytes must be an int >= 0, not {near_cache_bytes!r}")
        if near_cache_bytes and not share:
            raise ValueError("near_cache_bytes needs share=True (the near cache is the share's)")
        self.near = bool(near_cache_bytes)
        self.share = ffi.NULL
        if share:  # single-flight and a fallback cache while Redis is down
            out = ffi.new("xf_share **")
            share_opts = ffi.new("xf_share_options *", {"near_cache_bytes": near_cache_bytes})
            check(lib.xf_share_open(out, share_opts))
            self.share = ffi.gc(out[0], lib.xf_share_close)
        self.opts.share = self.share
        self.policies = PolicyCache(background_refresh, refresh_ahead, self.ttl,
                                    compress_min_bytes)
        # where the values come from, as the C share and nest checks key it
        self.namespace = (self.where, fields["username"], prefix)

    _SSL = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
            "ssl_check_hostname", "ssl_cert_reqs")

    @classmethod
    def of(cls, url, face, options):
        """A face's Config from its constructor's keywords (LateSetup), with
        the URL, password and db checked now unless lazy_connect."""
        options = dict(options)
        ssl = {name: options.pop(name) for name in cls._SSL}
        config = cls(url, ssl=ssl, face=face, **options)
        if not config.lazy_connect:
            config.check_now()
        return config

    def check_now(self):
        """Connects once now, so that a wrong host, password or db raises here
        (xfetch.ConnectionError, xfetch.AuthError): both faces' constructors,
        unless lazy_connect."""
        out = ffi.new("xf_client **")
        opts = ffi.new("xf_options *", self.opts[0])
        opts.lazy_connect = 1  # connected by the ping: a failure keeps its detail
        opts.share = ffi.NULL  # a check: it arms no near cache (its open is the tracker's)
        # A check, not a call: its failure raises here, so it reports no events
        # (no "breaker opened; calls fail open" for a constructor that raised).
        opts.on_event = ffi.NULL
        check(lib.xf_client_open(out, opts))
        try:
            check(lib.xf_ping(out[0]), out[0])
        finally:
            lib.xf_client_close(out[0])


# ---- results --------------------------------------------------------------------

def value_of(v):
    """Fetched from an xf_value the call filled (and frees)."""
    try:
        return Fetched(ffi.unpack(v.data, v.len), SOURCES[v.source])
    finally:
        lib.xf_value_free(v)


NEAR_NOT_SERVED = lib.XF_NEAR_NOT_SERVED  # xf_near_serve: not served, make the call


def near_value(rc, v):
    """The value a near hit xf_near_serve served: rc XF_OK, bytes (v
    freed); XF_ENOTFOUND, None (a kept not-found)."""
    if rc != 0:
        return None
    try:
        return ffi.unpack(v.data, v.len)
    finally:
        lib.xf_value_free(v)


def outcome(rc, v, exc, key, kb, failures, error, events=None, took=0.0, lease=5.0):
    """The result of a get-or-compute: rc and the value C gave (an xf_value,
    or the Fetched the event-loop driver's callback made of it), exc the
    loader's exception (if it ran and failed), error() the library error
    for rc, took the seconds its loader ran (0: it did not) under a lease
    of lease seconds. Returns Fetched or raises, the same on both faces."""
    result = _outcome(rc, v, exc, key, kb, failures, error, events)
    if took > lease and result.source == "uncached":
        # Its lease ran out and another caller took the key over (so loaded
        # it too): the write was refused. The lease is twice the entry's
        # last load time once one is cached, so this is a key's first slow
        # load (or Redis was down).
        events.slow_load(key, took, lease)
    elif took:
        events.load_fit(key)
    return result


def _outcome(rc, v, exc, key, kb, failures, error, events):
    if exc is not None and not isinstance(exc, Exception):
        if not isinstance(v, (Fetched, type(None))):
            lib.xf_value_free(v)
        raise exc  # KeyboardInterrupt, SystemExit, CancelledError: whatever C did
    if rc == 0:
        result = v if type(v) is Fetched else value_of(v)
        # A failed refresh may still serve a valid (or stale-if-error) value:
        # the loader's Exception is logged, not raised (counted in
        # stats()["load_errors"]).
        if exc is not None:
            if events is not None:  # once per episode (until a load of the key succeeds)
                events.refresh_failure(kb, result.source, exc)
            else:
                log.warning("loader for %r failed; served the %s value", key, result.source,
                            exc_info=exc)
        return result
    if rc == lib.XF_ENOTFOUND:
        return Fetched(None, None)
    if exc is not None:
        raise exc
    if rc == lib.XF_ELOADER:  # another caller's load of the key (the share)
        exc = failures.exception(kb)  # failed: its exception, not a LoaderError
        if exc is not None:
            raise exc
    raise error()


# ---- the bypass switch ------------------------------------------------------------

BYPASS = contextvars.ContextVar("xfetch_bypass", default=())  # the Configs bypassed


def enabled_now(config):
    """Whether this call of config's Cache uses Redis (Cache(enabled=),
    Cache.disabled())."""
    return config.enabled and config not in BYPASS.get()


@contextlib.contextmanager
def disabled(config):
    """Within the block (this thread, or this asyncio task and the tasks it
    starts), config's Cache runs the loader on each call and sends nothing
    to Redis."""
    token = BYPASS.set(BYPASS.get() + (config,))
    try:
        yield
    finally:
        BYPASS.reset(token)


def warn_slow(key, took, lease):
    log.warning("loader for %r took %.3f s, longer than its lease (%.3f s), and its value "
                "was not cached: other callers may have run it too; pass lease= above the "
                "loader's time", key, took, lease)


def stats_of(clients, retired=None):
    """The counters of C clients summed (xf_stats), plus those of clients
    already closed (retired)."""
    total = dict(retired) if retired else dict.fromkeys(STAT_FIELDS, 0)
    out = ffi.new("xf_stats *")
    for ptr in clients:
        lib.xf_client_stats(ptr, out)
        for name in STAT_FIELDS:
            total[name] += getattr(out, name)
    return total


# ---- a loader asking for its own key (the aio face: one thread, many tasks) -----

_loading = contextvars.ContextVar("xfetch_loading", default=())


def enter_load(namespace, kb):
    """Marks kb as loading in this task chain (tasks a loader starts inherit
    it); returns the token for leave_load."""
    return _loading.set(_loading.get() + ((namespace, kb),))


def leave_load(token):
    _loading.reset(token)


def check_not_loading(namespace, kb, key):
    """The C flow's check (XF_EINVAL) for a task chain: a loader asking for
    its own key would wait on its own lease."""
    if (namespace, kb) in _loading.get():
        shown = kb[:60].decode("utf-8", "replace")
        raise InvalidArgumentError(
            lib.XF_EINVAL, f"the loader for key {shown} asked for {shown} itself (a "
            f"recursion: it would wait on its own lease)")
