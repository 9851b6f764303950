"""Configure later, for both faces: a Cache made without a URL (at import
time, where the decorators need it) keeps its keywords, and setup(url,
**options) connects it at startup. Until then, whatever needs the
connection raises NotSetUpError: the attributes a set-up Cache has are
missing, so the lookup falls through to __getattr__ (no cost once set up)."""
from __future__ import annotations

from typing import Any

from ._errors import InvalidArgumentError, NotSetUpError
from ._native import lib


class LateSetup:
    """The setup() half of xfetch.Cache and xfetch.aio.Cache. A face
    defines _connect(url, **options), which sets the attributes its calls
    use (among them _config)."""

    def _keep_options(self, url, options):
        self.__dict__["_options"] = options
        if url is not None:
            self._connect(url, **options)

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
