"""The asyncio client: the synchronous client's calls on worker threads, so an event loop
(a trainer's rollout loop) never blocks on the network.

    async with AsyncClient("http://host:8470", token_file=...) as c:
        verdicts = await c.evaluate(requests)
        async for v in c.stream(requests): ...
"""
import asyncio

from .client import Client


class AsyncClient:
    def __init__(self, *args, **kw):
        self._c = kw.pop("client", None) or Client(*args, **kw)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    async def _call(self, fn, *args, **kw):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: fn(*args, **kw))

    async def evaluate(self, requests, **kw):
        return await self._call(self._c.evaluate, list(requests), **kw)

    async def submit(self, requests, **kw):
        return await self._call(self._c.submit, list(requests), **kw)

    async def poll(self, handle):
        return await self._call(self._c.poll, handle)

    async def cancel(self, handle):
        return await self._call(self._c.cancel, handle)

    async def tasks(self):
        return await self._call(self._c.tasks)

    async def health(self):
        return await self._call(self._c.health)

    async def stream(self, requests, **kw):
        """Verdicts as they finish."""
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        done = object()

        def pump():
            try:
                for v in self._c.stream(list(requests), **kw):
                    loop.call_soon_threadsafe(q.put_nowait, v)
            except Exception as e:
                loop.call_soon_threadsafe(q.put_nowait, e)
            loop.call_soon_threadsafe(q.put_nowait, done)

        fut = loop.run_in_executor(None, pump)
        while True:
            v = await q.get()
            if v is done:
                break
            if isinstance(v, Exception):
                raise v
            yield v
        await fut
