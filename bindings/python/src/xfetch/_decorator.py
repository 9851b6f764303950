"""The cached() and cached_many() decorators, once for both faces: keys
from _keys (canonical, the same in every process), values through the
Cache's serializer (or the decorator's serializer=, signed with the Cache's
secret=: _values); the logic is coroutines run by the Cache's face
(_face: awaited on xfetch.aio, driven to their end at once on xfetch.Cache)."""
import datetime
import functools
import logging
import math
import time

from ._revalidate import UNCHANGED, Validated
from ._runtime import Timed
from ._core import NEAR_NOT_SERVED
from ._events import NAMESPACE
from ._face import face_of, fetch_of, set_of
from ._keys import _first_param, _key_builder, _scope, _takes_self
from ._method import _CachedMethod
from ._policy import make_policy, tag_names
from ._serializers import _serializer
from ._types import Fetched
from ._values import recover, ttl_seconds, values_of_many

log = logging.getLogger("xfetch")


# ---- the decorator --------------------------------------------------------------

def _ttl_seconds(ttl, result=None):
    """Seconds for a ttl (None: None, the Cache's default)."""
    if ttl is None:
        return None
    if callable(ttl) and not isinstance(ttl, (str, datetime.timedelta)):
        ttl = ttl(result)
        if ttl is None:
            return None
    return ttl_seconds(ttl)


def cached(cache, ttl=None, key=None, serializer=None, *, namespace=None, version=None,
           condition=None, previous=False, **policy):
    """Decorator factory behind Cache.cached (both faces).

    ttl: seconds, a datetime.timedelta, a string such as "10m", None (the
    Cache's default ttl, as it is when called: set at setup()), or a
    callable taking the result and returning one of those (None or <= 0:
    do not cache that result). **policy: get_or_compute's policy keywords (seconds).
    key: None (module.qualname and the arguments' canonical forms: the same in
    every process; self left out, a classmethod's cls keyed by class; past
    1024 bytes, digested; a closure or lambda is refused unless key= or
    namespace= is given), a format string such as "user:{user_id}"
    over the arguments by name (checked at decoration), or a callable taking
    the arguments (without self/cls) and returning str or bytes. namespace and
    version scope the keys ("namespace:key#vN"): bump version to move to fresh
    entries on purpose. serializer: None (the Cache's: pickle by default),
    "pickle", "json", "bytes" (the function returns bytes) or an object with
    dumps/loads, signed with the Cache's secret= if it has one; a None result
    means "not found" (cached for negative_ttl, default 0 = not cached), and an
    entry the serializer (or the secret) refuses is a miss (recomputed and
    overwritten).
    condition: a callable taking the result; False = return it uncached.
    previous=True (conditional refresh): the function is also called with
    previous= (keyword): an xfetch.Previous(value, validator, age) when the
    cache holds a value for the call (a refresh), else None; it may return
    xfetch.UNCHANGED or xfetch.Validated(value, validator), as a
    get_or_compute loader with previous=True.
    tags: a sequence of names the results depend on (Cache.invalidate_tags),
    or a callable taking the function's arguments (without self/cls, as key=)
    and returning one.
    lease: at least twice the slowest run of the function seen in this
    process (a longer-running loader would lose the key mid-load).

    The wrapper has .key(*args), .invalidate(*args), .set(value, *args) (the
    arguments without self; a classmethod's bound to its class), .refresh(*args) (computes now and
    overwrites) and .original. On a method, obj.method.refresh(*args) and
    obj.method.original(*args) act for obj; Class.method.refresh(obj, *args)
    takes it explicitly.
    """
    face = face_of(cache)
    policy = dict(policy)
    tags = policy.pop("tags", None)
    if tags is not None and not callable(tags):
        tags = tag_names(tags)  # checked at decoration
    if serializer is not None:
        _serializer(serializer)  # checked at decoration
    fixed_ttl = ttl is None or isinstance(ttl, (str, datetime.timedelta)) or not callable(ttl)
    if ttl is None:
        policy = dict(policy)  # the Cache's default ttl, looked up by each call
    else:
        policy = dict(policy, ttl=_ttl_seconds(ttl) if fixed_ttl else 60.0)
    unknown = set(policy) - _POLICY_KEYWORDS
    if unknown:
        raise TypeError(f"unknown policy keyword(s): {', '.join(sorted(unknown))}")
    _validate(**dict(policy, ttl=policy.get("ttl", 60.0)))
    if condition is not None and not callable(condition):
        raise TypeError("condition must be a callable taking the result")

    def decorate(func):
        if isinstance(func, (classmethod, staticmethod)):  # placed above the decorator
            return type(func)(decorate(func.__func__))
        face.check(func, "cached")
        make_key = _key_builder(func, key, namespace, version)
        drop = _first_param(func) == "self"  # left out of the key; cls is keyed

        def codec():
            """The serializer's codec, with the Cache's secret (known once
            the Cache is set up: looked up by each call)."""
            return cache._config.codecs.get(serializer)

        # The lease, at least twice the slowest run of func seen in this
        # process: a lease that runs out mid-load lets another caller load too.
        leased = [policy]
        extra = {n: v for n, v in policy.items() if n in ("stale", "jitter")}  # for set

        async def compute(args, kwargs, *prev):
            """The loader: the function's encoded result; with its own ttl
            (C xf_sink_ttl) when ttl is a callable, or 0 (returned, not
            cached) when condition= refuses it: the lease holder's write
            carries it, so waiters and XFetch's early refreshes work as with
            a fixed ttl."""
            t0 = time.monotonic()
            if previous:
                kwargs = dict(kwargs, previous=prev[0] if prev else None)
            result = await face.result(func(*args, **kwargs))
            if result is UNCHANGED:
                return result
            if type(result) is Validated:  # condition and ttl see the value
                validator, result = result.validator, result.value
                answer = await compute_answer(result, t0)
                return (Timed(Validated(answer.value, validator), answer.ttl)
                        if type(answer) is Timed else Validated(answer, validator))
            return await compute_answer(result, t0)

        async def compute_answer(result, t0):
            """The function's result with its own ttl (see compute)."""
            lease = math.ceil((time.monotonic() - t0) * 20) / 10  # 2x, rounded up to 0.1 s
            if lease > leased[0].get("lease", 5.0) and lease < 2**31 / 1000:
                leased[0] = dict(policy, lease=lease)
            if condition is not None and not condition(result):
                return Timed(result, 0)
            if not fixed_ttl and result is not None:
                ttl_s = _ttl_seconds(ttl, result)
                return Timed(result, ttl_s if ttl_s and ttl_s > 0 else 0)  # <= 0: not cached
            return result

        def tags_of(args, kwargs):
            """The call's tags (args without self)."""
            return tags(*args, **kwargs) if callable(tags) else tags

        async def store(k, result, t):
            if result is None:
                return False
            ttl_s = _ttl_seconds(ttl, result)
            if not fixed_ttl and (ttl_s is None or ttl_s <= 0):  # "do not cache"
                return False
            # False when a newer value won: ours is returned, not kept.
            return await set_of(face, codec(), k, result, ttl=ttl_s, tags=t, **extra)

        load = face.loader(compute)

        # The last call's policy: (Cache config, leased[0], tags, xf_policy)
        last = [None]

        def near_hit(k, t):
            """(k's bytes, the call's near hit decoded as a Fetched, None when
            the serializer refuses it, or NEAR_NOT_SERVED): the first step of
            the Cache's call (_near_get), its policy built once while the
            Cache's setup, the lease and the tags stay the same."""
            config = cache.__dict__.get("_config")
            if config is None or not cache._near:
                return None, NEAR_NOT_SERVED
            m = last[0]  # one read: threads replace it whole
            if m is None or m[0] is not config or m[1] is not leased[0] or m[2] != t:
                kw = dict(leased[0])
                m = (config, leased[0], t,
                     cache._policies.of_call(kw.pop("ttl", None), tags=t, **kw))
                last[0] = m
            kb, value = cache._near_get(k, m[3])
            if value is NEAR_NOT_SERVED:
                return kb, value
            return kb, config.codecs.fetched(codec(), k, kb, Fetched(value, "cache"))

        async def call(*args, **kwargs):
            keyed = args[1:] if drop else args
            k = make_key(*keyed, **kwargs)
            t = None if tags is None else tags_of(keyed, kwargs)
            if not previous:
                kb, got = near_hit(k, t)
                if got is None:  # refused (counted): recomputed, as a call's would be
                    got = await recover(face, codec(), k, kb, functools.partial(load, args, kwargs),
                                        dict(leased[0], tags=t))
                if got is not NEAR_NOT_SERVED:
                    return got[0]
            loader = functools.partial(load, args, kwargs)
            if t is not None:
                return (await fetch_of(face, codec(), k, loader, previous=previous, tags=t,
                                       **leased[0]))[0]
            return (await fetch_of(face, codec(), k, loader, previous=previous, **leased[0]))[0]

        async def refresh(*args, **kwargs):
            """Computes the value now and overwrites the entry; returns it.
            Takes the function's own arguments (a method's self included)."""
            called = dict(kwargs, previous=None) if previous else kwargs
            result = await face.result(func(*args, **called))
            if type(result) is Validated:
                result = result.value
            if condition is None or condition(result):
                keyed = args[1:] if drop else args
                await store(make_key(*keyed, **kwargs), result, tags_of(keyed, kwargs))
            return result

        async def invalidate(*args, **kwargs):
            return await face.call("delete", make_key(*args, **kwargs))

        async def set_(value, *args, **kwargs):
            return await store(make_key(*args, **kwargs), value, tags_of(args, kwargs))

        wrapper = face.expose(_labelled(call, namespace), like=func)
        wrapper.key = make_key
        wrapper.invalidate = face.expose(invalidate)
        wrapper.set = face.expose(set_)
        wrapper.refresh = face.expose(refresh)
        wrapper.original = func
        return _CachedMethod(wrapper) if _takes_self(func) else wrapper

    return decorate


def _labelled(call, namespace):
    """call, with namespace as the label of its events (xfetch.metrics: the
    namespace label; Event.namespace), passed in a context variable."""
    if namespace is None:
        return call
    label = str(namespace)

    async def labelled(*args, **kwargs):
        token = NAMESPACE.set(label)
        try:
            return await call(*args, **kwargs)
        finally:
            NAMESPACE.reset(token)
    return labelled


def cached_many(cache, ttl=None, key="{}", serializer=None, *, namespace=None, version=None,
                **policy):
    """Decorator factory behind Cache.cached_many, for batch functions:

        @cache.cached_many(ttl=60, key="user:{}", serializer="json")
        def load_users(ids): return {i: row for i, row in db.fetch(ids)}

        load_users([1, 2, 3])  # {1: ..., 2: ..., 3: ...}: the hits from
                               # Redis in one round trip, the misses loaded
                               # with one call of load_users(missing ids)

    key: a format string with one {} for the id, or a callable id -> key;
    namespace= and version= scope it as for cached ("namespace:key#vN").
    An entry the serializer (or the Cache's secret) refuses is a miss:
    logged, counted, and those keys computed in one more call and
    overwritten.
    The ids must be hashable; the result is a dict in the order of the ids
    given (an id the function left out, or mapped to None, maps to None).
    Ids that render one key ("7" and 7 with "user:{}") share its entry: each
    is a key of the result, with the first of their results that is not None.
    The values go through the serializer (None: the Cache's). The
    wrapper has .key(id), .invalidate(*ids) and .original. On a method
    (first parameter self or cls), self is passed through and not keyed.
    tags: a sequence of names every id's entry carries (one policy for the
    batch: not a callable)."""
    face = face_of(cache)
    if serializer is not None:
        _serializer(serializer)  # checked at decoration
    policy = dict(policy)
    tags = policy.pop("tags", None)
    if callable(tags):
        raise TypeError("cached_many's tags must be a sequence of names (one for the batch)")
    if tags is not None:
        tags = tag_names(tags)  # checked at decoration
    policy = policy if ttl is None else dict(policy, ttl=_ttl_seconds(ttl))
    _validate(**dict(policy, ttl=policy.get("ttl", 60.0)))
    if isinstance(key, str):
        if key.count("{}") != 1:
            raise ValueError("a cached_many key template needs exactly one {} for the id")
        make_key = (key.format if namespace is None and version is None else
                    lambda i: _scope(key.format(i), namespace, version))
    elif callable(key):
        make_key = (key if namespace is None and version is None else
                    lambda i: _scope(key(i), namespace, version))
    else:
        raise TypeError("key must be a format string with {} or a callable id -> key")

    def decorate(func):
        face.check(func, "cached_many")
        method = _takes_self(func)  # f(self, ids): self is passed through, not keyed

        async def call(*args):
            if len(args) != 1 + method:
                raise TypeError(f"{func.__qualname__} takes {'self and ' if method else ''}"
                                f"one list of ids, got {len(args)} arguments")
            head, ids = args[:-1], list(dict.fromkeys(args[-1]))
            key_of = {i: make_key(i) for i in ids}
            by_key = {}  # key -> the ids that render it ("7" and 7: one entry)
            for i, k in key_of.items():
                by_key.setdefault(k, []).append(i)

            async def compute(keys):  # {key: result}: one call for every id of these keys
                results = await face.result(func(*head, [i for k in keys for i in by_key[k]]))
                return {k: next((r for r in map(results.get, by_key[k]) if r is not None),
                                None) for k in keys}

            extra = {"tags": tags} if tags else {}
            got = await values_of_many(face, cache._config.codecs.get(serializer),
                                       list(by_key), face.loader(compute), True,
                                       dict(policy, **extra))
            return {i: got[k] for i, k in key_of.items()}

        async def invalidate(*ids):
            return await face.call("delete_many", [make_key(i) for i in ids])

        wrapper = face.expose(_labelled(call, namespace), like=func)
        wrapper.key = make_key
        wrapper.invalidate = face.expose(invalidate)
        wrapper.original = func
        return wrapper

    return decorate


_POLICY_KEYWORDS = {"ttl", "beta", "lease", "wait", "stale", "stale_if_error",
                    "negative_ttl", "jitter", "on_wait_timeout", "background_refresh",
                    "refresh_ahead", "max_load", "soft_timeout", "hard_timeout",
                    "failsafe_throttle", "tags_never_stale"}


def _validate(ttl, beta=1.0, lease=5.0, wait=5.0, stale=0.0, stale_if_error=0.0,
              negative_ttl=0.0, jitter=0.0, on_wait_timeout="load", background_refresh=None,
              refresh_ahead=None, max_load=None, soft_timeout=None, hard_timeout=None,
              failsafe_throttle=None, tags_never_stale=False):
    """Raises TypeError/ValueError at decoration time rather than on first call."""
    make_policy(ttl, beta, lease, wait, stale, stale_if_error, negative_ttl, jitter,
                on_wait_timeout, background_refresh, refresh_ahead, max_load, soft_timeout,
                hard_timeout, failsafe_throttle, tags_never_stale)
