"""Fixtures: a real redis-server on a free loopback port (and a Unix socket)
in a temp dir, started once per session; no persistence."""
import shutil
import time
import uuid

import pytest
import redis

import xfetch
import xfetch.testing

ACL_USER, ACL_PASS = "alice", "s3cret:p@ss"  # ':' and '@' exercise URL quoting


class RedisServer(xfetch.testing.RedisServer):
    def __init__(self, tmpdir):
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        super().__init__(tmpdir)
        self.admin = redis.Redis(host="127.0.0.1", port=self.port)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = RedisServer(str(tmp_path_factory.mktemp("redis")))
    srv.admin.execute_command("ACL", "SETUSER", ACL_USER, "on", ">" + ACL_PASS, "~*", "&*",
                              "+@all")
    yield srv
    srv.stop()


@pytest.fixture
def admin(server):
    server.admin.flushall()
    return server.admin


@pytest.fixture
def prefix():
    return f"t{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def cache(server, admin, prefix):
    c = xfetch.Cache(server.url, prefix=prefix, seed=42)
    yield c
    c.close()


class Counter:
    """A loader that counts its calls and returns a fixed value."""

    def __init__(self, value=b"value", delay=0.0):
        self.value, self.delay, self.calls = value, delay, 0

    def __call__(self):
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        return self.value


@pytest.fixture
def counter():
    return Counter
