"""A value carries its serializer's name (a tag after its bytes): a Cache
with another serializer never decodes it, on both faces (the `face`
fixture): a miss, counted as undecodable, reloaded by its loader and
rewritten with the reader's serializer."""
import json
import pickle
import time

import pytest


class PlainJson:
    """A custom serializer whose bytes the built-in "json" would also parse."""

    @staticmethod
    def dumps(value):
        return json.dumps(value).encode()

    @staticmethod
    def loads(data):
        return json.loads(data)


# (writer, value it writes, reader, value the reader's loader returns): each
# written value is one the reader's serializer would parse without the tag.
PAIRS = [
    ("json", "abc", "bytes", b"fresh"),
    ("json", 123, PlainJson(), 7),
    (PlainJson(), 123, "json", 7),
    ("pickle", b"x" * 64, "bytes", b"fresh"),
    ("json", [1, 2], "pickle", (3,)),
]


@pytest.mark.parametrize("writer,written,reader,fresh", PAIRS,
                         ids=["json-bytes", "json-custom", "custom-json", "pickle-bytes",
                              "json-pickle"])
def test_another_serializers_value_is_a_miss_reloaded(face, server, prefix, writer, written,
                                                      reader, fresh):
    a = face.Cache(server.url, prefix=prefix, serializer=writer)
    b = face.Cache(server.url, prefix=prefix, serializer=reader)
    assert face.run(a.get_or_compute("k", face.loader(lambda: written), ttl=60)) == written
    assert face.run(b.get("k")) is None  # never decoded
    loads = []

    def body():
        loads.append(1)
        return fresh
    assert face.run(b.get_or_compute("k", face.loader(body), ttl=60)) == fresh
    assert loads == [1]
    assert face.run(b.get_or_compute("k", face.loader(body), ttl=60)) == fresh
    assert loads == [1]  # rewritten with the reader's serializer: a hit now
    assert b.stats()["undecodable"] >= 1


def test_an_untagged_value_is_read_as_before(face, server, prefix):
    """Untagged values (serializer="bytes", C clients, older versions) are
    decoded as before, and an older pickle reader still reads a tagged value
    (pickle stops before the tag)."""
    raw = face.Cache(server.url, prefix=prefix, serializer="bytes")
    face.run(raw.set("k", pickle.dumps({"a": 1}), ttl=60))
    cache = face.Cache(server.url, prefix=prefix)
    assert face.run(cache.get("k")) == {"a": 1}
    from xfetch._values import Codec
    assert pickle.loads(Codec("pickle", (), b"").encode(b"k", {"a": 1})) == {"a": 1}


def test_a_decorated_near_hit_another_serializer_wrote_is_counted_once_and_reloaded(
        face, server, prefix):
    """A decorated call's near hit (served before the decorator's generic
    path) that its serializer refuses: counted once, recomputed by the
    function, rewritten; later calls are near hits of the new value."""
    cache = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20)
    runs = []

    def body(i):
        runs.append(i)
        return {"i": i}
    f = cache.cached(ttl=60, serializer="json", namespace="ns")(face.loader(body))
    k = f.key(1)
    face.run(cache.set(k, ("pickled",), ttl=60))  # the Cache's pickle, not json
    assert face.run(cache.get(k)) == ("pickled",)  # near-cached now
    assert face.run(f(1)) == {"i": 1}
    assert runs == [1]
    assert cache.stats()["undecodable"] == 1
    near = cache.stats()["near_hits"]
    for _ in range(500):  # the rewrite's invalidation, then a read from Redis, then near
        assert face.run(f(1)) == {"i": 1}
        if cache.stats()["near_hits"] > near:
            break
        time.sleep(0.01)
    assert runs == [1] and cache.stats()["near_hits"] > near
    assert cache.stats()["undecodable"] == 1
