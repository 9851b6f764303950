"""Cache keys for the decorators: canonical argument texts (the same in
every process), self/cls left out, templates checked at decoration, and
namespace/version scoping."""
import datetime
import decimal
import enum
import fractions
import inspect
import pathlib
import string
import uuid

# Values whose repr is the same in every process and names the value.
_PLAIN = (type(None), bool, int, float, complex, decimal.Decimal, fractions.Fraction,
          datetime.date, datetime.time, datetime.timedelta, datetime.tzinfo, uuid.UUID,
          pathlib.PurePath)


def _canon(v):
    """A text that is the same for equal arguments in every process: reprs of
    plain values, str and bytes by content (str subclasses as str), tuples and
    lists in order, dicts by sorted key, sets sorted, enums by name. Anything
    else (objects whose repr shows an address) raises TypeError."""
    if isinstance(v, enum.Enum):
        return f"{type(v).__qualname__}.{v.name}"
    if isinstance(v, str):
        return repr(str(v))
    if isinstance(v, (bytes, bytearray)):
        return repr(bytes(v))
    if isinstance(v, _PLAIN):
        r = repr(v)
        if " at 0x" not in r:  # e.g. a datetime with a tzinfo of no repr
            return r
    if isinstance(v, tuple):
        return "(" + ", ".join(map(_canon, v)) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(map(_canon, v)) + "]"
    if isinstance(v, dict):
        items = sorted((_canon(k), _canon(x)) for k, x in v.items())
        return "{" + ", ".join(f"{k}: {x}" for k, x in items) + "}"
    if isinstance(v, (set, frozenset)):
        inner = ", ".join(sorted(map(_canon, v)))
        return ("frozenset({" + inner + "})") if isinstance(v, frozenset) else "{" + inner + "}"
    raise TypeError(f"a {type(v).__name__} argument cannot be part of a cache key ({v!r} "
                    f"is not the same in every process): pass None, bool, numbers, str, "
                    f"bytes, dates, UUIDs, paths, enums, or tuples, lists, dicts and sets "
                    f"of them, or give the decorator key=")


def _takes_self(func):
    """Whether func is a method by its first parameter's name (self or cls):
    that argument is left out of the key, as dogpile.cache does."""
    params = list(inspect.signature(func).parameters)
    return bool(params) and params[0] in ("self", "cls")


def _key_builder(func, key, namespace=None, version=None):
    """Returns make_key(*args, **kwargs) -> str|bytes over the arguments
    without self/cls."""
    sig = inspect.signature(func)
    if _takes_self(func):
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    name = f"{func.__module__}.{func.__qualname__}"

    def bound(args, kwargs):
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        return b.arguments

    if callable(key):
        make = key
    elif isinstance(key, str):  # a format string over the arguments by name
        fields = {f.split(".")[0].split("[")[0]
                  for _, f, _, _ in string.Formatter().parse(key) if f is not None}
        unknown = fields - set(sig.parameters)
        if unknown or "" in fields:
            raise ValueError(f"key template {key!r} names {', '.join(sorted(unknown)) or '{}'}"
                             f", which is not an argument of {func.__qualname__}")

        def make(*a, **kw):
            return key.format(**bound(a, kw))
    elif key is None:
        # "module.qualname(name=canonical value, ...)": defaults applied, so
        # f(1) and f(x=1) share an entry, and **kwargs sorted by name.
        def make(*a, **kw):
            return name + "(" + ", ".join(
                f"{k}={_canon(v)}" for k, v in bound(a, kw).items()) + ")"
    else:
        raise TypeError("key must be None, a format string or a callable")
    if namespace is None and version is None:
        return make

    return lambda *a, **kw: _scope(make(*a, **kw), namespace, version)


def _scope(k, namespace, version):
    """"namespace:k#vN" (either part only when given)."""
    if namespace is None and version is None:
        return k
    head = "" if namespace is None else f"{namespace}:"
    tail = "" if version is None else f"#v{version}"
    if isinstance(k, (bytes, bytearray)):  # any bytes (not only UTF-8): stays bytes
        return head.encode() + bytes(k) + tail.encode()
    return head + k + tail
