"""xfetch: stampede-safe get-or-compute on Redis.

    import xfetch
    cache = xfetch.Cache(ttl="10m")                    # at import time
    cache.setup("redis://127.0.0.1:6379/0", prefix="app:")  # at startup
    user = cache.get_or_compute("user:42", lambda: load_user(42))  # any picklable object

    @cache.cached(ttl="1h")
    def profile(user_id): ...

Probabilistic early recomputation (XFetch) plus a fleet-wide lease in the
entry: one caller at a time recomputes a key, the others keep serving the
still-valid value. A thin Python layer over the xfetch C library (cffi).
"""
from ._cache import Cache, Fetched
from ._decorator import cached
from ._events import Event
from ._errors import (AuthError, CanceledError, ConnectionError, ConnectionLostError, Error,
                      InvalidArgumentError, LoaderError, NotFoundError, NotReplicatedError,
                      NotSetUpError, OutOfMemoryError,
                      BusyError, NoPermissionError, ProtocolError, RedisError, SupersededError, TLSError,
                      TimeoutError, UnavailableError,
                      WrongTypeError, check)
from ._native import ffi, lib
from ._revalidate import UNCHANGED, Previous, Validated

try:  # the decorators' types (ParamSpec: Python 3.10+; on 3.9 for type checkers only)
    from ._types import (AsyncCachedFunction, AsyncCachedMethod, CachedFunction,
                         CachedMethod)
except ImportError:  # pragma: no cover
    pass

__version__ = "0.1.0"

__all__ = ["Cache", "Fetched", "Event", "UNCHANGED", "Previous", "Validated", "CachedFunction", "CachedMethod", "AsyncCachedFunction",
           "AsyncCachedMethod", "cached", "Error", "InvalidArgumentError", "OutOfMemoryError",
           "ConnectionError", "ConnectionLostError", "RedisError", "ProtocolError",
           "TimeoutError", "LoaderError", "NotFoundError", "WrongTypeError", "AuthError",
           "SupersededError", "NotSetUpError", "NotReplicatedError", "UnavailableError", "NoPermissionError", "BusyError", "CanceledError", "TLSError", "check",
           "ffi", "lib"]
