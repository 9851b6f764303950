"""The example service with the web benchmark's baselines beside its cached
endpoint, reading the same item with the same query:
- /naive/items/{id}: naive cache-aside on redis-py's asyncio client (GET; on
  a miss, query and SET PX), what a service does without stampede protection;
- /django/items/{id}: Django's cache.get_or_set on django-redis (get; on a
  miss, call, add, get), Django 3.2's being synchronous: run in the thread
  pool, its callable running the query on the event loop."""
import asyncio
import json
import os

import django
import redis.asyncio
from django.conf import settings
from fastapi import Depends
from starlette.concurrency import run_in_threadpool

from fastapi_service import ITEM_TTL, SLOW_QUERY_SECONDS, app, get_db

QUERY = "SELECT id, name, price_cents FROM items, pg_sleep($2) WHERE id = $1"

settings.configure(CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": os.environ["XFETCH_URL"],
                                       "KEY_PREFIX": "django"}})
django.setup()
from django.core.cache import cache as django_cache  # noqa: E402  (after setup)

_redis = []  # one client per process, made on its event loop


@app.get("/naive/items/{item_id}")
async def naive_item(item_id: int, db=Depends(get_db)):
    if not _redis:
        _redis.append(redis.asyncio.Redis.from_url(os.environ["XFETCH_URL"]))
    r = _redis[0]
    key = f"naive:item:{item_id}"
    cached = await r.get(key)
    if cached is not None:
        return json.loads(cached)
    value = dict(await db.fetchrow(QUERY, item_id, SLOW_QUERY_SECONDS))
    await r.set(key, json.dumps(value), px=int(ITEM_TTL * 1000))
    return value


@app.get("/django/items/{item_id}")
async def django_item(item_id: int, db=Depends(get_db)):
    loop = asyncio.get_running_loop()

    def load():  # on a pool thread: the query runs on the loop
        query = db.fetchrow(QUERY, item_id, SLOW_QUERY_SECONDS)
        return dict(asyncio.run_coroutine_threadsafe(query, loop).result())

    return await run_in_threadpool(django_cache.get_or_set, f"item:{item_id}", load, ITEM_TTL)
