"""Values as objects, for both faces: the codec (a serializer, optionally
signed with secret=) that turns a loader's result into the bytes C caches
and back, the ttl forms a Cache accepts, and the recovery of an entry the
codec refuses (a miss, recomputed by one caller under the key's lease).

The trust model: the default serializer is pickle, and unpickling runs
code, so whoever can write the Cache's Redis keys could run code in this
process. With secret=, every value is signed (HMAC-SHA256 over the
serializer's name, the Redis key and the bytes) and a value whose
signature does not verify is never decoded: it reads as a miss, is
counted (stats()["refused"]) and recomputed."""
from __future__ import annotations

import collections.abc
import datetime
import hashlib
import hmac
import inspect
import logging
import math
import re
import threading
import time

from ._errors import Error
from ._revalidate import UNCHANGED, Previous, Validated
from ._runtime import Timed
from ._serializers import _serializer
from ._types import Fetched

log = logging.getLogger("xfetch")

_BYTES_LIKE = (bytes, bytearray, memoryview)
_SIGNED = b"\xa5"  # a signed value: this byte, the 32-byte HMAC, the serializer's bytes
_MAC_LEN = 32
# A serializer's bytes end with its name tag: 4 bytes of BLAKE2s of its name,
# then this mark (0xF7 is never in UTF-8 text; pickle ignores what follows its
# STOP, so older pickle readers still read a tagged value). A reader decodes
# only its own tag; serializer="bytes" writes no tag (the bytes C shares).
_TAG_MARK = b"\xf7XS\x01"
_TAG_LEN = 8


# ---- ttl --------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "": 1.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|(?=$))")


def ttl_seconds(ttl, name="ttl"):
    """Seconds (float) from a number of seconds, a datetime.timedelta or a
    string such as "30s", "10m", "2h", "1d", "500ms", "1h30m" or "60"; raises
    TypeError / ValueError."""
    if isinstance(ttl, datetime.timedelta):
        return ttl.total_seconds()
    if isinstance(ttl, str):
        text = ttl.strip().replace(" ", "")
        if not text or _DURATION.sub("", text):
            raise ValueError(f"{name} must be a number of seconds, a timedelta or a duration "
                             f"such as '30s', '10m', '2h', '1d', '500ms', not {ttl!r}")
        return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
    if type(ttl) is bool or not isinstance(ttl, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, a timedelta or a string such "
                        f"as '10m', not {type(ttl).__name__}")
    return ttl


# ---- the codec --------------------------------------------------------------------

class Unreadable(Exception):
    """A cached value the codec will not return: refused (its signature does
    not verify) or undecodable (the serializer cannot read it)."""

    def __init__(self, refused, foreign=False):
        self.refused = refused
        self.foreign = foreign  # written by another serializer (its name tag)


def _secrets(secret):
    """The signing keys from secret=: None, str/bytes, or a list of them
    (the first signs, every one verifies: rotation)."""
    if secret is None:
        return ()
    items = list(secret) if isinstance(secret, (list, tuple)) else [secret]
    keys = []
    for s in items:
        if isinstance(s, str):
            s = s.encode("utf-8")
        if not isinstance(s, bytes):
            raise TypeError(f"secret must be str, bytes or a list of them, "
                            f"not {type(s).__name__}")
        if len(s) < 16:
            raise ValueError("secret must be at least 16 bytes (a random string of 32+ "
                             "characters is best)")
        keys.append(s)
    if not keys:
        raise ValueError("secret must not be an empty list")
    return tuple(keys)


class Codec:
    """One serializer (with the Cache's secret): encode() a loader's result
    to the bytes C caches, decode() them back (raises Unreadable)."""

    def __init__(self, serializer, keys, prefix):
        self.name = serializer if isinstance(serializer, str) else (
            f"{type(serializer).__module__}.{type(serializer).__qualname__}")
        self.dumps, self.loads = _serializer(serializer)
        self.keys = keys
        self.prefix = prefix  # the Redis key is what a signature binds
        # bytes are never decoded, but a bytes reader still refuses another
        # serializer's tagged value: nothing is "raw" (returned unchecked)
        self.raw = False
        self.tag = hashlib.blake2s(self.name.encode(), digest_size=4).digest() + _TAG_MARK
        self.pickle = serializer == "pickle"  # pickle.loads stops before the tag
        self._label = f"serializer={serializer!r}" if isinstance(serializer, str) else (
            f"serializer={self.name}")

    # -- encode

    def _mac(self, key, data, secret):
        msg = b"".join((self.name.encode(), b"\0", self.prefix, key, b"\0", data))
        return hmac.digest(secret, msg, "sha256")

    def encode(self, kb, value):
        """The bytes to cache for a loader's result (None and a Timed's ttl
        kept); raises TypeError naming serializer= for a value it cannot
        encode."""
        if type(value) is Timed:
            return Timed(self.encode(kb, value.value), value.ttl)
        if type(value) is Validated:
            return Validated(self.encode(kb, value.value), value.validator)
        if value is None or value is UNCHANGED or self.raw:
            return value
        if type(value) is memoryview or type(value) is bytearray:
            value = bytes(value)  # bytes-like loaders' values come back as bytes
        if self.dumps is None:
            if not isinstance(value, _BYTES_LIKE):
                raise TypeError(f"the loader must return bytes or None with "
                                f"serializer='bytes', not {type(value).__name__}: pass "
                                f"serializer='pickle' (the default) or 'json' to cache "
                                f"objects")
            data = bytes(value)
        else:
            try:
                data = self.dumps(value)
            except Exception as e:
                raise TypeError(f"{self._label} cannot encode the result (a "
                                f"{type(value).__name__}): {e}; return a value it can "
                                f"encode or pass another serializer=") from e
            if not isinstance(data, _BYTES_LIKE):
                raise TypeError(f"{self._label}: dumps() must return bytes, not "
                                f"{type(data).__name__}")
            data = bytes(data) + self.tag
        if self.keys:
            data = _SIGNED + self._mac(kb, bytes(data), self.keys[0]) + bytes(data)
        return data

    def previous(self, kb, raw):
        """The Previous a loader is given for previous_of's (bytes,
        validator, age), or None (none, or a value this codec refuses)."""
        if raw is None:
            return None
        try:
            return Previous(self.decode(kb, raw[0]), raw[1], raw[2])
        except Unreadable:
            return None

    def loader(self, kb, loader, previous=False):
        """loader wrapped to return encoded bytes (sync: a plain callable);
        previous=True: called with the sink's previous value (previous_of)
        and calling loader(Previous or None)."""
        if previous:
            def wanting(raw=None):
                return self.encode(kb, loader(self.previous(kb, raw)))
            wanting.wants_previous = True
            return wanting
        if self.raw:
            return loader
        return lambda *args: self.encode(kb, loader(*args))

    def async_loader(self, kb, loader, previous=False):
        """loader (plain or async def) wrapped for xfetch.aio."""
        if self.raw and not previous:
            return loader

        async def encoded(*args):
            value = loader(*args)
            if inspect.isawaitable(value):
                value = await value
            return self.encode(kb, value)
        if not previous:
            return encoded

        async def wanting(raw=None):
            return await encoded(self.previous(kb, raw))
        wanting.wants_previous = True
        return wanting

    # -- decode

    def decode(self, kb, data):
        """The object for cached bytes; raises Unreadable. A signed codec
        checks the signature first: a value it refuses is never decoded."""
        if self.raw or data is None:
            return data
        if self.keys:
            if len(data) < 1 + _MAC_LEN or data[:1] != _SIGNED:
                raise Unreadable(True)
            mac, data = data[1:1 + _MAC_LEN], data[1 + _MAC_LEN:]
            if not any(hmac.compare_digest(mac, self._mac(kb, data, s)) for s in self.keys):
                raise Unreadable(True)
        if data[-4:] == _TAG_MARK and len(data) >= _TAG_LEN:
            if self.loads is None or data[-_TAG_LEN:] != self.tag:
                raise Unreadable(False, foreign=True)
            if not self.pickle:
                data = data[:-_TAG_LEN]
        elif self.loads is None:
            return data
        # an untagged value (older versions, C, serializer="bytes") is read as before
        try:
            return self.loads(data)
        except Exception:
            raise Unreadable(False) from None


class Codecs:
    """A Cache's codecs by serializer (its default, the decorators'), with
    the counters of the values they would not return."""

    MAX_LOGGED = 1024

    def __init__(self, serializer, secret, prefix):
        self.keys = _secrets(secret)
        self.prefix = prefix.encode("utf-8") if isinstance(prefix, str) else prefix
        self._by = {}
        self.default = self.get(serializer)
        self.lock = threading.Lock()
        self.refused = self.undecodable = 0
        self._logged = set()

    def get(self, serializer):
        if serializer is None:
            return self.default
        try:
            return self._by[serializer]
        except (KeyError, TypeError):  # TypeError: an unhashable serializer object
            pass
        codec = Codec(serializer, self.keys, self.prefix)
        try:
            self._by[serializer] = codec
        except TypeError:
            pass
        return codec

    def count(self, key, e):
        """Counts (and logs, once per key until the next) a value refused."""
        with self.lock:
            if e.refused:
                self.refused += 1
            else:
                self.undecodable += 1
            first = key not in self._logged
            if first:
                if len(self._logged) >= self.MAX_LOGGED:
                    self._logged.clear()
                self._logged.add(key)
        if not first:
            return
        if e.foreign:
            log.warning("cached value for %r could not be decoded: written by another "
                        "serializer than this Cache's (never decoded); recomputing", key)
        elif e.refused:
            log.warning("cached value for %r is not signed with this Cache's secret: "
                        "refused (never decoded), recomputing", key)
        else:
            log.warning("cached value for %r could not be decoded; recomputing", key)

    def counters(self):
        return {"refused": self.refused, "undecodable": self.undecodable}

    def fetched(self, codec, key, kb, got):
        """got (a Fetched of bytes) decoded by codec; None when codec refuses
        its value (counted): the caller recomputes it (recover)."""
        if codec.raw or got[0] is None:
            return got
        try:
            return Fetched(codec.decode(kb, got[0]), got[1])
        except Unreadable as e:
            self.count(key, e)
            return None

    def read(self, codec, key, data):
        """A get's value: data (None: not found) decoded by codec; a value
        codec refuses is counted and reads as None."""
        if codec.raw or data is None:
            return data
        from ._core import key_bytes
        try:
            return codec.decode(key_bytes(key), data)
        except Unreadable as e:
            self.count(key, e)
            return None

    @staticmethod
    def for_set(codec, key, value):
        """set()'s bytes for value (not None: what a loader returns for not
        found)."""
        if value is None:
            raise TypeError("value must not be None (None is what a loader returns for "
                            "not found)")
        from ._core import key_bytes
        return codec.encode(key_bytes(key), value)


# ---- an entry the codec refuses: a miss, recomputed under the lease ---------------

async def recover(face, codec, key, kb, loader, policy, source=None):
    """The value for key when the cached one was refused (Unreadable),
    without a stampede: beta=inf (pure XFetch, in the call) elects every
    caller, the lease lets one of them recompute and overwrite, and the
    others, served the refused value meanwhile, poll for the new one (up to
    the policy's wait), then compute it themselves. loader is the caller's
    (its result not encoded); returns Fetched."""
    forced = dict(policy, beta=math.inf, background_refresh=False, refresh_ahead=-1.0)
    deadline = time.monotonic() + policy.get("wait", 5.0)
    previous = policy.pop("previous", False)
    forced.pop("previous", None)
    wrapped = (codec.async_loader if face.is_async else codec.loader)(kb, loader, previous)
    for _ in range(3):  # again after the entry expired meanwhile; bounded
        value, source = await face.call("_fetch_raw", key, wrapped, **forced)
        if value is None:
            return Fetched(None, source)
        if source not in ("cache", "stale"):  # this call's loader, or the share's
            return Fetched(codec.decode(kb, value), source)
        while time.monotonic() < deadline:
            try:
                return Fetched(codec.decode(kb, value), source)
            except Unreadable:
                pass
            await face.sleep(0.02)  # another caller holds the lease: wait for it
            try:
                value = await face.call("_get_raw", key)
            except Error:
                break
            if value is None:  # expired or deleted meanwhile: lease again
                break
        else:
            break
    result = loader(None) if previous else loader()  # the refresher is slower: compute it here
    if inspect.isawaitable(result):
        result = await result
    ttl = None
    if type(result) is Timed:
        result, ttl = result.value, result.ttl
        if not ttl:
            return Fetched(result, "uncached" if result is not None else None)
    if type(result) is Validated:
        result = result.value
    if result is UNCHANGED:
        raise ValueError("the loader returned xfetch.UNCHANGED but the cache holds no "
                         "readable previous value for the key (Previous was None)")
    if result is None:
        return Fetched(None, None)
    data = codec.encode(kb, result)
    stored = await face.call("_set_raw", key, data, ttl=ttl if ttl else policy.get("ttl"),
                             **{n: v for n, v in policy.items() if n in ("stale", "jitter")})
    return Fetched(result, "loader" if stored else "uncached")


def _many_loader(codec, loader, batch, is_async):
    """get_many's loader (loader(key), or with batch loader(list of keys)
    returning a mapping) wrapped to return encoded bytes."""
    from ._core import key_bytes

    def encoded(values):
        if not batch:
            return values
        if not isinstance(values, collections.abc.Mapping):
            return values  # the face's own check raises, naming the mapping it wants
        return {k: codec.encode(key_bytes(k), v) for k, v in values.items()}

    if is_async:
        async def load(arg):
            value = loader(arg)
            if inspect.isawaitable(value):
                value = await value
            return encoded(value) if batch else codec.encode(key_bytes(arg), value)
        return load
    return lambda arg: encoded(loader(arg)) if batch else codec.encode(key_bytes(arg), loader(arg))


async def values_of_many(face, codec, keys, loader, batch, policy):
    """get_many with codec: the bytes-level get_many with the loader's
    values encoded, its answers decoded; the keys whose cached value codec
    refuses are counted, computed again (one more loader call with batch)
    and overwritten. Returns {key: value or None}."""
    from ._core import check_loader, key_bytes
    check_loader(loader)
    wrapped = loader if codec.raw else _many_loader(codec, loader, batch, face.is_async)
    got = await face.call("_get_many_raw", keys, wrapped, batch=batch, **policy)
    if codec.raw:
        return got
    out, refused = {}, []
    for k, v in got.items():
        try:
            out[k] = codec.decode(key_bytes(k), v)
        except Unreadable as e:
            face.cache._config.codecs.count(k, e)
            out[k] = None
            refused.append(k)
    if not refused:
        return out
    if batch:
        values = loader(refused)
        if inspect.isawaitable(values):
            values = await values
        results = {k: values.get(k) for k in refused}
    else:
        results = {}
        for k in refused:
            value = loader(k)
            if inspect.isawaitable(value):
                value = await value
            results[k] = value
    extra = {n: v for n, v in policy.items() if n in ("stale", "jitter")}
    for k, value in results.items():
        if type(value) is Timed:
            value = value.value
        out[k] = value
        if value is not None:
            await face.call("_set_raw", k, codec.encode(key_bytes(k), value),
                            policy.get("ttl"), **extra)
    return out
