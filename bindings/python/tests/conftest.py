"""Fixtures: a real redis-server on a free loopback port (and a Unix socket)
in a temp dir, started once per session; no persistence."""
import os
import shutil
import socket
import subprocess
import time
import uuid

import pytest
import redis

import xfetch

ACL_USER, ACL_PASS = "alice", "s3cret:p@ss"  # ':' and '@' exercise URL quoting


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, tmpdir):
        exe = shutil.which("redis-server")
        if not exe:
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.unix_path = os.path.join(tmpdir, "redis.sock")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", tmpdir,
             "--save", "", "--appendonly", "no", "--unixsocket", self.unix_path,
             "--unixsocketperm", "700", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.admin = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.admin.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.02)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


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
