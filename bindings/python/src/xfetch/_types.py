"""The public types: Fetched (a typed NamedTuple) and what the decorators
return, for type checkers: CachedFunction[P, R] (xfetch.Cache.cached) and
AsyncCachedFunction[P, R] (xfetch.aio.Cache.cached), with the function's
own parameters (ParamSpec) and result. The runtime objects are plain
functions with attributes (or a cached method's descriptor); these
Protocols describe them."""
from __future__ import annotations

import sys
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Literal, NamedTuple, Optional,
                    Protocol, TypeVar, Union, overload)

Source = Literal["cache", "loader", "stale", "uncached", "local"]


class Fetched(NamedTuple):
    """(value, source): value is what the serializer gave back (bytes with
    serializer="bytes"), or None for not found; source is "cache",
    "loader", "stale", "uncached" or "local" (None when not found)."""
    value: Any
    source: Optional[Source]


if TYPE_CHECKING or sys.version_info >= (3, 10):  # ParamSpec; on 3.9, for checkers only
    from typing import Concatenate, ParamSpec

    P = ParamSpec("P")
    R = TypeVar("R")
    R_co = TypeVar("R_co", covariant=True)
    T = TypeVar("T")
    Key = Union[str, bytes]
    Co = Coroutine[Any, Any, R]

    class CachedFunction(Protocol[P, R_co]):
        """A cached function (or a method bound to its object): called as the
        function; .key, .invalidate and .set take the arguments without
        self (a classmethod's: bound to its class), .refresh and .original
        the function's own."""

        __name__: str
        __qualname__: str

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

        def key(self, *args: Any, **kwargs: Any) -> Key: ...

        def invalidate(self, *args: Any, **kwargs: Any) -> None: ...

        def set(self, value: Any, *args: Any, **kwargs: Any) -> bool: ...

        def refresh(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

        @property
        def original(self) -> Callable[P, R_co]: ...

    class CachedMethod(Protocol[T, P, R]):
        """A cached function of one parameter or more (T the first): called
        with all of them; looked up on an instance (or, under classmethod,
        on a class) T is bound and it is a CachedFunction[P, R]."""

        __name__: str
        __qualname__: str

        def __call__(self, __first: T, *args: P.args, **kwargs: P.kwargs) -> R: ...

        def key(self, *args: Any, **kwargs: Any) -> Key: ...

        def invalidate(self, *args: Any, **kwargs: Any) -> None: ...

        def set(self, value: Any, *args: Any, **kwargs: Any) -> bool: ...

        def refresh(self, __first: T, *args: P.args, **kwargs: P.kwargs) -> R: ...

        @property
        def original(self) -> Callable[Concatenate[T, P], R]: ...

        @overload  # Class.method under classmethod: the class is T
        def __get__(self, obj: None, owner: T) -> CachedFunction[P, R]: ...

        @overload  # Class.method: unbound
        def __get__(self, obj: None, owner: Any = None) -> CachedMethod[T, P, R]: ...

        @overload  # obj.method
        def __get__(self, obj: T, owner: Any = None) -> CachedFunction[P, R]: ...

        @overload  # obj.method under classmethod
        def __get__(self, obj: object, owner: T) -> CachedFunction[P, R]: ...

        @overload  # under staticmethod
        def __get__(self, obj: object, owner: Any = None) -> CachedMethod[T, P, R]: ...

    class CachedDecorator(Protocol):
        """What Cache.cached(...) returns: a function of no parameters
        becomes a CachedFunction, others a CachedMethod (which binds its
        first parameter on an instance, as methods do)."""

        @overload
        def __call__(self, func: Callable[Concatenate[T, P], R]) -> CachedMethod[T, P, R]: ...

        @overload
        def __call__(self, func: Callable[[], R]) -> CachedFunction[[], R]: ...

    class AsyncCachedFunction(Protocol[P, R_co]):
        """What xfetch.aio.Cache.cached makes of an async def (bound to its
        object, for a method): CachedFunction's helpers, awaited (.key is
        not: it does no I/O)."""

        __name__: str
        __qualname__: str

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]: ...

        def key(self, *args: Any, **kwargs: Any) -> Key: ...

        def invalidate(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]: ...

        def set(self, value: Any, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, bool]: ...

        def refresh(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]: ...

        @property
        def original(self) -> Callable[P, Coroutine[Any, Any, R_co]]: ...

    class AsyncCachedMethod(Protocol[T, P, R]):
        """AsyncCachedFunction of one parameter or more: see CachedMethod."""

        __name__: str
        __qualname__: str

        def __call__(self, __first: T, *args: P.args, **kwargs: P.kwargs) -> Co[R]: ...

        def key(self, *args: Any, **kwargs: Any) -> Key: ...

        def invalidate(self, *args: Any, **kwargs: Any) -> Co[None]: ...

        def set(self, value: Any, *args: Any, **kwargs: Any) -> Co[bool]: ...

        def refresh(self, __first: T, *args: P.args, **kwargs: P.kwargs) -> Co[R]: ...

        @property
        def original(self) -> Callable[Concatenate[T, P], Co[R]]: ...

        @overload
        def __get__(self, obj: None, owner: T) -> AsyncCachedFunction[P, R]: ...

        @overload
        def __get__(self, obj: None, owner: Any = None) -> AsyncCachedMethod[T, P, R]: ...

        @overload
        def __get__(self, obj: T, owner: Any = None) -> AsyncCachedFunction[P, R]: ...

        @overload
        def __get__(self, obj: object, owner: T) -> AsyncCachedFunction[P, R]: ...

        @overload
        def __get__(self, obj: object, owner: Any = None) -> AsyncCachedMethod[T, P, R]: ...

    class AsyncCachedDecorator(Protocol):
        """What xfetch.aio.Cache.cached(...) returns."""

        @overload
        def __call__(self, func: Callable[Concatenate[T, P], Awaitable[R]]
                     ) -> AsyncCachedMethod[T, P, R]: ...

        @overload
        def __call__(self, func: Callable[[], Awaitable[R]]) -> AsyncCachedFunction[[], R]: ...
