"""xfetch.contrib.fastapi on a real redis-server: install() connects the
asyncio face in the app's lifespan and closes it, get_cache hands it to
endpoints, cached() caches an endpoint's JSON result per its request
arguments with one run per key; the example service on a throwaway
PostgreSQL, in two uvicorn processes, queries once for 50 concurrent
requests on a cold item."""
from __future__ import annotations

import asyncio
import enum
import importlib.util
import os
import subprocess
import sys
import time
from typing import Annotated

import pytest

pytest.importorskip("fastapi")

import httpx  # noqa: E402
from fastapi import (BackgroundTasks, Depends, FastAPI, HTTPException, Request,  # noqa: E402
                     Security)
from fastapi.testclient import TestClient  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import xfetch.aio  # noqa: E402
import xfetch.testing  # noqa: E402
from xfetch.contrib.fastapi import cached, get_cache, install  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE_DIR = os.path.join(HERE, "..", "examples")
PG_HELPER = os.path.join(HERE, "..", "..", "..", "bench", "web", "throwaway_pg.py")


class Item(BaseModel):
    id: int
    name: str


class Service:
    """An app whose endpoints count their runs (a fresh app and Cache per test)."""

    def __init__(self, url, prefix, load_time=0.0):
        self.runs = 0
        self.cache = xfetch.aio.Cache(ttl="1m")
        self.app = app = FastAPI()
        self.events = []
        app.router.on_startup.append(
            lambda: self.events.append(("startup", self.cache.is_set_up)))
        app.router.on_shutdown.append(
            lambda: self.events.append(("shutdown", self.cache.stats()["connections"])))
        install(app, self.cache, url, prefix=prefix)

        def session(request: Request):
            return object()  # a new object per request: it must not be in the key

        @app.get("/items/{item_id}", response_model=Item)
        @cached(self.cache, namespace="items")
        async def item(item_id: int, request: Request, tasks: BackgroundTasks,
                       q: str | None = None, s=Depends(session)):
            self.runs += 1
            await asyncio.sleep(load_time)
            if item_id == 404:
                raise HTTPException(status_code=404)
            return Item(id=item_id, name=f"item {item_id} {q}")

        @app.get("/stats")
        async def stats(cache: xfetch.aio.Cache = Depends(get_cache)):
            await cache.set("seen", 1)
            return {"same": cache is self.cache, "seen": await cache.get("seen"),
                    "connections": cache.stats()["connections"]}

        self.item = item


def test_install_sets_up_in_the_lifespan_and_closes(server, admin, prefix):
    svc = Service(server.url, prefix)
    assert not svc.cache.is_set_up
    with TestClient(svc.app) as client:
        # the app's own startup handlers run after setup, its shutdown ones before close
        assert svc.events == [("startup", True)]
        assert client.get("/items/1").json() == {"id": 1, "name": "item 1 None"}
        assert svc.cache.stats()["connections"] >= 1
    assert svc.events[1][0] == "shutdown" and svc.events[1][1] >= 1
    assert svc.cache.stats()["connections"] == 0  # closed
    with TestClient(svc.app) as client:  # a second lifespan sets it up again
        assert client.get("/items/1").json()["id"] == 1
    assert svc.runs == 1


def _user_lifespan(cache, seen):
    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(app):
        seen.append(("enter", cache.is_set_up, await cache.get("k")))
        yield
        seen.append(("exit", cache.stats()["connections"] >= 1))
    return lifespan


def test_install_wraps_a_lifespan_given_to_the_router(server, prefix):
    """The app's own lifespan (Starlette's router.lifespan_context, what
    FastAPI(lifespan=) sets from 0.93 on) runs inside install()'s: the
    Cache is set up before it enters and closed after it exits."""
    cache, seen = xfetch.aio.Cache(ttl="1m"), []
    app = FastAPI()
    app.router.lifespan_context = _user_lifespan(cache, seen)
    install(app, cache, server.url, prefix=prefix)
    with TestClient(app):
        assert seen == [("enter", True, None)]
    assert seen[1] == ("exit", True) and cache.stats()["connections"] == 0


def test_fastapi_lifespan_keyword(server, prefix):
    """FastAPI(lifespan=...): wrapped by install() where FastAPI takes it
    (0.93+); where it drops it silently (0.92), install() warns."""
    cache, seen = xfetch.aio.Cache(ttl="1m"), []
    app = FastAPI(lifespan=_user_lifespan(cache, seen))
    if "lifespan" in app.extra:  # dropped by this FastAPI
        with pytest.warns(RuntimeWarning, match="0.93"):
            install(app, cache, server.url, prefix=prefix)
        with TestClient(app):
            assert seen == [] and cache.is_set_up
        return
    install(app, cache, server.url, prefix=prefix)
    with TestClient(app):
        assert seen == [("enter", True, None)]
    assert seen[1] == ("exit", True) and cache.stats()["connections"] == 0


def test_install_takes_only_the_asyncio_face(server):
    with pytest.raises(TypeError, match="xfetch.aio.Cache"):
        install(FastAPI(), xfetch.Cache(lazy_connect=True))


def test_install_without_a_url_needs_a_set_up_cache(server):
    app = FastAPI()
    install(app, xfetch.aio.Cache())
    with pytest.raises(RuntimeError, match="url="):
        with TestClient(app):
            pass


def test_get_cache_hands_the_apps_cache_to_endpoints(server, admin, prefix):
    svc = Service(server.url, prefix)
    with TestClient(svc.app) as client:
        got = client.get("/stats").json()
    assert got == {"same": True, "seen": 1, "connections": got["connections"]}
    assert got["connections"] >= 1
    assert admin.exists(prefix + "seen")


def test_install_works_on_a_starlette_app(server, admin, prefix):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def home(request):
        cache = get_cache(request)
        return JSONResponse({"n": await cache.get_or_compute("n", lambda: 7)})

    cache = xfetch.aio.Cache(ttl=60)
    app = Starlette(routes=[Route("/", home)])
    install(app, cache, server.url, prefix=prefix)
    with TestClient(app) as client:
        assert client.get("/").json() == {"n": 7}
    assert admin.exists(prefix + "n") and cache.stats()["connections"] == 0


def test_get_cache_without_install_says_so():
    app = FastAPI()

    @app.get("/")
    async def root(cache=Depends(get_cache)):
        return {}

    with pytest.raises(RuntimeError, match="install"):
        TestClient(app).get("/")


def test_cached_keys_by_request_arguments_not_dependencies(server, admin, prefix):
    svc = Service(server.url, prefix)
    with TestClient(svc.app) as client:
        for _ in range(3):  # the session dependency differs each time: one run
            assert client.get("/items/1?q=a").json() == {"id": 1, "name": "item 1 a"}
        assert svc.runs == 1
        assert client.get("/items/1?q=b").json()["name"] == "item 1 b"
        assert client.get("/items/2?q=a").json()["name"] == "item 2 a"
        assert svc.runs == 3
        key = svc.item.key(item_id=1, q="a")  # the request arguments only
        assert key == "items:test_fastapi.Service.__init__.<locals>.item(item_id=1, q='a')"
        assert admin.exists(prefix + key)
        assert client.get("/items/404").status_code == 404  # an exception is not cached
        assert client.get("/items/404").status_code == 404
        assert svc.runs == 5
        asyncio_run_in(client, svc.item.invalidate(item_id=1, q="a"))  # a tombstone: a miss
        assert client.get("/items/1?q=a").json()["name"] == "item 1 a"
        assert svc.runs == 6


class Color(str, enum.Enum):
    red = "red"
    blue = "blue"


async def _colored(item_id: int, request: Request, color: Color = Color.red):
    return {"id": item_id, "color": color}


def test_fastapi_reads_the_endpoints_own_parameters(server, prefix):
    # the wrapper shows FastAPI the endpoint's signature, its string
    # annotations (Color) resolved in the endpoint's module
    cache = xfetch.aio.Cache(ttl=60)
    app = FastAPI()
    install(app, cache, server.url, prefix=prefix)
    app.get("/colored/{item_id}")(cached(cache)(_colored))
    op = app.openapi()["paths"]["/colored/{item_id}"]["get"]
    assert {(p["name"], p["in"]) for p in op["parameters"]} == {("item_id", "path"),
                                                              ("color", "query")}
    assert op["operationId"].startswith("_colored_")
    with TestClient(app) as client:
        assert client.get("/colored/2?color=blue").json() == {"id": 2, "color": "blue"}
        assert client.get("/colored/2?color=green").status_code == 422


def _db():
    return object()


async def _annotated_dependency(item_id: int, db: Annotated[object, Depends(_db)],
                                key: Annotated[str, Security(_db)] = "x"):
    return item_id


def test_annotated_and_security_dependencies_are_not_keyed():
    endpoint = cached(xfetch.aio.Cache(), ttl=60)(_annotated_dependency)
    assert endpoint.key(item_id=1) == endpoint.key(item_id=1, db=object(), key="y") == \
        "test_fastapi._annotated_dependency(item_id=1)"


def asyncio_run_in(client, coro):
    """Runs coro on the TestClient's event loop (the Cache's)."""
    async def run():
        return await coro
    return client.portal.call(run)


def test_cached_stores_the_json_result(server, admin, prefix):
    svc = Service(server.url, prefix)
    with TestClient(svc.app) as client:
        client.get("/items/3")

    async def read():
        async with xfetch.aio.Cache(server.url, prefix=prefix, serializer="json") as other:
            return await other.get(svc.item.key(3))
    # the model as FastAPI encodes it, in JSON: any process or language reads it
    assert asyncio.run(read()) == {"id": 3, "name": "item 3 None"}


def test_50_concurrent_requests_on_a_cold_key_run_the_endpoint_once(server, admin, prefix):
    # The endpoint takes 0.3 s: the other 49 requests arrive while it runs
    # (they wait on its lease, 5 s by default: margin for a busy machine).
    svc = Service(server.url, prefix, load_time=0.3)

    async def main():
        async with svc.app.router.lifespan_context(svc.app):
            async with httpx.AsyncClient(app=svc.app, base_url="http://t") as client:
                return await asyncio.gather(*(client.get("/items/9?q=x") for _ in range(50)))

    replies = asyncio.run(main())
    assert [r.status_code for r in replies] == [200] * 50
    assert {r.text for r in replies} == {'{"id":9,"name":"item 9 x"}'}
    assert svc.runs == 1


def test_cached_refuses_what_it_cannot_cache(server):
    cache = xfetch.aio.Cache()
    with pytest.raises(TypeError, match="async def"):
        @cached(cache)
        def sync_endpoint(x: int):
            return x
    with pytest.raises(TypeError, match="key=|namespace="):
        @cached(cache)  # a closure: its name does not identify it
        async def local_endpoint(x: int):
            return x


async def _returns_response(x: int):
    from fastapi.responses import JSONResponse
    return JSONResponse({"x": x})


def test_a_response_is_refused_not_cached(server, prefix):
    cache = xfetch.aio.Cache(server.url, prefix=prefix, lazy_connect=True)
    endpoint = cached(cache, ttl=60)(_returns_response)

    async def main():
        try:
            with pytest.raises(TypeError, match="JSONResponse"):
                await endpoint(1)
        finally:
            await cache.close()
    asyncio.run(main())


# The example service: two uvicorn processes, a throwaway PostgreSQL.

def _pg_helper():
    if not os.path.exists(PG_HELPER):
        pytest.skip("bench/web/throwaway_pg.py is not here (not a checkout)")
    spec = importlib.util.spec_from_file_location("throwaway_pg", PG_HELPER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not mod.available():
        pytest.skip("PostgreSQL 15's server binaries are not installed")
    pytest.importorskip("asyncpg")
    pytest.importorskip("uvicorn")
    return mod


@pytest.fixture
def postgres():
    pg = _pg_helper().ThrowawayPostgres()
    yield pg
    pg.stop()


def test_the_example_service_queries_once_for_50_cold_requests(server, admin, postgres):
    port = xfetch.testing.free_port()
    env = dict(os.environ, DATABASE_URL=postgres.url, XFETCH_URL=server.url, ITEM_TTL="60",
               SLOW_QUERY_SECONDS="0.3")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "fastapi_service:app",
                             "--app-dir", EXAMPLE_DIR, "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "2", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # two processes importing on a busy machine
        while True:
            try:
                if httpx.get(base + "/cache/stats", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, \
                proc.stdout.read().decode() if proc.poll() is not None else "no answer"
            time.sleep(0.2)
        postgres.reset_stats()

        async def burst(path):
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                return await asyncio.gather(*(client.get(path) for _ in range(50)))

        # the query takes 0.3 s: the 50 requests arrive while it runs, in
        # both processes; the others wait on its lease (5 s)
        replies = asyncio.run(burst("/items/7"))
        assert {r.status_code for r in replies} == {200}
        assert {r.text for r in replies} == {'{"id":7,"name":"item 7","price_cents":700}'}
        assert postgres.calls("%FROM items, pg_sleep%") == 1
        # a write invalidates: the next read (any process) queries again
        put = httpx.put(base + "/items/7/price?cents=650", timeout=30)
        assert put.json()["price_cents"] == 650
        replies = asyncio.run(burst("/items/7"))
        assert {r.json()["price_cents"] for r in replies} == {650}
        assert postgres.calls("%FROM items, pg_sleep%") == 2
        assert httpx.get(base + "/items/5000", timeout=30).status_code == 404
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
