"""Integrations of xfetch with web frameworks: xfetch.contrib.django (a Django cache
backend), xfetch.contrib.fastapi (FastAPI and Starlette: the asyncio face in the lifespan,
a dependency, an endpoint decorator)."""
