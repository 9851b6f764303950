"""The write fence (write_fence=, C options.write_fence) on both faces: a
write (set, delete, a load's write) followed by one PING before it returns,
so that Redis has sent the invalidations it caused to every near cache; on by
default with a near cache, forced on or off by the option."""
import pytest

import xfetch


def pings(admin):
    return admin.info("commandstats").get("cmdstat_ping", {}).get("calls", 0)


def writes(face, cache):
    """A set, a delete and a load's write: the PINGs they made."""
    face.run(cache.set("k", b"v", ttl=60))
    face.run(cache.delete("k"))
    assert face.run(cache.get_or_compute("l", lambda: b"loaded", ttl=60)) == b"loaded"


@pytest.mark.parametrize("near, fence, want", [
    (1 << 20, None, 3),   # the default with a near cache: fenced
    (1 << 20, True, 3),
    (1 << 20, False, 0),
    (0, True, 3),         # a writer without a near cache in a near-cache fleet
    (0, None, 0),         # the default without: not fenced
])
def test_writes_are_fenced(face, server, admin, prefix, near, fence, want):
    cache = face.Cache(server.url, prefix=prefix, near_cache_bytes=near, write_fence=fence)
    face.run(cache.get("warm"))  # connected (and tracked) before counting
    admin.config_resetstat()
    writes(face, cache)
    assert pings(admin) == want


def test_write_fence_is_checked(server, prefix):
    with pytest.raises(TypeError):
        xfetch.Cache(server.url, prefix=prefix, write_fence=1)
    with pytest.raises(TypeError):
        xfetch.aio.Cache(server.url, prefix=prefix, write_fence="on")
