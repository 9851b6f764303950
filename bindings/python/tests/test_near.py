"""The near cache (near_cache_bytes=N) on both faces: values read from Redis
kept in the process, a write from elsewhere seen once Redis invalidates it,
own writes and deletes dropped before they return."""
import time

import pytest

import xfetch


def test_near_cache_bytes_is_checked(server, prefix):
    with pytest.raises(ValueError):
        xfetch.Cache(server.url, prefix=prefix, near_cache_bytes=-1)
    with pytest.raises(ValueError):
        xfetch.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20, share=False)


def test_near_hits_and_a_write_from_elsewhere(face, server, admin, prefix):
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20)
    other = xfetch.Cache(server.url, prefix=prefix)  # another process's view
    try:
        other.set("hot", b"v1", ttl=60)
        for _ in range(20):
            assert face.run(near.get("hot")) == b"v1"
        if not face.aio:  # the asyncio face's reads do not fill it (yet)
            assert near.stats()["near_hits"] >= 15
        other.set("hot", b"v2", ttl=60)
        deadline = time.monotonic() + 5
        while face.run(near.get("hot")) != b"v2":  # invalidated within the bound
            assert time.monotonic() < deadline, "the write from elsewhere was never seen"
            time.sleep(0.001)
        face.run(near.delete("hot"))  # own delete: gone before it returns
        assert face.run(near.get("hot")) is None
        face.run(near.set("hot", b"v3", ttl=60))
        assert face.run(near.get("hot")) == b"v3"
    finally:
        other.close()
