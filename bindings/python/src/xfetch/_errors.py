"""Library errors: one exception class per C code, and check() to raise them."""
import builtins

from ._native import ffi, lib


class Error(Exception):
    """Base of every error the C library reports.

    code is the C return code (negative, e.g. -3), name its XF_ name without
    prefix ("ECONNECT") and message the client's detail (or the static text).
    """

    def __init__(self, code, message=""):
        self.code = code
        self.name = ffi.string(lib.xf_errname(code)).decode()
        self.message = message or ffi.string(lib.xf_strerror(code)).decode()
        super().__init__(f"{self.message} (XF_{self.name}, {code})")

    def __reduce__(self):  # pickle (a ProcessPoolExecutor worker's error): code, message
        return (type(self), (self.code, self.message))


class InvalidArgumentError(Error, ValueError):
    """XF_EINVAL: an argument the C side refused (e.g. above max_value_len)."""


class OutOfMemoryError(Error, MemoryError):
    """XF_ENOMEM."""


class ConnectionError(Error, builtins.ConnectionError):
    """XF_ECONNECT: Redis cannot be reached (or the circuit breaker is open)."""


class ConnectionLostError(ConnectionError):
    """XF_EIO: the connection failed mid-command (I/O error or timeout)."""


class RedisError(Error):
    """XF_EREDIS: Redis replied with an error."""


class ProtocolError(Error):
    """XF_EPROTO: an unexpected reply from Redis."""


class TimeoutError(Error, builtins.TimeoutError):
    """XF_ETIMEDOUT: waited longer than `wait` for another caller's loader
    (raised only with on_wait_timeout="fail")."""


class LoaderError(Error):
    """XF_ELOADER without a Python exception to re-raise (not expected)."""


class NotFoundError(Error, LookupError):
    """XF_ENOTFOUND. The binding maps not-found to None; never raised by Cache."""


class WrongTypeError(Error, TypeError):
    """XF_EWRONGTYPE: the Redis key holds something that is not an xfetch entry."""


class AuthError(Error, PermissionError):
    """XF_EAUTH: AUTH or SELECT refused."""


class UnavailableError(Error):
    """XF_EUNAVAILABLE: Redis cannot serve the command right now (BUSY,
    LOADING, READONLY, OOM, ...). get_or_compute fails open instead; set and
    delete raise it."""


class NoPermissionError(Error, PermissionError):
    """XF_ENOPERM: the Redis ACL user may not run a command xfetch needs."""


class SupersededError(Error):
    """XF_ESUPERSEDED: a write was not cached because the entry holds a newer
    value (written later, or a delete that came after the write started).
    Cache.set returns False for it instead of raising; check() raises it."""


class CanceledError(Error):
    """XF_ECANCELED: the C event-loop driver's handle was closed first (not
    used by Cache)."""


class TLSError(ConnectionError):
    """XF_ETLS: TLS failed (certificate not trusted, host name mismatch, the
    handshake failed or timed out, a client certificate refused). A
    misconfiguration: never served fail-open, raised by every call."""


class NotReplicatedError(Error):
    """XF_ENOTREPLICATED: invalidate_tags raised a tag on its Redis Cluster
    master, but no replica acknowledged it in time: a failover may lose it.
    Call invalidate_tags again."""


class NotSetUpError(Error, RuntimeError):
    """A call on a Cache made without a URL before its setup(url, ...): the
    Cache is made at import time and connected at startup by setup()."""

    def __init__(self, code=lib.XF_EINVAL, message=""):
        super().__init__(code, message or (
            "this xfetch Cache is not set up yet: call cache.setup(url, ...) at startup "
            "(or pass the URL to the constructor) before using it"))


class BusyError(Error):
    """XF_EBUSY: every client of a C pool (xf_pool) stayed busy for its
    checkout timeout (not used by Cache)."""


_BY_CODE = {
    lib.XF_EINVAL: InvalidArgumentError,
    lib.XF_ENOMEM: OutOfMemoryError,
    lib.XF_ECONNECT: ConnectionError,
    lib.XF_EIO: ConnectionLostError,
    lib.XF_EREDIS: RedisError,
    lib.XF_EPROTO: ProtocolError,
    lib.XF_ETIMEDOUT: TimeoutError,
    lib.XF_ELOADER: LoaderError,
    lib.XF_ENOTFOUND: NotFoundError,
    lib.XF_EWRONGTYPE: WrongTypeError,
    lib.XF_EAUTH: AuthError,
    lib.XF_EUNAVAILABLE: UnavailableError,
    lib.XF_ENOPERM: NoPermissionError,
    lib.XF_ESUPERSEDED: SupersededError,
    lib.XF_ECANCELED: CanceledError,
    lib.XF_EBUSY: BusyError,
    lib.XF_ETLS: TLSError,
    lib.XF_ENOTREPLICATED: NotReplicatedError,
}


def error_for(rc, client=ffi.NULL):
    """The exception for code rc, with the client's detail message if any."""
    msg = ffi.string(lib.xf_errmsg(client)).decode(errors="replace") if client else ""
    return _BY_CODE.get(rc, Error)(rc, msg)


def check(rc, client=ffi.NULL):
    """Returns rc when it is XF_OK; raises the matching Error subclass otherwise."""
    if rc != 0:
        raise error_for(rc, client)
    return rc
