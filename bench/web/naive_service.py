"""The example service with one more endpoint for the web benchmark: the same
item read as naive cache-aside on redis-py (GET; on a miss, query and SET EX),
what a service does without stampede protection."""
import json
import os

import redis.asyncio
from fastapi import Depends

from fastapi_service import ITEM_TTL, SLOW_QUERY_SECONDS, app, get_db

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
    row = await db.fetchrow("SELECT id, name, price_cents FROM items, pg_sleep($2) "
                            "WHERE id = $1", item_id, SLOW_QUERY_SECONDS)
    value = dict(row)
    await r.set(key, json.dumps(value), px=int(ITEM_TTL * 1000))
    return value
