"""A user's file that must type-check under `mypy --strict` with 0 errors
(test_keys_defects.py runs it; it is never executed). The `type: ignore`s
mark calls mypy must refuse: strict mode reports an ignore that is unused,
so each one proves an argument or result type is still checked."""
from __future__ import annotations

import xfetch
import xfetch.aio

cache = xfetch.Cache("redis://127.0.0.1:6379/0", prefix="app:", lazy_connect=True)


@cache.cached(ttl=60.0, serializer="json")
def profile(user_id: int, fmt: str = "short") -> dict[str, int]:
    return {"id": user_id, "len": len(fmt)}


p: dict[str, int] = profile(42)
p = profile(42, fmt="long")
profile.invalidate(42)
k: str | bytes = profile.key(42)
written: bool = profile.set({"id": 42, "len": 5}, 42)
fresh: dict[str, int] = profile.refresh(42)
raw: dict[str, int] = profile.original(42)
profile("42")  # type: ignore[arg-type]
wrong: str = profile(42)  # type: ignore[assignment]


@cache.cached(ttl=60.0, key="user:{user_id}")
def user(user_id: int) -> bytes | None:
    return None


u: bytes | None = user(1)


class Repo:
    def __init__(self, table: str) -> None:
        self.table = table

    @cache.cached(ttl=60.0, serializer="pickle")
    def get(self, row: int) -> list[str]:
        return [self.table, str(row)]


repo = Repo("users")
rows: list[str] = repo.get(1)
repo.get.invalidate(1)
rows = repo.get.refresh(1)
repo.get("1")  # type: ignore[arg-type]
rows = Repo.get(repo, 1)


class Prices:
    rate = 2

    @classmethod
    @cache.cached(ttl=60.0, serializer="json")
    def of(cls, item: int) -> int:
        return cls.rate * item


class Special(Prices):
    rate = 3


n: int = Special.of(1)
Special.of.invalidate(1)
Special.of("1")  # type: ignore[arg-type]

f: xfetch.Fetched = cache.fetch("page:home", lambda: b"<html>", ttl=60.0)
source: str | None = f.source
value: bytes | None = f.value
if f.source == "cache":
    print(f.value)

acache = xfetch.aio.Cache("redis://127.0.0.1:6379/0", prefix="app:")


@acache.cached(ttl=60.0, serializer="json")
async def aprofile(user_id: int) -> dict[str, int]:
    return {"id": user_id}


async def main() -> None:
    d: dict[str, int] = await aprofile(1)
    await aprofile.invalidate(1)
    ak: str | bytes = aprofile.key(1)
    ok: bool = await aprofile.set({"id": 1}, 1)
    d = await aprofile.refresh(1)
    d = await aprofile.original(1)
    await aprofile("1")  # type: ignore[arg-type]
    af: xfetch.Fetched = await acache.fetch("k", lambda: b"v", ttl=1.0)
    asource: str | None = af.source
    print(d, ak, ok, asource)
