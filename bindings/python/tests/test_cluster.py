"""The binding against a real 3-master Redis Cluster (xfetch.testing.RedisCluster):
the plain URL of any node works, and so does a seed list."""
import pytest
import redis

import xfetch
import xfetch.testing


@pytest.fixture(scope="module")
def cluster():
    with xfetch.testing.RedisCluster(masters=3) as c:
        yield c


def test_one_node_url_reaches_every_key_without_errors(cluster, counter):
    cache = xfetch.Cache(cluster.url, prefix="py:")
    loaders = {}
    for i in range(300):
        loaders[i] = counter(value=b"v%d" % i)
        assert cache.get_or_compute(f"k{i}", loaders[i], ttl=60) == b"v%d" % i
    for i in range(300):
        assert cache.get_or_compute(f"k{i}", loaders[i], ttl=60) == b"v%d" % i
    assert all(c.calls == 1 for c in loaders.values())
    stats = cache.stats()
    assert stats["redis_errors"] == 0
    assert stats["hits"] == 300 and stats["loads"] == 300
    assert stats["redirects"] == 0 and stats["map_refreshes"] == 1
    # The entries are spread over the three masters.
    holders = [p for p in cluster.ports if redis.Redis(port=p).dbsize() > 0]
    assert len(holders) == 3
    cache.close()


def test_seed_list_url_skips_a_dead_seed(cluster, counter):
    url = "redis://127.0.0.1:1," + ",".join(f"127.0.0.1:{p}" for p in cluster.ports) + "/0"
    cache = xfetch.Cache(url, prefix="seeds:")
    load = counter(value=b"x")
    assert cache.get_or_compute("a", load, ttl=60) == b"x"
    assert cache.get_or_compute("a", load, ttl=60) == b"x"
    assert load.calls == 1
    cache.close()


def test_cluster_off_is_not_routed(cluster, counter):
    cache = xfetch.Cache(cluster.url + "?cluster=off", prefix="off:")
    errors = 0
    for i in range(30):
        try:
            cache.get_or_compute(f"k{i}", counter(), ttl=60)
        except xfetch.Error as e:
            errors += "MOVED" in str(e)
    assert errors > 0
    cache.close()


def test_a_cluster_refuses_a_db_other_than_0(cluster):
    with pytest.raises(xfetch.InvalidArgumentError):
        xfetch.Cache(cluster.url.replace("/0", "/2"))
