"""A cached method on either face: binds self (or, under classmethod, the
class) as functions do, and its helpers with it."""
import functools

from ._keys import _first_param


class _CachedMethod:
    """A cached method (sync or aio): called like the function; looked up on
    an instance (or on a class, under classmethod) it binds like a function
    does, and its .refresh and .original then get that self too. .key,
    .invalidate and .set leave self out of the key either way; a
    classmethod's (first parameter cls) get the class it is called on."""

    def __init__(self, wrapper):
        self._wrapper = wrapper
        self._by_class = _first_param(wrapper.original) == "cls"
        functools.update_wrapper(self, wrapper)  # __name__, __doc__, the helpers

    def __call__(self, *args, **kwargs):
        return self._wrapper(*args, **kwargs)

    def __get__(self, obj, objtype=None):
        return self if obj is None else _BoundCachedMethod(self, obj)

    def __reduce__(self):  # pickles by name, as functions do
        return self.__qualname__

    def __repr__(self):
        return f"<cached method {self.__qualname__}>"


class _BoundCachedMethod:
    """obj.method for a cached method: the helpers bound to obj."""

    __slots__ = ("__func__", "__self__")

    def __init__(self, func, obj):
        self.__func__ = func
        self.__self__ = obj

    def __call__(self, *args, **kwargs):
        return self.__func__._wrapper(self.__self__, *args, **kwargs)

    def refresh(self, *args, **kwargs):
        return self.__func__.refresh(self.__self__, *args, **kwargs)

    def original(self, *args, **kwargs):
        return self.__func__.original(self.__self__, *args, **kwargs)

    def _keyed(self):  # what the key takes before the arguments: cls, not self
        return (self.__self__,) if self.__func__._by_class else ()

    def key(self, *args, **kwargs):
        return self.__func__.key(*self._keyed(), *args, **kwargs)

    def invalidate(self, *args, **kwargs):
        return self.__func__.invalidate(*self._keyed(), *args, **kwargs)

    def set(self, value, *args, **kwargs):
        return self.__func__.set(value, *self._keyed(), *args, **kwargs)

    def __getattr__(self, name):  # __name__, __doc__, ...
        return getattr(self.__func__, name)

    def __eq__(self, other):
        return (isinstance(other, _BoundCachedMethod) and self.__func__ is other.__func__
                and self.__self__ is other.__self__)

    def __hash__(self):
        return hash((id(self.__func__), id(self.__self__)))

    def __reduce__(self):  # pickles as getattr(obj, name), like a bound method
        return getattr, (self.__self__, self.__func__.__name__)

    def __repr__(self):
        return f"<bound cached method {self.__func__.__qualname__} of {self.__self__!r}>"
