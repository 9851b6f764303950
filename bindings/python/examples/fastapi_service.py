"""A FastAPI service on PostgreSQL (asyncpg) whose item query is slow, cached
with xfetch: one query per key and ttl across all the service's processes,
however many requests arrive when the entry expires.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
    XFETCH_URL=redis://127.0.0.1:6379/0 \\
        uvicorn fastapi_service:app --app-dir bindings/python/examples --workers 2

    curl http://127.0.0.1:8000/items/7           # {"id":7,"name":"item 7","price_cents":700}
    curl -X PUT 'http://127.0.0.1:8000/items/7/price?cents=650'
    curl http://127.0.0.1:8000/cache/stats

Environment: DATABASE_URL and XFETCH_URL (above); ITEM_TTL (seconds the
cached item lives, 30); SLOW_QUERY_SECONDS (what the item query takes on
purpose, pg_sleep: 0.05); XFETCH_NEAR_CACHE_BYTES (the near cache, 0: off);
XFETCH_ENABLED=0 bypasses the cache (every request queries: the baseline).
The table is created and filled (1,000 items) at startup if missing.
"""
import contextlib
import os

import asyncpg
from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

import xfetch.aio
from xfetch.contrib.fastapi import cached, get_cache, install

ITEM_TTL = float(os.environ.get("ITEM_TTL", "30"))
SLOW_QUERY_SECONDS = float(os.environ.get("SLOW_QUERY_SECONDS", "0.05"))

# Made at import (the decorator needs it), connected by install() at startup.
cache = xfetch.aio.Cache(prefix="shop:")


class Item(BaseModel):
    id: int
    name: str
    price_cents: int


@contextlib.asynccontextmanager
async def lifespan(app):
    app.state.db = await asyncpg.create_pool(os.environ["DATABASE_URL"], min_size=2,
                                             max_size=10)
    await create_schema(app.state.db)
    yield
    await app.state.db.close()


app = FastAPI()
app.router.lifespan_context = lifespan  # FastAPI >= 0.93: FastAPI(lifespan=lifespan)
install(app, cache, os.environ.get("XFETCH_URL", "redis://127.0.0.1:6379/0"),
        near_cache_bytes=int(os.environ.get("XFETCH_NEAR_CACHE_BYTES", "0")),
        enabled=os.environ.get("XFETCH_ENABLED", "1") != "0",
        lazy_connect=True)  # Redis down at startup: the service starts and fails open


def get_db(request: Request) -> asyncpg.Pool:
    return request.app.state.db


@app.get("/items/{item_id}", response_model=Item)
@cached(cache, ttl=ITEM_TTL)  # keyed by item_id; db is a dependency, not in the key
async def item(item_id: int, db: asyncpg.Pool = Depends(get_db)):
    row = await db.fetchrow("SELECT id, name, price_cents FROM items, pg_sleep($2) "
                            "WHERE id = $1", item_id, SLOW_QUERY_SECONDS)
    if row is None:
        raise HTTPException(status_code=404, detail="no such item")  # not cached
    return Item(**row)


@app.put("/items/{item_id}/price", response_model=Item)
async def set_price(item_id: int, cents: int, db: asyncpg.Pool = Depends(get_db)):
    row = await db.fetchrow("UPDATE items SET price_cents = $2 WHERE id = $1 "
                            "RETURNING id, name, price_cents", item_id, cents)
    if row is None:
        raise HTTPException(status_code=404, detail="no such item")
    await item.invalidate(item_id)  # the next read, in any process, queries again
    return Item(**row)


@app.get("/cache/stats")
async def cache_stats(cache: xfetch.aio.Cache = Depends(get_cache)):
    return cache.stats()  # this process's counters


async def create_schema(db):
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(7201)")  # one process creates it
        await conn.execute("CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, "
                           "name text NOT NULL, price_cents int NOT NULL)")
        await conn.execute("INSERT INTO items SELECT i, 'item ' || i, i * 100 "
                           "FROM generate_series(1, 1000) i ON CONFLICT DO NOTHING")
