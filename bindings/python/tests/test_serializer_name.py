"""A value carries its serializer's name (a tag after its bytes): a Cache
with another serializer never decodes it, on both faces (the `face`
fixture): a miss, counted as undecodable, reloaded by its loader and
rewritten with the reader's serializer."""
import json
import pickle

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
