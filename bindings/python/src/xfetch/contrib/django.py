"""A Django cache backend on xfetch:

    CACHES = {"default": {
        "BACKEND": "xfetch.contrib.django.XFetchCache",
        "LOCATION": "redis://127.0.0.1:6379/0",   # rediss://..., or cluster seeds
        "TIMEOUT": 300, "KEY_PREFIX": "shop", "VERSION": 1,
        "OPTIONS": {"near_cache_bytes": 64 << 20},  # xfetch.Cache's keywords
    }}

Django's BaseCache API (3.2) on xfetch.Cache. get_or_set is xfetch's
get_or_compute: across every process, one caller runs the default callable
for a missing key while the others wait for its value, and a hot key is
refreshed once before it expires. Keys are Django's (make_key: KEY_PREFIX,
VERSION, KEY_FUNCTION); values are pickled by this backend (ints too: incr
and decr read and write, as Django's BaseCache does); clear() invalidates
the entries of this backend's xfetch namespace (OPTIONS prefix, shared by
every backend on the LOCATION with the same one, whatever its KEY_PREFIX),
never other keys.
"""
from __future__ import annotations

import math
import pickle
import threading

from asgiref.sync import sync_to_async
from django.core.cache.backends.base import (DEFAULT_TIMEOUT, MEMCACHE_MAX_KEY_LENGTH,
                                             BaseCache)
from django.core.exceptions import ImproperlyConfigured

import xfetch

from .._policy import MAX_MS
from .._url import SSL_NAMES
from ._foreign import ForeignKeys

FOREVER = MAX_MS // 1000  # timeout None: the longest ttl xfetch takes (about 34 years)
# Django's generic OPTIONS that mean nothing on Redis (it evicts by maxmemory)
_DJANGO_ONLY = {"max_entries", "cull_frequency"}
_shared: dict = {}
_shared_lock = threading.Lock()


def _not_found(key):
    return None  # get_many's loader: a miss computes nothing, caches nothing


def location_url(location) -> str:
    """LOCATION as one xfetch URL: a redis://, rediss:// or unix:// URL (a
    comma-separated host list in it is a seed list), or a list of URLs or
    host:port seeds of one deployment (their scheme, credentials, db and
    parameters are the first URL's)."""
    if isinstance(location, str):
        return location
    seeds = list(location)
    if not seeds or not all(isinstance(s, str) for s in seeds):
        raise ImproperlyConfigured("LOCATION must be a URL or a non-empty list of URLs or "
                                   f"host:port seeds, not {location!r}")
    first = seeds[0] if "://" in seeds[0] else "redis://" + seeds[0]
    scheme, _, rest = first.partition("://")
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    user, at, _ = netloc.rpartition("@")
    hosts = []
    for s in seeds:
        host = s.partition("://")[2] if "://" in s else s
        host = host.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
        hosts.append(host)
    return f"{scheme}://{user}{at}{','.join(hosts)}{tail}"


def _options(options: dict) -> tuple[dict, float | None]:
    """OPTIONS -> (xfetch.Cache keywords, get_or_set's refresh_ahead)."""
    kw = {}
    for name, value in options.items():
        low = name.lower()
        if low in _DJANGO_ONLY:
            continue
        if low == "serializer":
            raise ImproperlyConfigured("XFetchCache pickles values as Django's backends do: "
                                       "OPTIONS takes no serializer")
        kw[low] = value
    refresh_ahead = kw.pop("refresh_ahead", None)
    kw["refresh_ahead"] = -1.0  # get_many's reads never elect an early refresh
    kw.setdefault("namespace_tag", True)  # clear()
    kw.setdefault("background_refresh", False)  # the default callable runs in the call
    kw["serializer"] = "bytes"  # pickled here: None is a value to Django
    return kw, refresh_ahead


def _shared_cache(url: str, kw: dict) -> tuple[xfetch.Cache, ForeignKeys]:
    """One xfetch.Cache (and one ForeignKeys) per LOCATION and OPTIONS in the
    process: Django makes a backend per thread, and they share its
    connections, near cache and single-flight. A closed one is replaced."""
    key = (url, tuple(sorted((k, repr(v)) for k, v in kw.items())))
    with _shared_lock:
        got = _shared.get(key)
        if got is None or getattr(got[0], "_closed", True):
            foreign = got[1] if got else ForeignKeys(url, {k: kw.get(k) for k in SSL_NAMES})
            got = _shared[key] = (xfetch.Cache(url, **kw), foreign)
        return got


class XFetchCache(BaseCache):
    """Django's cache API on xfetch.Cache (LOCATION: the URL; OPTIONS: its
    keywords). Timeouts: None = forever, 0 or less (or under a millisecond)
    = expire at once (set deletes, add and get_or_set store nothing),
    DEFAULT_TIMEOUT = TIMEOUT. A value that does not unpickle (another code
    version) is a miss to get, has_key, add and touch alike.
    A key another backend wrote under the same name reads as a miss, and
    set, add, get_or_set and delete replace it. self.xfetch is the
    underlying xfetch.Cache (stats(), events)."""

    def __init__(self, server, params):
        super().__init__(params)
        self._url = location_url(server)
        self._kw, self._refresh_ahead = _options(params.get("OPTIONS") or {})
        self._namespace = bool(self._kw["namespace_tag"])
        self._xf = self._foreign = None
        # BaseCache.validate_key warns about a key memcached refuses: longer
        # than 250 characters, or one below 33 or 127. A short printable key
        # without a space has none, so _key skips the per-character loop.
        self._plain_validation = type(self).validate_key is BaseCache.validate_key

    @property
    def xfetch(self) -> xfetch.Cache:
        xf = self._xf
        if xf is None or xf._closed:
            xf, self._foreign = _shared_cache(self._url, self._kw)
            self._xf = xf
        return xf

    # ---- helpers ----------------------------------------------------------------

    def _key(self, key, version=None):
        key = self.make_key(key, version=version)
        if not (self._plain_validation and type(key) is str
                and len(key) <= MEMCACHE_MAX_KEY_LENGTH and key.isprintable()
                and " " not in key):
            self.validate_key(key)  # Django's check warns (CacheKeyWarning)
        return key

    def _ttl(self, timeout):
        """Django's timeout -> xfetch's ttl in seconds, or None: expire at
        once. A timeout under a millisecond (xfetch's shortest ttl; e.g. a
        computed expires_at - now) is as good as reached: expire at once."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return FOREVER
        if timeout < 0.001:
            return None
        return min(float(timeout), FOREVER)

    def _read(self, k):
        """The bytes cached under the made key k, or None (a miss, or a key
        another program wrote)."""
        try:
            return self._read_strict(k)
        except xfetch.WrongTypeError:
            return None

    def _read_strict(self, k):
        """_read, raising WrongTypeError for a key another program wrote.
        With namespace_tag, xfetch's get reads the namespace's version too
        (with the entry on standalone Redis) and misses an entry written
        before clear()."""
        return self.xfetch.get(k)

    def _replacing(self, k, write):
        """write(), once more after removing k if another program wrote it."""
        try:
            return write()
        except xfetch.WrongTypeError:
            self._remove_foreign(k)
            return write()

    def _remove_foreign(self, k):
        """DEL of k, a key another program wrote (see _foreign)."""
        if self._foreign is None or self._xf is None:
            self.xfetch  # noqa: B018 - made with the xfetch.Cache it goes with
        self._foreign.remove(k)

    @staticmethod
    def _readable(data):
        """Whether data unpickles (get's hit, not its default)."""
        try:
            pickle.loads(data)
            return True
        except Exception:
            return False

    @staticmethod
    def _value(data, default):
        if data is None:
            return default
        try:
            return pickle.loads(data)
        except Exception:  # not ours to read (another serializer, another code version)
            return default

    # ---- BaseCache --------------------------------------------------------------

    def get(self, key, default=None, version=None):
        k = self._key(key, version)
        xf = self._xf
        if xf is None or xf._closed:
            xf = self.xfetch
        try:
            data = xf.get(k)
        except xfetch.WrongTypeError:  # a key another program wrote
            return default
        if data is None:
            return default
        try:
            return pickle.loads(data)
        except Exception:  # not ours to read (another serializer, another code version)
            return default

    def has_key(self, key, version=None):
        """Whether get would find a value: a value that does not unpickle is
        a miss here too."""
        return self._found(self._key(key, version))

    def _found(self, k):
        data = self._read(k)
        return data is not None and self._readable(data)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        k, ttl = self._key(key, version), self._ttl(timeout)
        if ttl is None:  # expire at once
            self._replacing(k, lambda: self.xfetch.delete(k))
            return
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        self._replacing(k, lambda: self.xfetch.set(k, data, ttl))

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        """Stores value when key holds none; True when this call stored it.
        Under the key's lease: of concurrent adds, in any process, one wins."""
        k, ttl = self._key(key, version), self._ttl(timeout)
        if ttl is None:
            return not self._found(k)
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        got = self._replacing(k, lambda: self.xfetch.fetch(
            k, lambda: data, ttl, beta=0.0, refresh_ahead=-1.0, background_refresh=False))
        if got.source == "loader":
            return True
        if got.source != "cache" or self._readable(got.value):
            return False
        return self._add_over_unreadable(k, data, ttl)

    def _add_over_unreadable(self, k, data, ttl):
        """add over an entry whose value does not unpickle (a miss to get,
        which would otherwise block add until it expires): a refresh of it
        forced (beta inf) under the key's lease, so of concurrent adds one
        stores. Its loader keeps the entry (UNCHANGED) when another add
        already made it readable: then this add stored nothing."""
        present = []

        def load(previous):
            if previous is not None and self._readable(previous.value):
                present.append(True)
                return xfetch.UNCHANGED
            return data
        got = self.xfetch.fetch(k, load, ttl, beta=math.inf, refresh_ahead=-1.0,
                                background_refresh=False, previous=True)
        return got.source == "loader" and not present

    def get_or_set(self, key, default, timeout=DEFAULT_TIMEOUT, version=None):
        """The cached value, else default (called if callable) cached and
        returned: xfetch's get_or_compute, so one caller in the fleet runs
        default() for a missing key while the others wait for its value, and
        a hot key is refreshed by one caller shortly before it expires."""
        k, ttl = self._key(key, version), self._ttl(timeout)

        def load():
            return pickle.dumps(default() if callable(default) else default,
                                pickle.HIGHEST_PROTOCOL)
        if ttl is None:  # nothing is stored: computed for this caller
            value = self._value(self._read(k), BaseCache._missing_key)
            return pickle.loads(load()) if value is BaseCache._missing_key else value
        data = self._replacing(k, lambda: self.xfetch.get_or_compute(
            k, load, ttl, refresh_ahead=self._refresh_ahead))
        try:
            return pickle.loads(data)
        except Exception:  # an entry it cannot read: computed again, overwritten
            data = load()
            self._replacing(k, lambda: self.xfetch.set(k, data, ttl))
            return pickle.loads(data)

    async def aget_or_set(self, key, default, timeout=DEFAULT_TIMEOUT, version=None):
        """get_or_set, awaited: run in a thread of asgiref's pool, so one
        caller in the fleet runs default() while the others wait (Django 4's
        BaseCache.aget_or_set would call it in every caller that misses)."""
        return await sync_to_async(self.get_or_set, thread_sensitive=False)(
            key, default, timeout, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        """Gives the key a new timeout (a read and a write, not atomic);
        False for a key get misses (a value that does not unpickle too)."""
        k, ttl = self._key(key, version), self._ttl(timeout)
        data = self._read(k)
        if data is None or not self._readable(data):
            return False
        if ttl is None:
            self.xfetch.delete(k)
        else:
            self.xfetch.set(k, data, ttl)
        return True

    def delete(self, key, version=None):
        return self._delete(self._key(key, version))

    def _delete(self, k):
        """Removes k; whether a value was there. A key another program wrote
        (the read or xfetch's delete refuses its type) is removed too."""
        try:
            existed = self._read_strict(k) is not None
            self.xfetch.delete(k)
        except xfetch.WrongTypeError:
            self._remove_foreign(k)
            return True
        return existed

    def incr(self, key, delta=1, version=None):
        """Adds delta to the cached number (a read and a write, as Django's
        BaseCache does: not atomic across callers); the value keeps the
        default timeout. ValueError when the key holds nothing."""
        k = self._key(key, version)
        value = self._value(self._read(k), BaseCache._missing_key)
        if value is BaseCache._missing_key:
            raise ValueError("Key '%s' not found" % key)
        value = value + delta
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        ttl = self._ttl(DEFAULT_TIMEOUT)
        if ttl is None:
            self.xfetch.delete(k)
        else:
            self.xfetch.set(k, data, ttl)
        return value

    def decr(self, key, delta=1, version=None):
        return self.incr(key, -delta, version=version)

    def get_many(self, keys, version=None):
        """The keys found, {key: value}; one batch of reads (one MGET per
        Redis Cluster node with the default entry format)."""
        made = {self._key(key, version): key for key in keys}
        if not made:
            return {}
        try:
            # a get-or-compute per key whose loader finds nothing: never
            # elected early (beta 0 and the Cache's refresh_ahead -1), never
            # waiting for another caller's load (wait 0)
            raw = self.xfetch.get_many(list(made), _not_found, 1.0, beta=0.0, wait=0.0,
                                       background_refresh=False)
        except xfetch.WrongTypeError:  # another program's key among them: one by one
            raw = {k: self._read(k) for k in made}
        out = {}
        for k, data in raw.items():
            value = self._value(data, BaseCache._missing_key)
            if value is not BaseCache._missing_key:
                out[made[k]] = value
        return out

    def set_many(self, data, timeout=DEFAULT_TIMEOUT, version=None):
        for key, value in data.items():
            self.set(key, value, timeout=timeout, version=version)
        return []

    def delete_many(self, keys, version=None):
        made = [self._key(key, version) for key in keys]
        try:
            self.xfetch.delete_many(made)
        except xfetch.WrongTypeError:  # another program's key among them
            for k in made:
                self._delete(k)

    def clear(self):
        """Invalidates every entry of this backend's xfetch namespace (its
        OPTIONS prefix, "" by default) in O(1), in every process: those of
        another alias on the same LOCATION and prefix too, whatever its
        KEY_PREFIX (Django's RedisCache empties the db); other keys on the
        server stay. Needs namespace_tag (on unless OPTIONS turns it off)."""
        if not self._namespace:
            raise NotImplementedError("clear() needs OPTIONS namespace_tag=True")
        self.xfetch.clear()

    def close(self, **kwargs):
        """Django calls it at the end of every request: the connections stay
        pooled for the next one (self.xfetch.close() closes them)."""
