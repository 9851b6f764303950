"""Cache keys for the decorators: canonical argument texts (the same in
every process), self left out and cls keyed by the class called on,
templates checked at decoration, namespace/version scoping, and a digest
for over-long default keys. A function whose name does not identify it (a
closure, a lambda, a functools.partial) is refused at decoration."""
import datetime
import decimal
import enum
import fractions
import functools
import hashlib
import inspect
import pathlib
import string
import uuid

# Exact types whose repr is the same in every process and names the value.
_REPR = (type(None), bool, int, float, complex, bytes, str, decimal.Decimal,
         fractions.Fraction, datetime.date, datetime.timedelta, uuid.UUID)
_EXACT = dict.fromkeys(_REPR, repr)
# Subclasses: the base type's own text of the value, never one the subclass
# chose (an int whose __repr__ masks it must not share every key).
_BASE = ((int, int.__repr__), (float, float.__repr__), (complex, complex.__repr__),
         (decimal.Decimal, decimal.Decimal.__repr__),
         (fractions.Fraction, fractions.Fraction.__repr__),
         (uuid.UUID, lambda v: f"UUID({uuid.UUID.__str__(v)!r})"))
# Kept as their repr (subclasses too), refused when it shows an address.
_BY_REPR = (datetime.date, datetime.time, datetime.timedelta, datetime.tzinfo,
            pathlib.PurePath)

# A default key longer than this (UTF-8 bytes, before namespace and version)
# is shortened to its first LONG_KEY - 72 bytes + ":sha256:" + the hex
# SHA-256 of the whole key: LONG_KEY bytes at most, unique, still readable.
LONG_KEY = 1024
_DIGEST = ":sha256:"


def _canon(v):
    """A text that is the same for equal arguments in every process: reprs of
    plain values (of a subclass: the base type's text of the value), str and
    bytes by content, tuples and lists in order, dicts by sorted key, sets
    sorted, enums by module-qualified class and name (flags by value).
    Anything else (objects whose repr shows an address) raises TypeError."""
    f = _EXACT.get(type(v))
    if f is not None:
        return f(v)
    if isinstance(v, enum.Enum):
        cls = type(v)
        if isinstance(v, enum.Flag):  # Perm(0), Perm(8): no single name
            return f"{cls.__module__}.{cls.__qualname__}({_canon(v._value_)})"
        return f"{cls.__module__}.{cls.__qualname__}.{v._name_}"
    if isinstance(v, str):
        return repr(str.__str__(v))  # the text, not what __str__ shows
    if isinstance(v, (bytes, bytearray)):
        return repr(bytes(memoryview(v)))  # the content, not __bytes__
    for base, text in _BASE:
        if isinstance(v, base):
            return text(v)
    if isinstance(v, _BY_REPR):
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


def _shorten(k):
    """A default key past LONG_KEY bytes: its readable head + ":sha256:" + the
    digest of the whole key (so one long argument does not break the call)."""
    if len(k) * 4 <= LONG_KEY:  # no UTF-8 text of it can be longer
        return k
    b = k.encode("utf-8", "surrogatepass")
    if len(b) <= LONG_KEY:
        return k
    head = b[:LONG_KEY - len(_DIGEST) - 64].decode("utf-8", "ignore")
    return head + _DIGEST + hashlib.sha256(b).hexdigest()


def _label(func):
    return getattr(func, "__qualname__", None) or repr(func)


def _check_function(func):
    """Refuses what a decorator cannot name: functools.partial objects (no
    name of their own: two partials of one function would share keys)."""
    if isinstance(func, (functools.partial, functools.partialmethod)):
        raise TypeError(f"cannot cache {func!r}: a functools.partial has no name of its own "
                        f"(two partials of one function would share keys); decorate a def "
                        f"that calls it")
    if not callable(func):
        raise TypeError(f"cannot cache {func!r}: not a function")


def _first_param(func):
    """"self" or "cls" when func is a method by its first parameter's name,
    else None. self is left out of the key (as dogpile.cache does); cls is
    keyed by the class the method is called on."""
    params = list(inspect.signature(func).parameters)
    return params[0] if params and params[0] in ("self", "cls") else None


def _takes_self(func):
    """Whether func's first parameter is self or cls (a method)."""
    return _first_param(func) is not None


def _name(func, key, namespace):
    """module.qualname, refused (TypeError) for a closure or lambda when
    neither key= nor namespace= tells its functions apart."""
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(qualname, str):
        raise TypeError(f"cannot cache {func!r}: it has no __qualname__ to key by; "
                        f"decorate a def, or pass key=")
    name = f"{func.__module__}.{qualname}"
    if key is None and namespace is None and ("<locals>" in qualname or "<lambda>" in qualname):
        raise TypeError(f"{name} does not identify one function (every closure one factory "
                        f"makes, and every lambda, has this name, so their results would "
                        f"share keys): pass key= (a template such as 'price:{{item}}', or a "
                        f"callable) or namespace= (e.g. the value the closure captures)")
    return name


def _class_name(cls, local_ok):
    """The module-qualified name of the class a classmethod is called on."""
    if not isinstance(cls, type):
        return _canon(cls)
    if "<locals>" in cls.__qualname__ and not local_ok:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} is a class defined in a "
                        f"function: its name does not identify it; give the decorator "
                        f"key= or namespace=")
    return f"{cls.__module__}.{cls.__qualname__}"


def _binder(sig):
    """bound(args, kwargs) -> {name: value} of every parameter of sig in its
    order, defaults applied (sig.bind, then apply_defaults). The common call,
    positional arguments only to a function of plain parameters, is bound
    without inspect (a decorated near hit: a third of its time was inspect's
    binding); any other call goes through inspect, which also raises
    TypeError as the function would."""
    plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = list(sig.parameters.values())
    if any(p.kind is not plain for p in params):
        names = None
    else:
        names = tuple(p.name for p in params)
        empty = inspect.Parameter.empty
        required = sum(1 for p in params if p.default is empty)
        defaults = tuple(p.default for p in params)
        if any(d is empty for d in defaults[required:]):
            names = None  # a default before a required parameter: inspect's to refuse

    def bound(args, kwargs):
        if names is not None and not kwargs and required <= len(args) <= len(names):
            got = dict(zip(names, args))
            for i in range(len(args), len(names)):
                got[names[i]] = defaults[i]
            return got
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        return b.arguments

    return bound


def _key_builder(func, key, namespace=None, version=None):
    """Returns make_key(*args, **kwargs) -> str|bytes over the arguments
    without self; a classmethod's (first parameter cls) takes cls first."""
    _check_function(func)
    name = _name(func, key, namespace)
    sig = inspect.signature(func)
    first = _first_param(func)
    if first is not None:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    by_class = first == "cls"

    bound = _binder(sig)

    def split(a):  # (cls, the other arguments) of a classmethod's key
        if not a:
            raise TypeError(f"{func.__qualname__}.key takes the class first")
        return a[0], a[1:]

    if callable(key):  # called with the arguments, without self/cls
        make = (lambda *a, **kw: key(*split(a)[1], **kw)) if by_class else key
    elif isinstance(key, str):  # a format string over the arguments by name
        fields = {f.split(".")[0].split("[")[0]
                  for _, f, _, _ in string.Formatter().parse(key) if f is not None}
        unknown = fields - set(sig.parameters)
        if unknown or "" in fields:
            raise ValueError(f"key template {key!r} names {', '.join(sorted(unknown)) or '{}'}"
                             f", which is not an argument of {func.__qualname__}")

        def make(*a, **kw):
            return key.format(**bound(split(a)[1] if by_class else a, kw))
    elif key is None:
        # "module.qualname(name=canonical value, ...)": defaults applied, so
        # f(1) and f(x=1) share an entry, and **kwargs sorted by name; a
        # classmethod's starts with cls=module.Class.
        local_ok = namespace is not None

        def make(*a, **kw):
            parts = []
            if by_class:
                cls, a = split(a)
                parts.append("cls=" + _class_name(cls, local_ok))
            parts.extend(f"{k}={_canon(v)}" for k, v in bound(a, kw).items())
            return _shorten(name + "(" + ", ".join(parts) + ")")
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
