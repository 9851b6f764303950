"""entry_format: the format of the entries a Cache writes (docs/design.md, "The entry
on Redis"), on both faces through the one core. Format 2 is one string (a
header, 20 bytes for a plain value, then the value) and the default; format 1
is a hash; every Cache reads both formats."""
import pytest

import xfetch


def test_the_default_writes_format_2_a_string(server, admin, prefix, face):
    cache = face.Cache(server.url, prefix=prefix,  # entry_format=None: the C default
                       serializer="bytes")  # the value's bytes as they are
    face.run(cache.set("set", b"value", ttl=60))
    load = face.loader(lambda: b"loaded")
    assert face.run(cache.fetch("load", load, ttl=60)) == (b"loaded", "loader")
    for key, value in (("set", b"value"), ("load", b"loaded")):
        assert admin.type(prefix + key) == b"string"
        raw = admin.get(prefix + key)
        assert raw[0] == 0xF8 and raw[20:] == value  # format 2's magic byte, header, value


def test_format_2_writes_a_string_every_cache_reads(server, admin, prefix, face):
    new = face.Cache(server.url, prefix=prefix, entry_format=2, serializer="bytes")
    old = face.Cache(server.url, prefix=prefix, entry_format=1,  # a fleet that keeps hashes
                     serializer="bytes")
    load = face.loader(lambda: b"v\x00alue")
    assert face.run(new.fetch("k", load, ttl=60)) == (b"v\x00alue", "loader")
    raw = admin.get(prefix + "k")
    assert raw[:3] == b"\xf8\x03\x09" and raw[20:] == b"v\x00alue"  # value | s
    for cache in (new, old, new):
        assert face.run(cache.fetch("k", load, ttl=60)) == (b"v\x00alue", "cache")
    face.run(old.set("k", b"hash", ttl=60))
    assert admin.type(prefix + "k") == b"hash"
    assert face.run(new.fetch("k", load, ttl=60)) == (b"hash", "cache")


@pytest.mark.parametrize("bad", [0, 3, "2", 2.0, True])
def test_entry_format_is_checked(server, face, bad):
    with pytest.raises((ValueError, TypeError)):
        face.Cache(server.url, entry_format=bad)
