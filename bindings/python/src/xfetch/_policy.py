"""Policy keyword arguments (seconds) -> xf_policy (milliseconds), validated
in Python so that bad arguments raise before any I/O."""
import inspect
import math
import weakref

from ._native import ffi, lib
from ._values import ttl_seconds

MAX_MS = 1 << 40  # the C side's limit (~34 years)

_ON_WAIT_TIMEOUT = {"load": lib.XF_WAIT_LOAD, "fail": lib.XF_WAIT_FAIL}


def _number(name, v):
    if type(v) is bool or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(v).__name__}")
    if v != v:
        raise ValueError(f"{name} must not be NaN")
    return v


def _ms(name, seconds, min_ms):
    seconds = _number(name, seconds)
    if seconds < 0 or math.isinf(seconds):
        raise ValueError(f"{name} must be finite and >= 0, not {seconds!r}")
    ms = round(seconds * 1000)
    if ms < min_ms or ms > MAX_MS:
        raise ValueError(f"{name} must be in [{min_ms / 1000:g} s, 2**40 ms], not {seconds!r} s")
    return ms


def check_refresh_ahead(refresh_ahead):
    """None (the default: rate-aware, factor 1.5) -> 0.0; a finite number:
    > 0 the rate-aware factor (refresh once remaining ttl <= refresh_ahead x
    the loader's time), < 0 pure XFetch (beta), 0 the default. Raises
    TypeError / ValueError."""
    if refresh_ahead is None:
        return 0.0
    if type(refresh_ahead) is bool or not isinstance(refresh_ahead, (int, float)):
        raise TypeError(f"refresh_ahead must be None or a number, "
                        f"not {type(refresh_ahead).__name__}")
    if refresh_ahead != refresh_ahead or math.isinf(refresh_ahead):
        raise ValueError(f"refresh_ahead must be finite, not {refresh_ahead!r}")
    return float(refresh_ahead)


def _optional_ms(name, seconds):
    """None -> 0 (the C default); else seconds as _ms (at least 1 ms)."""
    return 0 if seconds is None else _ms(name, seconds, 1)


def make_policy(ttl, beta, lease, wait, stale, stale_if_error, negative_ttl, jitter,
                on_wait_timeout, background_refresh=True, refresh_ahead=None,
                max_load=None, soft_timeout=None, hard_timeout=None, failsafe_throttle=None,
                tags_never_stale=False, compress_min_bytes=0):
    """Returns a new xf_policy cdata; raises TypeError / ValueError.
    compress_min_bytes: C policy.compress_min_bytes (the Cache's; 0 off).
    background_refresh: True (None too: both faces take refreshes) = an
    early refresh this call wins runs off the call (C XF_BACKGROUND_ON);
    False = in the call (XF_BACKGROUND_OFF).
    refresh_ahead: C policy.refresh_ahead (check_refresh_ahead). max_load,
    soft_timeout, hard_timeout, failsafe_throttle: seconds or None (C's 0: the
    default, none). tags_never_stale: True or False (C
    policy.tags_never_stale)."""
    if background_refresh is not None and type(background_refresh) is not bool:
        raise TypeError(f"background_refresh must be True or False, not {background_refresh!r}")
    if type(tags_never_stale) is not bool:
        raise TypeError(f"tags_never_stale must be True or False, not {tags_never_stale!r}")
    refresh_ahead = check_refresh_ahead(refresh_ahead)
    beta = _number("beta", beta)
    if beta < 0:
        raise ValueError(f"beta must be >= 0 (math.inf allowed), not {beta!r}")
    jitter = _number("jitter", jitter)
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), not {jitter!r}")
    soft = _optional_ms("soft_timeout", soft_timeout)
    hard = _optional_ms("hard_timeout", hard_timeout)
    if soft and hard and soft > hard:
        raise ValueError(f"soft_timeout ({soft_timeout!r} s) must not exceed hard_timeout "
                         f"({hard_timeout!r} s)")
    if on_wait_timeout not in _ON_WAIT_TIMEOUT:
        raise ValueError(f"on_wait_timeout must be 'load' or 'fail', not {on_wait_timeout!r}")
    return ffi.new("xf_policy *", {
        "ttl_ms": _ms("ttl", ttl_seconds(ttl), 1),
        "beta": float(beta),
        "lease_ms": _ms("lease", lease, 1),
        "wait_ms": _ms("wait", wait, 0),
        "stale_ms": _ms("stale", stale, 0),
        "stale_if_error_ms": _ms("stale_if_error", stale_if_error, 0),
        "negative_ttl_ms": _ms("negative_ttl", negative_ttl, 0),
        "jitter": float(jitter),
        "on_wait_timeout": _ON_WAIT_TIMEOUT[on_wait_timeout],
        "background_refresh": (lib.XF_BACKGROUND_OFF if background_refresh is False
                               else lib.XF_BACKGROUND_ON),
        "refresh_ahead": refresh_ahead,
        "max_load_ms": _optional_ms("max_load", max_load),
        "soft_timeout_ms": soft, "hard_timeout_ms": hard,
        "failsafe_throttle_ms": _optional_ms("failsafe_throttle", failsafe_throttle),
        "compress_min_bytes": compress_min_bytes,
        "tags_never_stale": int(tags_never_stale),
    })


def check_call_keywords(policy):
    """Refuses a keyword get_or_compute does not take (a mapping's keys)."""
    unknown = set(policy) - CALL_KEYWORDS
    if unknown:
        raise TypeError(f"unknown policy keyword(s): {', '.join(sorted(unknown))}")


class PolicyCache:
    """Memoizes make_policy per argument tuple: the hot path pays one dict
    lookup. Keys carry each argument's type, so True never hits the entry of 1."""

    MAX = 256

    def __init__(self, background_refresh=True, refresh_ahead=None, ttl=None,
                 compress_min_bytes=0):
        self._cache = {}
        self.compress_min_bytes = compress_min_bytes  # every policy's (the Cache's)
        self._defaults = (background_refresh, refresh_ahead)  # the Cache's
        self.ttl = ttl  # the Cache's default ttl (None: every call names one)
        self.commons = {}  # (ttl, beta, type(ttl), type(beta)) -> policy
        self.keep = None  # (loader_ud_keep, loader_ud_drop) every policy carries

    def common(self, ttl, beta):
        """The policy of a call passing ttl and beta only (the others their
        defaults, the Cache's background_refresh and refresh_ahead), kept in
        self.commons (plan looks it up there)."""
        p = self.get((ttl, beta, 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, "load") + self._defaults)
        if len(self.commons) >= self.MAX:
            self.commons.clear()
        self.commons[(ttl, beta, type(ttl), type(beta))] = p
        return p

    def plan(self, ttl, beta, tags):
        """The policy of a call passing ttl, beta and tags only (the common
        calls): the faces' hot path, one lookup in self.commons."""
        p = self.commons.get((ttl, beta, type(ttl), type(beta)))
        if p is None:
            p = self.common(ttl, beta)
        return p if tags is None else tagged(p, tag_names(tags))

    def of_call(self, ttl, beta=1.0, lease=5.0, wait=5.0, stale=0.0, stale_if_error=0.0,
                negative_ttl=0.0, jitter=0.0, on_wait_timeout="load", background_refresh=None,
                refresh_ahead=None, tags=None, max_load=None, soft_timeout=None,
                hard_timeout=None, failsafe_throttle=None, tags_never_stale=False):
        """A get-or-compute's policy, the same on both faces: its keywords
        (background_refresh and refresh_ahead None: the Cache's), tagged
        with tags (tag_names)."""
        names = tag_names(tags)
        if background_refresh is None:
            background_refresh = self._defaults[0]
        if refresh_ahead is None:
            refresh_ahead = self._defaults[1]
        return tagged(self.get((ttl, beta, lease, wait, stale, stale_if_error, negative_ttl,
                                jitter, on_wait_timeout, background_refresh, refresh_ahead,
                                max_load, soft_timeout, hard_timeout, failsafe_throttle,
                                tags_never_stale)),
                      names)

    # The keywords whose loads need a get-or-compute per key: the batch driver
    # runs its loads in the calling thread one after the other, with no
    # worker to hand a load to at a soft or hard timeout and no renewals.
    PER_KEY = ("max_load", "soft_timeout", "hard_timeout")

    def of_many(self, ttl, beta, policy):
        """get_many's policy, the same on both faces: policy (a mapping) holds
        get_or_compute's keywords, checked as of_call checks them, before any
        I/O. Returns (the batch driver's policy: background_refresh off, as
        the batch refreshes in the call; per_key: True when a PER_KEY keyword
        is set, so the keys go through a get-or-compute each)."""
        check_call_keywords(policy)
        self.of_call(ttl, beta, **policy)
        per_key = any(policy.get(name) is not None for name in self.PER_KEY)
        return self.of_call(ttl, beta, **dict(policy, background_refresh=False)), per_key

    def of_set(self, ttl, stale, jitter, tags):
        """A set's policy (its value written as if a loader returned it now)."""
        names = tag_names(tags)
        return tagged(self.get((ttl, 1.0, 5.0, 5.0, stale, 0.0, 0.0, jitter, "load")), names)

    def get(self, args):
        key = args + tuple(map(type, args))
        p = self._cache.get(key)
        if p is None:
            if args[0] is None:  # ttl omitted: the Cache's
                if self.ttl is None:
                    raise TypeError("ttl is required: pass ttl= or give the Cache a default "
                                    "(Cache(ttl=...) or cache.setup(url, ttl=...))")
                args = (self.ttl,) + args[1:]
            p = make_policy(*args, compress_min_bytes=self.compress_min_bytes)
            if self.keep is not None:
                p.loader_ud_keep, p.loader_ud_drop = self.keep
            if len(self._cache) >= self.MAX:
                self._cache.clear()
            self._cache[key] = p
        return p


# get_or_compute's keywords after ttl and beta: of_call's, so they cannot drift
CALL_KEYWORDS = frozenset(inspect.signature(PolicyCache.of_call).parameters) - {
    "self", "ttl", "beta"}


def tag_names(tags):
    """tags (None, or a sequence of str/bytes; a single str is refused: it
    would be a sequence of characters) -> a tuple of bytes, checked as C
    checks them (at most XF_MAX_TAGS names of 1 to XF_MAX_TAG_LEN bytes, no
    NUL). Raises TypeError / ValueError."""
    if tags is None:
        return ()
    if isinstance(tags, (str, bytes)):
        raise TypeError("tags must be a sequence of names, not a single "
                        f"{type(tags).__name__}")
    try:
        given = tuple(tags)  # once: tags may be an iterator
    except TypeError:
        raise TypeError(f"tags must be a sequence of names, not {type(tags).__name__}") \
            from None
    try:
        names = _NAMES.get(given)
    except TypeError:  # an unhashable name: refused below
        names = None
    if names is not None:
        return names
    try:
        names = tuple(t.encode() if isinstance(t, str) else t for t in given)
    except TypeError:
        raise TypeError(f"tags must be a sequence of names, not {type(tags).__name__}") \
            from None
    if len(names) > lib.XF_MAX_TAGS:
        raise ValueError(f"{len(names)} tags, above {lib.XF_MAX_TAGS}")
    for t in names:
        if type(t) is not bytes:
            raise TypeError(f"a tag must be str or bytes, not {type(t).__name__}")
        if not 0 < len(t) <= lib.XF_MAX_TAG_LEN or b"\0" in t:
            raise ValueError(f"a tag must be 1 to {lib.XF_MAX_TAG_LEN} bytes without NUL, "
                             f"not {t!r}")
    if len(_NAMES) >= _TAGGED_MAX:
        _NAMES.clear()
    _NAMES[given] = names
    return names


_NAMES = {}  # names as given (a tuple) -> checked, as bytes


def tag_array(names):
    """A `const char *[]` of names (bytes) for C, and what keeps it alive."""
    strings = [ffi.new("char[]", t) for t in names]
    return ffi.new("const char *[]", strings), strings


def tagged(policy, names):
    """A copy of xf_policy cdata policy carrying names (a tag_names tuple);
    the returned cdata keeps the names alive while it is referenced (C copies
    them when the call starts). The same policy and names give the same
    copy (a memo of up to _TAGGED_MAX, emptied when full): a tagged near hit
    costs no allocation."""
    if not names:
        return policy
    memo = (policy, names)
    p = _TAGGED.get(memo)
    if p is not None:
        return p
    p = ffi.new("xf_policy *", policy[0])
    array, strings = tag_array(names)
    p.tags = array
    p.ntags = len(names)
    _KEEP[p] = (array, strings)
    if len(_TAGGED) >= _TAGGED_MAX:
        _TAGGED.clear()
    _TAGGED[memo] = p
    return p


_TAGGED = {}  # (a memoized policy, names) -> its tagged copy
_TAGGED_MAX = 1024
_KEEP = weakref.WeakKeyDictionary()  # a tagged policy -> its names' C strings
