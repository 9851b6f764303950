"""FastAPI (and Starlette) with xfetch.aio.Cache: connected in the app's
lifespan, handed to endpoints by a dependency, and a decorator caching an
endpoint's JSON result per its arguments, stampede-safe.

    import xfetch.aio
    from fastapi import Depends, FastAPI
    from xfetch.contrib.fastapi import cached, get_cache, install

    cache = xfetch.aio.Cache(ttl="30s", prefix="shop:")   # at import: no connection
    app = FastAPI()
    install(app, cache, "redis://127.0.0.1:6379/0")      # set up at startup, closed at shutdown

    @app.get("/items/{item_id}")
    @cached(cache, ttl="10s")             # keyed by item_id; db is a dependency: not keyed
    async def item(item_id: int, db=Depends(get_db)):
        return await db.fetchrow(...)

    @app.get("/stats")
    async def stats(cache: xfetch.aio.Cache = Depends(get_cache)):
        return cache.stats()

The decisions (one load per key across every process, early refresh, the
lease, failing open) are the Cache's: cached() is xfetch.aio.Cache.cached
keyed by the endpoint's request arguments, with FastAPI's JSON encoding of
the result."""
from __future__ import annotations

import contextlib
import functools
import inspect
import typing
import warnings
from typing import Any, Callable, TypeVar

from fastapi import BackgroundTasks, params
from fastapi.encoders import jsonable_encoder
from fastapi.security import SecurityScopes
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from .._keys import _canon, _name, _shorten

__all__ = ["install", "get_cache", "cached"]

F = TypeVar("F", bound=Callable[..., Any])

# What FastAPI passes to an endpoint that is not a request argument: the
# connection objects it injects by annotation (Request, WebSocket, ...).
_INJECTED_TYPES = (HTTPConnection, Response, BackgroundTasks, SecurityScopes)


def install(app: Any, cache: Any, url: str | None = None, **options: Any) -> None:
    """Connects cache (an xfetch.aio.Cache) in app's lifespan and makes it
    app.state.xfetch (what get_cache returns): at startup, cache.setup(url,
    **options) when url is given (else the Cache must have its URL already),
    before the app's own lifespan or startup handlers run, so they may use
    it; at shutdown, after them, await cache.close(). Works on a FastAPI or
    Starlette app, whatever lifespan it was given (FastAPI(lifespan=...),
    on_startup/on_shutdown, none); FastAPI before 0.93 drops lifespan=
    (warned here): set app.router.lifespan_context instead."""
    if not getattr(cache, "_is_async", False):
        raise TypeError("install() takes an xfetch.aio.Cache (the asyncio face), "
                        f"not {type(cache).__name__}")
    if "lifespan" in (getattr(app, "extra", None) or {}):
        warnings.warn("this FastAPI ignores FastAPI(lifespan=...) (it takes it from 0.93 on): "
                      "set app.router.lifespan_context = lifespan before install()",
                      RuntimeWarning, stacklevel=2)
    app_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_):
        if url is not None:
            cache.setup(url, **options)
        elif not cache.is_set_up:
            raise RuntimeError("install(app, cache) without a url needs a Cache given its "
                               "URL already: pass url= (or call cache.setup)")
        app.state.xfetch = cache
        try:
            async with app_lifespan(app_) as state:
                yield state
        finally:
            await cache.close()

    app.router.lifespan_context = lifespan


def get_cache(request: Request) -> Any:
    """The dependency handing the app's xfetch.aio.Cache (install()) to an
    endpoint: `cache: xfetch.aio.Cache = Depends(get_cache)`."""
    cache = getattr(request.app.state, "xfetch", None)
    if cache is None:
        raise RuntimeError("no xfetch cache on this app: call "
                           "xfetch.contrib.fastapi.install(app, cache, url) first")
    return cache


def cached(cache: Any, ttl: Any = None, key: Any = None, serializer: Any = "json", *,
           namespace: Any = None, version: Any = None, condition: Any = None,
           **policy: Any) -> Callable[[F], F]:
    """Caches an async endpoint's result, as FastAPI would send it
    (fastapi.encoders.jsonable_encoder: pydantic models, dates, ... become
    JSON values), per its request arguments: one run per key across every
    process sharing the Redis, the other requests served the cached result
    or waiting for that run. Put it below the route decorator.

    The default key is "module.qualname(arg=value, ...)" over the endpoint's
    path, query, header, cookie and body arguments; dependencies
    (Depends/Security defaults or Annotated metadata) and injected objects
    (Request, Response, BackgroundTasks, ...) are not in it. A result that
    depends on a dependency (the current user) needs key= naming it: a
    format string or a callable over all the endpoint's arguments.
    ttl, serializer ("json"), namespace, version, condition and **policy
    are xfetch.aio.Cache.cached's; so are the wrapper's .key, .invalidate,
    .set and .refresh, which take the request arguments only (key=None)."""
    face_cached = cache.cached

    def decorate(endpoint):
        if not inspect.iscoroutinefunction(endpoint):
            raise TypeError(f"{getattr(endpoint, '__qualname__', endpoint)!r} is not an "
                            f"async def: cached() caches async endpoints")
        sig = _resolved_signature(endpoint)
        keyed = [p for p in sig.parameters.values() if not _injected(p)]
        keyed_sig = sig.replace(parameters=keyed)

        if key is None:
            name = _name(endpoint, None, namespace)  # a closure needs namespace=

            def make_key(*args, **kwargs):
                given = sig.bind_partial(*args, **kwargs).arguments
                bound = keyed_sig.bind(**{n: v for n, v in given.items()
                                          if n in keyed_sig.parameters})
                bound.apply_defaults()
                return _shorten(name + "(" + ", ".join(
                    f"{n}={_canon(v)}" for n, v in bound.arguments.items()) + ")")
        else:
            make_key = key

        @functools.wraps(endpoint)
        async def encoded(*args, **kwargs):
            result = await endpoint(*args, **kwargs)
            if isinstance(result, Response):
                raise TypeError(f"{endpoint.__qualname__} returned a {type(result).__name__}: "
                                f"cached() stores the endpoint's data; return it and let "
                                f"the route make the response")
            return jsonable_encoder(result)

        encoded.__signature__ = sig  # the core's key template check, FastAPI's parameters
        wrapper = face_cached(ttl, make_key, serializer, namespace=namespace, version=version,
                              condition=condition, **policy)(encoded)
        wrapper.__signature__ = sig  # resolved annotations: FastAPI reads no globals
        return wrapper

    return decorate


def _resolved_signature(endpoint):
    """The endpoint's signature with its annotations evaluated in its own
    module (string annotations, `from __future__ import annotations`), so
    FastAPI reads the same parameters through the wrapper."""
    sig = inspect.signature(endpoint)
    try:
        hints = typing.get_type_hints(endpoint, include_extras=True)
    except Exception:  # a name FastAPI could not resolve either: left as written
        return sig
    return sig.replace(
        parameters=[p.replace(annotation=hints.get(p.name, p.annotation))
                    for p in sig.parameters.values()],
        return_annotation=hints.get("return", sig.return_annotation))


def _injected(param):
    """Whether FastAPI fills param itself (a dependency or a connection
    object) rather than from the request's arguments."""
    if isinstance(param.default, params.Depends):
        return True
    annotation = param.annotation
    if typing.get_origin(annotation) is typing.Annotated:
        if any(isinstance(m, params.Depends) for m in annotation.__metadata__):
            return True
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, _INJECTED_TYPES)
