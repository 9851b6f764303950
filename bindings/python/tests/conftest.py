"""Fixtures: a real redis-server on a free loopback port (and a Unix socket)
in a temp dir, started once per session; no persistence."""
import asyncio
import os
import pathlib
import pickle
import shutil
import signal
import threading
import time
import types
import uuid

import pytest
import redis

import xfetch
import xfetch.aio
import xfetch.testing

pytest_plugins = ["isolation"]  # what a test leaves behind is undone (isolation.py)

# Every Cache a test opens without a timeout of its own gets PATIENT_S, not
# the library's 1 s: no such test is about a timeout, and a busy machine
# (a sanitizer build beside it, valgrind) can take past 1 s to answer an open
# or a big command. A test about a timeout passes timeout= (or connect_timeout=).
PATIENT_S = 10.0


def _patient(init):
    def __init__(self, *args, **kw):
        if len(args) < 3 and "timeout" not in kw and "connect_timeout" not in kw:
            kw["timeout"] = PATIENT_S
        init(self, *args, **kw)
    return __init__


for _face in (xfetch.Cache, xfetch.aio.Cache):
    _face.__init__ = _patient(_face.__init__)

ACL_USER, ACL_PASS = "alice", "s3cret:p@ss"  # ':' and '@' exercise URL quoting


class RedisServer(xfetch.testing.RedisServer):
    def __init__(self, tmpdir):
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        super().__init__(tmpdir)
        self.admin = redis.Redis(host="127.0.0.1", port=self.port)

    def answers(self):
        """Whether the server runs and answers PING now."""
        return self.proc.poll() is None and self._answers()


class SharedServer(RedisServer):
    """The session's server, with the ACL user the URL tests log in as;
    restart() replaces it (on a new port) if a test left it down."""

    def __init__(self, tmpdir):
        super().__init__(tmpdir)
        self.admin.execute_command("ACL", "SETUSER", ACL_USER, "on", ">" + ACL_PASS, "~*",
                                   "&*", "+@all")

    def restart(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped one cannot end
            self.proc.kill()
            self.proc.wait(10)
        self.admin.close()
        self.__init__(self.dir)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = SharedServer(str(tmp_path_factory.mktemp("redis")))
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


_READER = pathlib.Path(__file__).resolve().parents[3] / "lua" / "entry_read.lua"
_PEEK_TAIL = """
local function num(x) return x and string.format('%d', x) or '' end
local t = entry(KEYS[1], server_now(), true)
local v = t.v and entry_value(KEYS[1], t) or nil
return {t.kind, v and '1' or '0', v or '', num(t.d), num(t.e), num(t.s), num(t.f),
        num(t.deadline), tostring(t.live), lease_mine(t, ARGV[1]) and '1' or '0',
        tostring(t.n), t.bad and '1' or '0'}
"""


def peek(admin, key, token=""):
    """key's entry as every script reads it, in either format (a hash or a
    format-2 string): lua/entry_read.lua's own reader, run by EVAL, for a
    test of a behaviour that looks into storage whatever the entry_format
    (tests/entry_peek.c is the C twin). Fields: kind ("hash", "string",
    "none"), v (bytes or None), d, e, s, f, deadline (int or None), live,
    mine (the lease is token's), n, bad (bools)."""
    r = admin.eval(_READER.read_text() + _PEEK_TAIL, 1, key, token)
    num = [int(x) if x else None for x in r[3:8]]
    return types.SimpleNamespace(
        kind=r[0].decode(), v=r[2] if r[1] == b"1" else None, d=num[0], e=num[1], s=num[2],
        f=num[3], deadline=num[4], live=r[8] == b"1", mine=r[9] == b"1", n=r[10] == b"1",
        bad=r[11] == b"1")


def stored(data):
    """The value a Cache with the default serializer (pickle) stored as data
    (an entry's value bytes, as peek gives them)."""
    return None if data is None else pickle.loads(data)


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


class Face:
    """One face of the API for a test that runs on both (the `face`
    fixture): .Cache(url, **kw) opens that face's Cache (closed at the end),
    .run(x) returns a sync call's value or runs an aio call's coroutine on
    the test's event loop, .gather(calls) runs each call() concurrently
    (threads or tasks) and returns their results or exceptions, and
    .loader(body, delay) makes a loader that sleeps (time.sleep or
    asyncio.sleep) and then returns body()."""

    def __init__(self, kind):
        self.kind = kind
        self.aio = kind == "aio"
        self.loop = asyncio.new_event_loop() if self.aio else None
        self._caches = []

    def Cache(self, *args, **kw):
        cache = (xfetch.aio.Cache if self.aio else xfetch.Cache)(*args, **kw)
        self._caches.append(cache)
        return cache

    def run(self, x):
        return self.loop.run_until_complete(x) if self.aio else x

    def gather(self, calls):
        if self.aio:
            async def main():
                return await asyncio.gather(*[c() for c in calls], return_exceptions=True)
            return self.run(main())
        out = [None] * len(calls)
        barrier = threading.Barrier(len(calls))

        def one(i):
            barrier.wait()
            try:
                out[i] = calls[i]()
            except BaseException as e:  # noqa: B902 - returned, as gather does
                out[i] = e
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def loader(self, body, delay=0.0):
        if self.aio:
            async def load(*args):
                if delay:
                    await asyncio.sleep(delay)
                return body(*args)
        else:
            def load(*args):
                if delay:
                    time.sleep(delay)
                return body(*args)
        return load

    def close(self):
        """Closes every Cache, even after one's close() raised (the first
        error is raised once all are closed), then the loop."""
        errors = []
        for c in self._caches:
            try:
                self.run(c.close())
            except Exception as e:  # noqa: B902 - raised below
                errors.append(e)
        if self.aio:
            self.loop.close()
        if errors:
            raise errors[0]


@pytest.fixture(params=["sync", "aio"])
def face(request):
    f = Face(request.param)
    yield f
    f.close()
