"""Compressed values (compress_min_bytes=), on both faces (the `face`
fixture): a large value is stored as a zstd frame (entry header version 5,
flag 128) and read back as it was, also by a Cache that does not compress; a
small value stays a plain entry."""
import json
import random

import pytest


def document():
    """About 200 KiB of JSON-like records (the json serializer's input)."""
    return [{"id": i, "name": f"user {i * 7919 % 100003}", "score": i * 31 % 977,
             "active": i % 3 != 0} for i in range(3000)]


def header(admin, key):
    """The entry's version and flags (bytes 1 and 2 of its header)."""
    raw = admin.getrange(key, 0, 2)
    return raw[1], raw[2]


def test_a_large_value_is_written_compressed_and_read_back(face, server, admin, prefix):
    writer = face.Cache(server.url, prefix=prefix, serializer="json",
                        compress_min_bytes=1024)
    reader = face.Cache(server.url, prefix=prefix, serializer="json")  # compresses nothing
    loads = []

    def body():
        loads.append(1)
        return document()
    got = face.run(writer.get_or_compute("doc", face.loader(body), ttl=60))
    assert got == document()
    version, flags = header(admin, prefix + "doc")
    assert (version, flags & 128) == (5, 128)
    plain = len(json.dumps(document(), separators=(",", ":"), sort_keys=True))
    assert admin.strlen(prefix + "doc") * 4 < plain
    assert face.run(reader.get_or_compute("doc", face.loader(body), ttl=60)) == document()
    assert face.run(reader.get("doc")) == document()
    assert loads == [1]
    face.run(writer.set("set", document(), ttl=60))
    assert header(admin, prefix + "set")[0] == 5
    assert face.run(reader.get("set")) == document()


@pytest.mark.parametrize("value", [b"x" * 64, random.Random(7).randbytes(4096)])
def test_a_small_or_incompressible_value_stays_plain(face, server, admin, prefix, value):
    cache = face.Cache(server.url, prefix=prefix, serializer="bytes", compress_min_bytes=1024)
    assert face.run(cache.get_or_compute("v", face.loader(lambda: value), ttl=60)) == value
    version, flags = header(admin, prefix + "v")
    assert (version, flags & 128) == (3, 0)
    assert face.run(cache.get("v")) == value


def test_compress_min_bytes_is_checked(face, server):
    with pytest.raises(ValueError, match="compress_min_bytes"):
        face.Cache(server.url, compress_min_bytes=-1)
