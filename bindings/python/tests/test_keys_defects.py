"""Issue 17's key and decorator defects, each reproduced against a real
redis-server, on both faces (xfetch.Cache and xfetch.aio.Cache) where the
behaviour is shared: closures and lambdas, classmethods through a subclass,
functools.partial, str/number/bytes subclasses and flags, JSON of mixed
keys, cached_many ids that render one key, over-long default keys,
generator functions, and the decorator's types under mypy --strict."""
import asyncio
import enum
import functools
import os
import shutil
import subprocess
import sys

import pytest

import xfetch
import xfetch.aio

HERE = os.path.dirname(os.path.abspath(__file__))


class Face:
    """One face of the decorator: .cached as the Cache has it, .run(x)
    returns a sync call's value or awaits an aio call's coroutine on one
    event loop for the whole test."""

    def __init__(self, kind, cache, loop=None):
        self.kind, self.cache, self.loop = kind, cache, loop
        self.aio = kind == "aio"

    def run(self, x):
        return self.loop.run_until_complete(x) if self.aio else x


@pytest.fixture(params=["sync", "aio"])
def face(request, server, admin, prefix):
    if request.param == "sync":
        c = xfetch.Cache(server.url, prefix=prefix, seed=42)
        yield Face("sync", c)
        c.close()
    else:
        loop = asyncio.new_event_loop()
        c = xfetch.aio.Cache(server.url, prefix=prefix, seed=42)
        yield Face("aio", c, loop)
        loop.run_until_complete(c.close())
        loop.close()


# ---- 1. closures and lambdas ---------------------------------------------------

def make_price_lookup(face, currency, **options):
    """A factory: every function it makes has the qualname
    make_price_lookup.<locals>.price, but each computes in its currency."""
    rate = {"USD": 1, "EUR": 2}[currency]
    if face.aio:
        async def price(item):
            return b"%s %d" % (currency.encode(), 10 * rate * item)
    else:
        def price(item):
            return b"%s %d" % (currency.encode(), 10 * rate * item)
    return face.cache.cached(ttl=60, **options)(price)


def test_closures_of_one_factory_are_refused_without_key_or_namespace(face):
    with pytest.raises(TypeError, match=r"<locals>.*key=.*namespace="):
        make_price_lookup(face, "USD")
    usd = make_price_lookup(face, "USD", namespace="USD")
    eur = make_price_lookup(face, "EUR", namespace="EUR")
    assert face.run(usd(1)) == b"USD 10"
    assert face.run(eur(1)) == b"EUR 20"
    eur_by_key = make_price_lookup(face, "EUR", key="price:EUR:{item}")
    assert face.run(eur_by_key(2)) == b"EUR 40"


def test_lambdas_are_refused_without_key_or_namespace(cache):
    # (an async lambda does not exist: xfetch.aio refuses any non-async def)
    with pytest.raises(TypeError, match=r"<lambda>.*key=.*namespace="):
        cache.cached(ttl=60)(lambda x: b"a%d" % x)
    a = cache.cached(ttl=60, namespace="a")(lambda x: b"a%d" % x)
    b = cache.cached(ttl=60, namespace="b")(lambda x: b"b%d" % x)
    assert (a(3), b(3)) == (b"a3", b"b3")


# ---- 2. classmethods, subclasses, partial ----------------------------------------

def test_a_classmethod_called_through_a_subclass_keys_by_that_class(face):
    # namespace=: the classes are local to the test (item 1)
    deco = face.cache.cached(ttl=60, namespace="t", serializer="json")

    if face.aio:
        class Base:
            kind = "base"

            @classmethod
            @deco
            async def describe(cls, item):
                return f"{cls.kind}:{item}"
    else:
        class Base:
            kind = "base"

            @classmethod
            @deco
            def describe(cls, item):
                return f"{cls.kind}:{item}"

    class Special(Base):
        kind = "special"

    assert face.run(Base.describe(1)) == "base:1"
    assert face.run(Special.describe(1)) == "special:1"
    assert face.run(Special().describe(1)) == "special:1"
    k = Special.describe.key(1)
    assert ".Special, item=1)" in k and ".Base.describe(cls=" in k, k


def test_an_instance_method_shares_its_entry_with_subclass_instances(face):
    """Documented, not changed: self is left out of the key, so instances of
    a subclass share the base method's entries (give key= when the result
    depends on the instance)."""
    deco = face.cache.cached(ttl=60, namespace="t", serializer="json")

    if face.aio:
        class Base:
            kind = "base"

            @deco
            async def describe(self, item):
                return f"{self.kind}:{item}"
    else:
        class Base:
            kind = "base"

            @deco
            def describe(self, item):
                return f"{self.kind}:{item}"

    class Special(Base):
        kind = "special"

    assert face.run(Base().describe(1)) == "base:1"
    assert face.run(Special().describe(1)) == "base:1"
    assert Special().describe.key(1) == Base().describe.key(1)


def test_a_partial_is_refused_with_a_type_error(face):
    if face.aio:
        async def price(currency, item):
            return b"x"
    else:
        def price(currency, item):
            return b"x"
    with pytest.raises(TypeError, match="partial"):
        face.cache.cached(ttl=60)(functools.partial(price, "USD"))
    with pytest.raises(TypeError, match="partial"):
        face.cache.cached(ttl=60, key="p:{item}")(functools.partial(price, "USD"))


# ---- 3. subclasses and flags in arguments ---------------------------------------

class ApiToken(str):
    """A token that never prints itself."""

    def __str__(self):
        return "ApiToken(***)"

    __repr__ = __str__


class Masked(int):
    def __repr__(self):
        return "Masked(***)"

    __str__ = __repr__


class MaskedFloat(float):
    def __repr__(self):
        return "***"


class Blob(bytes):
    def __bytes__(self):
        return b"***"

    def __repr__(self):
        return "Blob(***)"


class Perm(enum.IntFlag):
    R = 4
    W = 2
    X = 1


class Mode(enum.Flag):
    A = 1
    B = 2


ColorA = enum.Enum("Color", ["RED"], module="shop.a")
ColorB = enum.Enum("Color", ["RED"], module="shop.b")


def test_a_str_subclass_is_keyed_by_its_text_not_its_str(face):
    calls = []
    if face.aio:
        async def whoami(token):
            calls.append(str.__str__(token))
            return str.__str__(token).split("-")[0].encode()
    else:
        def whoami(token):
            calls.append(str.__str__(token))
            return str.__str__(token).split("-")[0].encode()
    whoami = face.cache.cached(ttl=60, namespace="t")(whoami)
    assert face.run(whoami(ApiToken("alice-secret"))) == b"alice"
    assert face.run(whoami(ApiToken("bob-secret"))) == b"bob", "not alice's entry"
    assert calls == ["alice-secret", "bob-secret"]


@pytest.mark.parametrize("a, b", [
    (Perm(0), Perm.R | Perm.W),
    (Perm(0), Perm(8)),            # IntFlag keeps unnamed bits
    (Mode(0), Mode.A | Mode.B),
    (Masked(1), Masked(2)),
    (MaskedFloat(1.5), MaskedFloat(2.5)),
    (Blob(b"alice"), Blob(b"bob")),
    (ColorA.RED, ColorB.RED),      # one class name, two modules
], ids=["intflag-combination", "intflag-unnamed", "flag", "int-repr", "float-repr",
        "bytes-dunder", "enum-module"])
def test_distinct_subclass_and_flag_arguments_get_distinct_keys(face, a, b):
    calls = []
    if face.aio:
        async def f(x):
            calls.append(x)
            return b"%d" % len(calls)
    else:
        def f(x):
            calls.append(x)
            return b"%d" % len(calls)
    f = face.cache.cached(ttl=60, namespace="t")(f)
    assert f.key(a) != f.key(b)
    assert (face.run(f(a)), face.run(f(b))) == (b"1", b"2")
    assert face.run(f(a)) == b"1" and len(calls) == 2


def test_subclass_arguments_key_as_their_value(face):
    """The canonical text of a subclass is its base value's: the same key as
    the plain value, and no text the subclass chose."""
    if face.aio:
        async def f(x):
            return b"x"
    else:
        def f(x):
            return b"x"
    f = face.cache.cached(ttl=60, namespace="t")(f)
    assert f.key(ApiToken("abc")) == f.key("abc")
    assert f.key(Masked(7)) == f.key(7)
    assert f.key(MaskedFloat(1.5)) == f.key(1.5)
    assert f.key(Blob(b"abc")) == f.key(b"abc")
    assert "***" not in f.key([Masked(1), MaskedFloat(2.0), Blob(b"x"), ApiToken("y")])
    assert f.key(Perm.R | Perm.W).endswith(f"{__name__}.Perm(6))")


# ---- 7. JSON of a dict with mixed key types -----------------------------------

def test_json_serializer_caches_a_dict_with_mixed_key_types(face):
    calls = []
    if face.aio:
        async def totals(n):
            calls.append(n)
            return {1: "a", "total": n}
    else:
        def totals(n):
            calls.append(n)
            return {1: "a", "total": n}
    totals = face.cache.cached(ttl=60, namespace="t", serializer="json")(totals)
    assert face.run(totals(5)) == {"1": "a", "total": 5}  # JSON's own str keys
    assert face.run(totals(5)) == {"1": "a", "total": 5}
    assert calls == [5], "cached, not recomputed on every call"


# ---- 8. cached_many ids that render one key -------------------------------------

def test_cached_many_returns_every_id_given_when_two_render_one_key(cache):
    seen = []

    @cache.cached_many(ttl=60, key="user:{}", serializer="json")
    def users(ids):
        seen.append(list(ids))
        return {i: {"id": str(i)} for i in ids}

    out = users(["7", 7, 8])
    assert list(out) == ["7", 7, 8]
    assert out["7"] == out[7] == {"id": "7"}
    again = users([7, "7"])
    assert list(again) == [7, "7"] and again[7] == again["7"] == {"id": "7"}
    assert len(seen) == 1


# ---- 9. default keys longer than the cache takes ------------------------------

def test_a_long_default_key_is_hashed_and_the_call_works(face, admin, prefix):
    calls = []
    if face.aio:
        async def total(xs):
            calls.append(1)
            return b"%d" % sum(xs)
    else:
        def total(xs):
            calls.append(1)
            return b"%d" % sum(xs)
    total = face.cache.cached(ttl=60, namespace="t", version=2)(total)
    xs = list(range(20000))
    assert face.run(total(xs)) == b"%d" % sum(xs)
    assert face.run(total(xs)) == b"%d" % sum(xs)
    assert len(calls) == 1
    k = total.key(xs)
    head, digest = k.rsplit(":sha256:", 1)
    assert head.startswith("t:" + __name__) and digest.endswith("#v2")
    assert len(k.encode()) <= 1024 + len("t:#v2")
    assert admin.exists(prefix + k)
    assert total.key(xs[:-1] + [0]) != k, "the digest covers the whole key"
    assert ":sha256:" not in total.key([1, 2, 3])


# ---- 10. generator functions --------------------------------------------------

def test_a_generator_function_is_refused_at_decoration(cache):
    with pytest.raises(TypeError, match="generator"):
        @cache.cached(ttl=60, namespace="t", serializer="pickle")
        def rows(n):
            yield from range(n)
    with pytest.raises(TypeError, match="generator"):
        @cache.cached_many(ttl=60, key="row:{}", serializer="pickle")
        def many(ids):
            yield from ids


# ---- 15. types: mypy --strict on a user's file ----------------------------------

def test_the_decorators_type_check_under_mypy_strict(tmp_path):
    """typed_example.py uses cached(), .invalidate/.key/.set/.refresh, a
    method and Fetched.source on both faces; its `type: ignore`s prove that
    argument types are still checked (strict warns of unused ignores)."""
    if shutil.which("mypy") is None:
        pytest.skip("mypy is not installed (Debian package mypy; scripts/deps.sh installs it)")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), os.path.join(HERE, "typed_example.py")],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
