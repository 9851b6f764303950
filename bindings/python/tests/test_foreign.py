"""Keys another program wrote: a hash holding a field xfetch never writes is
not an entry. Every call on it raises WrongTypeError and leaves it as it was
(its fields, no TTL), on both faces and with either entry format; the loader
never runs. A hash of only xfetch's fields is an entry, malformed or not."""
import pytest

import xfetch

# Another program's hashes: none of the entry's fields; some beside its own.
SHAPES = [
    {b"name": b"bob", b"email": b"bob@example.com"},
    {b"name": b"bob", b"e": b"99999999999999", b"v": b"1"},
]


def plant(admin, key, shape):
    admin.delete(key)
    admin.hset(key, mapping=shape)


def expect_untouched(admin, key, shape):
    assert admin.type(key) == b"hash"
    assert admin.hgetall(key) == shape
    assert admin.pttl(key) == -1


@pytest.mark.parametrize("entry_format", [None, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=["none_of_ours", "some_of_ours"])
def test_a_foreign_hash_is_left_untouched(face, server, admin, prefix, entry_format, shape):
    cache = face.Cache(server.url, prefix=prefix, entry_format=entry_format, seed=3)
    key, full = "user:1", prefix + "user:1"
    calls = []
    loader = face.loader(lambda *a: calls.append(a) or b"loaded")
    ops = {
        "get_or_compute": lambda: cache.get_or_compute(key, loader, ttl=60),
        "get": lambda: cache.get(key),
        "set": lambda: cache.set(key, b"x", ttl=60),
        "delete": lambda: cache.delete(key),
        "get_many": lambda: cache.get_many([key, "other"], loader, ttl=60),
        "delete_many": lambda: cache.delete_many(["other", key]),
    }
    for round_ in range(2):  # a fresh connection, then one that knows the server's clock
        for name, op in ops.items():
            plant(admin, full, shape)
            with pytest.raises(xfetch.WrongTypeError, match="WRONGTYPE"):
                face.run(op())
            expect_untouched(admin, full, shape)
        assert face.run(cache.get_or_compute(f"warm{round_}", loader, ttl=60)) == b"loaded"
    assert (key,) not in calls  # get_many's loader: only "other"
    assert calls.count(()) == 2  # get_or_compute's: only the warm keys


@pytest.mark.parametrize("entry_format", [None, 1])
def test_a_hash_of_only_entry_fields_is_a_malformed_entry(face, server, admin, prefix,
                                                          entry_format):
    cache = face.Cache(server.url, prefix=prefix, entry_format=entry_format, seed=3)
    admin.hset(prefix + "ours", mapping={"v": "old", "e": "soon", "d": "x"})
    loader = face.loader(lambda: b"fresh")
    assert face.run(cache.get_or_compute("ours", loader, ttl=60)) == b"fresh"
    assert cache.stats()["malformed"] == 1
    assert face.run(cache.get("ours")) == b"fresh"
