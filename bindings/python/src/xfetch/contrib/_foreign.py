"""Removes a key another program wrote under a name a framework backend now
writes (a migration: the old backend's entries). xfetch never overwrites a
key that is not its entry (WrongTypeError); a framework's explicit set means
"replace whatever is there", so the backend removes the key with a plain DEL
over redis-py, the only command xfetch itself would not send, and writes
again. Needs redis-py (Debian python3-redis) only when such a key is met."""
from __future__ import annotations

import threading

from .._url import SSL_NAMES, parse_url


class ForeignKeys:
    """DEL of keys that are not xfetch entries, on the server (or the Redis
    Cluster node) that holds them; url and ssl keywords as xfetch.Cache's.
    The redis-py client is made on first use and kept; thread-safe."""

    def __init__(self, url: str, ssl: dict):
        self._url = url
        self._ssl = {k: v for k, v in ssl.items() if k in SSL_NAMES and v is not None}
        self._client = None
        self._lock = threading.Lock()

    def remove(self, key: str | bytes) -> None:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            self._client.delete(key)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _connect(self):
        try:
            import redis
            from redis.cluster import ClusterNode, RedisCluster
        except ImportError as e:  # pragma: no cover - Debian's django-redis brings it
            raise RuntimeError("replacing a key another program wrote needs redis-py "
                               "(pip install redis, or Debian python3-redis)") from e
        f = parse_url(self._url)
        kw = {"username": f["username"], "password": f["password"]}
        if f["tls"]:
            kw["ssl"] = True
            kw.update({k: v for k, v in f["ssl"].items()})
            kw.update(self._ssl)
            if kw.get("ssl_cert_reqs", "required") != "none":
                kw.setdefault("ssl_check_hostname", True)  # as xfetch checks it
        if f["unix_path"]:
            return redis.Redis(unix_socket_path=f["unix_path"], db=f["db"], **kw)
        seeds = [s.rsplit(":", 1) for s in f["host"].split(",")] if "," in f["host"] \
            else [(f["host"], f["port"])]
        seeds = [(h.strip("[]"), int(p)) for h, p in seeds]
        if f["cluster"] != 2 and self._is_cluster(redis, seeds, kw):
            return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in seeds], **kw)
        error = None
        for host, port in seeds:  # the first seed that answers, as xfetch does
            client = redis.Redis(host=host, port=port, db=f["db"], **kw)
            try:
                client.ping()
                return client
            except redis.ConnectionError as e:
                client.close()
                error = e
        raise error

    @staticmethod
    def _is_cluster(redis, seeds, kw):
        for host, port in seeds:
            client = redis.Redis(host=host, port=port, **kw)
            try:
                return client.info("cluster").get("cluster_enabled") == 1
            except redis.ConnectionError:
                continue
            finally:
                client.close()
        return False
