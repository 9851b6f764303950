"""An early refresh elected on a near hit is decided on what Redis holds, on
both faces: when another client writes the key between the near hit and the
call's read of Redis, the newer value is served as it is, with no lease and
no load, as a Cache without the near cache would. The write is placed
deterministically: the reader talks to Redis through a proxy that makes it
before passing on the reader's first command naming the key (once armed)."""
import xfetch

from redis_proxy import RedisProxy
from test_near import until_near_hit


def test_a_newer_value_written_after_the_near_hit_is_served_not_refreshed(
        face, server, admin, prefix):
    # The rate-aware rule with factor 700: the first value (its load >= 0.1 s,
    # 60 s left) is inside the window (>= 70 s); the newer one (3600 s left,
    # its load's delta kept by set) is outside it unless that load is
    # measured above 5 s.
    other = xfetch.Cache(server.url, prefix=prefix)  # another process's view
    key, armed, wrote = (prefix + "hot").encode(), [], []

    def write_first(data, first):  # once armed: before the first command naming key
        if armed and not wrote and key in data:
            wrote.append(other.set("hot", b"new", ttl=3600))
    proxy = RedisProxy(server.port, write_first)
    near = None
    try:
        near = face.Cache(proxy.url, prefix=prefix, near_cache_bytes=1 << 20)
        loads = []
        load = face.loader(lambda: loads.append(1) or b"v%d" % len(loads), delay=0.1)
        assert face.run(near.fetch("hot", load, ttl=60, refresh_ahead=700)) == (b"v1",
                                                                                 "loader")
        until_near_hit(face, near, "hot", b"v1")  # a get: never elected
        armed.append(1)
        got = face.run(near.fetch("hot", load, ttl=60, refresh_ahead=700))
        assert wrote == [True], "the write came between the near hit and the read"
        assert (got, len(loads)) == ((b"new", "cache"), 1), \
            "the election on the near copy refreshed a newer value"
        assert other.get("hot") == b"new"
        assert admin.pttl(prefix + "hot") > 3_000_000  # the newer value keeps its ttl
    finally:
        if near is not None:
            face.run(near.close())
        proxy.close()
        other.close()
