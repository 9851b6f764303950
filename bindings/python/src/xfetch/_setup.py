"""Configure later, for both faces: a Cache made without a URL (at import
time, where the decorators need it) keeps its keywords, and setup(url,
**options) connects it at startup. Until then, whatever needs the
connection raises NotSetUpError: the attributes a set-up Cache has are
missing, so the lookup falls through to __getattr__ (no cost once set up)."""
from __future__ import annotations

from typing import Any, Callable

from ._core import disabled
from ._errors import InvalidArgumentError, NotSetUpError
from ._native import lib


class LateSetup:
    """The constructor and setup() of xfetch.Cache and xfetch.aio.Cache
    (the same keywords on both faces: xfetch.Cache's docstring). A face
    defines _connect(url, **options), which sets the attributes its calls
    use (among them _config), and _label, its name in repr."""

    _label = "xfetch.Cache"

    def __init__(self, url: str | None = None, prefix: str | bytes = "",
                 timeout: float = 1.0, connect_timeout: float | None = None,
                 breaker: float = 1.0, seed: int | None = None,
                 max_key_len: int | None = None, max_value_len: int | None = None,
                 share: bool = True, lazy_connect: bool = False,
                 max_connections: int | None = None, ssl_ca_certs: str | None = None,
                 ssl_ca_path: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, ssl_check_hostname: bool | None = None,
                 ssl_cert_reqs: str | None = None,
                 on_event: Callable[[Any], None] | None = None,
                 enabled: bool = True, entry_format: int | None = None,
                 background_refresh: bool = True, near_cache_bytes: int = 0,
                 refresh_ahead: float | None = None,
                 write_fence: bool | None = None, ttl: Any = None,
                 serializer: Any = "pickle", secret: Any = None,
                 namespace_tag: bool = False, compress_min_bytes: int = 0) -> None:
        options = dict(locals())
        del options["self"], options["url"]
        self.__dict__["_options"] = options
        if url is not None:
            self._connect(url, **options)

    def __repr__(self):  # never shows the password
        config = self.__dict__.get("_config")
        if config is None:
            return f"<{self._label} not set up>"
        return f"<{self._label} {config.where} prefix={config.prefix!r}>"

    def setup(self, url: str, **options: Any) -> None:
        """Connects a Cache made without a URL: url and the constructor's
        keywords (these override the constructor's). As the constructor, it
        checks the URL, password and db now unless lazy_connect. Raises
        InvalidArgumentError when the Cache is set up already and not
        closed; TypeError for an unknown keyword."""
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        unknown = set(options) - set(self._options)
        if unknown:
            raise TypeError(f"setup() got unknown keyword(s): {', '.join(sorted(unknown))}")
        if "_config" in self.__dict__ and not self.__dict__.get("_closed"):
            raise InvalidArgumentError(lib.XF_EINVAL, f"this Cache is set up already "
                                       f"({self._config.where}): close() it first")
        self._connect(url, **dict(self._options, **options))

    def disabled(self):
        """Context manager: within the block (this thread, or this asyncio
        task and the tasks it starts), calls on this Cache run the loader
        every time and send nothing to Redis (a context variable)."""
        return disabled(self._config)

    @property
    def is_set_up(self) -> bool:
        """Whether the Cache has a URL (given to the constructor or setup())."""
        return "_config" in self.__dict__

    def __getattr__(self, name):
        d = self.__dict__
        if (name.startswith("_") and not name.startswith("__") and "_options" in d
                and "_config" not in d):
            raise NotSetUpError()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
