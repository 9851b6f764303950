"""xfetch.aio's get_many: one get-or-compute call per key, all pipelined
(the hits' reads go out together: one MGET per node and slot), each key
leased at its turn. With batch=True the keys whose calls reach their load together
are computed by one loader(list of keys) call: a round is flushed once every
call still running is loading, else once nothing changed for QUIET seconds
and one more loop turn: a call waiting for another client's lease must not
hold back the keys this one leased (that client may be waiting for one of
them), and the keys of one burst, whose replies a busy machine may deliver in
separate loop turns, still load together."""
from __future__ import annotations

import asyncio
import inspect

QUIET = 0.05  # seconds without a key joining or a call ending: the round goes

from ._core import unique_keys
from ._runtime import batch_result


class _Batch:
    """Collects the keys whose calls load at the same time, for one call of
    the batch loader per round."""

    def __init__(self, loader, running):
        self.loader = loader
        self.running = running  # calls not finished yet
        self.round = {}  # key -> the future of its value
        self.changes = 0  # keys joined and calls over: the round's progress
        self.turn = None  # the loop's next turn, checking whether the round still grows
        self.flushes = set()  # the rounds' tasks: held (the loop holds tasks weakly)

    def load_one(self, key):
        """The per-key loader the call awaits."""
        fut = asyncio.get_running_loop().create_future()
        self.round[key] = fut
        self._maybe_flush()
        return fut

    def done_one(self):
        self.running -= 1
        self._maybe_flush()

    def _maybe_flush(self):
        self.changes += 1
        if not self.round:
            return
        if len(self.round) >= self.running:
            self._flush_round()
        elif self.turn is None:  # the other calls may wait on leases the round holds
            self.turn = asyncio.get_running_loop().call_later(QUIET, self._quiet, self.changes)

    def _quiet(self, changes, settled=False):
        """QUIET seconds after changes, then one more loop turn (an I/O event
        of the same turn as this timer queues its loader after it): if
        nothing joined nor ended meanwhile, the round goes."""
        loop = asyncio.get_running_loop()
        if self.changes != changes:
            self.turn = loop.call_later(QUIET, self._quiet, self.changes) if self.round else None
        elif not settled:
            self.turn = loop.call_soon(self._quiet, changes, True)
        else:
            self.turn = None
            self._flush_round()

    def _flush_round(self):
        if self.round:
            keys, self.round = self.round, {}
            task = asyncio.ensure_future(self._flush(keys))
            self.flushes.add(task)
            task.add_done_callback(self.flushes.discard)

    async def _flush(self, futures):
        try:
            values = self.loader(list(futures))
            if inspect.isawaitable(values):
                values = await values
            batch_result(values)
        except BaseException as e:  # every key of the round fails with it
            for fut in futures.values():
                if not fut.done():
                    fut.set_exception(e)
            return
        for k, fut in futures.items():
            if not fut.done():
                fut.set_result(values.get(k))  # a key left out is "not found"


async def get_many(policies, engine, fetch, keys, loader, ttl, beta, batch, policy):
    """fetch (the Cache's bytes-level one) for each key, concurrently, the
    hits' reads corked on engine: they go together (C xf_async_cork)."""
    ks = list(unique_keys(keys).values())
    if not ks:
        return {}
    policies.of_many(ttl, beta, policy)  # checks them before any I/O
    b = _Batch(loader, len(ks)) if batch else None

    async def one(k):
        try:
            return await fetch(k, (lambda: b.load_one(k)) if batch else (lambda: loader(k)),
                                     ttl, beta, **policy)
        finally:
            if b is not None:
                b.done_one()

    pending = asyncio.gather(*[one(k) for k in ks], return_exceptions=True)
    engine.cork_turn()  # the tasks' first reads go together, once all have made theirs
    results = await pending
    out, first_error = {}, None
    for k, r in zip(ks, results):
        if isinstance(r, BaseException):
            if not isinstance(r, Exception):
                raise r  # CancelledError, KeyboardInterrupt: at once
            first_error = first_error or r
        else:
            out[k] = r.value
    if first_error is not None:
        raise first_error
    return out

