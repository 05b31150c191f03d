"""The cache writer: one thread, a bounded queue, group commit, and the index updated after.

Role: take jobs from ``store.Store.submit``, run them on the single writer thread in batches
(``batching``: one transaction per executor hop), and apply each committed outcome to the index
on the loop. Counts what happens (``Stats``) and logs a failing disk once per episode.

Invariants:

- Writes go through one single-thread executor, so writers are serialised and decisions see the
  state left by the previous write. Jobs queued while a hop runs are applied together in the
  next hop, in one transaction (group commit), which is what makes watch ingest fast.
- The index is mutated only on the event loop, and only between writer hops, with the outcome
  of a committed transaction: it always describes a committed disk state, and a failed
  transaction leaves both untouched.

Dangers: submission is bounded in bytes; over the bound a job is refused (the tee then drops
that response's caching and counts it). Disk errors (full, I/O) fail the whole batch: it is
counted, logged once per episode, and the hub keeps serving.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import ctypes
import ctypes.util
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Callable

import diskcache

from yurthub.cache import (
    applying,
    batching,
    entries,
    failures,
    framing,
    index,
    jobs,
    keys,
    sealing,
    transcoding,
)

logger = logging.getLogger(__name__)

# Seconds between two "cache write failed" warnings of a flapping disk.
WARN_EVERY = 300.0

GATHER_DELAY = 0.005
"""Seconds a small write waits for others to share its executor hop and transaction."""
GATHER_BYTES = 256 << 10
"""Queued bytes past which the writer starts at once."""


_TRIM_AFTER = 1 << 20
"""Bytes of a batch after which the writer gives freed heap back (a list of ~300 pods and up;
malloc_trim costs a few ms at most)."""


def _load_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


_MALLOC_TRIM = _load_trim()


def trim_heap() -> None:
    """Give freed heap back to the OS after a big list (glibc keeps it otherwise).

    A 10,000-pod list is decoded item by item; the thousands of freed ~2 KB blocks stay mapped
    by glibc's malloc and the hub's RSS would keep the high-water mark for good.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM()


@dataclasses.dataclass
class Stats:
    """Counters for metrics and ``edgehub cache stats``; mutated on the loop only."""

    batches: int = 0
    jobs_applied: int = 0
    objects_written: int = 0
    objects_removed: int = 0
    write_failures: int = 0
    """Jobs lost because their transaction failed (disk full, I/O error) or the writer crashed:
    every job of a failed batch counts (``node_yurthub_cache_write_failures_total`` and
    ``/v1/status``'s ``writeFailures``; ``error_keys`` holds the objects and list records
    among them)."""
    refused_jobs: int = 0
    """Jobs refused because the write queue was over its byte bound."""
    bad_bodies: int = 0
    """Responses the cache could not interpret (not JSON, wrong shape)."""
    dropped_responses: int = 0
    """Responses whose caching the tee gave up (over a size bound, queue full)."""
    superseded_lists: int = 0
    """Queued lists dropped because a newer whole list of the same key came in."""
    corrupt_entries: int = 0
    """Stored entries dropped because they failed their checksum or were not this hub's (at
    open, or when read)."""
    refused_objects: int = 0
    """Objects not stored because their body named another object than the request's URL, or
    lay outside their list's namespace."""
    error_keys: set[str] = dataclasses.field(default_factory=set)
    """Keys (objects and list records) whose last write failed (YurtHub's "error keys")."""
    last_error: str = ""


def _whole_list_kind(job: jobs.PutList) -> str:
    if job.protobuf:
        return transcoding.whole_list_kind(job.body)
    return framing.whole_list_kind(job.body)


class Writer:
    """The writer of one store: its thread, its queue and the outcomes it applies."""

    def __init__(
        self,
        cache: diskcache.Cache,
        cache_index: index.Index,
        transcoder: transcoding.Transcoder,
        stats: Stats,
        write_failures: failures.Failures,
        max_pending_bytes: int,
        *,
        sealer: sealing.Sealer = sealing.PLAIN,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self._sealer = sealer
        self._index = cache_index
        self._transcoder = transcoder
        self._stats = stats
        self._failures = write_failures
        self._clock = clock
        """Wall time of an outcome (``failures``: "since" is shown to operators)."""
        self._max_pending = max_pending_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-writer")
        # Writer state (touched by the writer thread only).
        self._pages: dict[keys.ListKey, batching.PageSession] = {}
        # Pump state (loop only).
        self._pending: collections.deque[jobs.Job] = collections.deque()
        self._pending_bytes = 0
        self._in_flight: asyncio.Future[batching.Outcome] | None = None
        self._in_flight_jobs = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._submitted = 0
        self._finished = 0
        """Jobs queued so far, and of those applied, failed, superseded or dropped: a reader
        waits for the ones queued before it (``settled``), never for later ones."""
        self._progressed = asyncio.Event()
        self._gather: asyncio.TimerHandle | None = None
        self._closed = False
        self._warned_at: float | None = None
        self._dropping: set[str] = set()

    # --- life cycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def stop(self) -> None:
        """Take no more jobs and forget the queued ones (after ``flush``)."""
        self._closed = True
        self._finished += len(self._pending)
        self._pending.clear()
        self._progress()
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None

    async def close_cache(self) -> None:
        """Close the database on the writer thread (after any hop in flight)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._cache.close)

    def shutdown(self) -> None:
        # The thread exits after its current item; its SQLite connection dies with it.
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def flush(self, grace: float | None = None) -> bool:
        """Wait until every job submitted so far is applied (or failed). False on timeout."""
        try:
            async with asyncio.timeout(grace):
                while self._pending or self._in_flight is not None:
                    await self._idle.wait()
                    await asyncio.sleep(0)
        except TimeoutError:
            return False
        return True

    async def settled(self, grace: float) -> bool:
        """Wait until every job queued before this call is applied (or failed, superseded,
        dropped), not for later ones: a read of what the hub has just answered finds it. False
        when ``grace`` passed first (the read goes on with what the cache has)."""
        goal = self._submitted
        if self._finished >= goal:
            return True
        try:
            async with asyncio.timeout(grace):
                while self._finished < goal and not self._closed:
                    await self._progressed.wait()
        except TimeoutError:
            return False
        return True

    def _progress(self) -> None:
        progressed, self._progressed = self._progressed, asyncio.Event()
        progressed.set()

    @property
    def pending_bytes(self) -> int:
        """Bytes queued for the writer (not yet in a batch)."""
        return self._pending_bytes

    @property
    def max_pending_bytes(self) -> int:
        return self._max_pending

    def submit(self, job: jobs.Job) -> bool:
        """Queue a write; False (and nothing queued) when the queue is over its byte bound."""
        if self._closed:
            return False
        size = job.size
        if isinstance(job, jobs.PutList):
            self._drop_superseded(job)
        over = self._pending_bytes + size > self._max_pending
        if over and self._pending and self._in_flight is None:
            self._kick()  # what gathers goes now; the bound is on what still waits after it
        if over and self._pending:
            self._stats.refused_jobs += 1
            return False
        self._pending.append(job)
        self._submitted += 1
        self._pending_bytes += size
        self._idle.clear()
        if self._in_flight is None and self._gather is None:
            if self._pending_bytes >= GATHER_BYTES:
                self._kick()
            else:
                # Small jobs (the answers to gets, watch events) wait a moment for company:
                # one executor hop and at most one transaction for all of them.
                loop = asyncio.get_running_loop()
                self._gather = loop.call_later(GATHER_DELAY, self._gathered)
        return True

    def _gathered(self) -> None:
        self._gather = None
        self._kick()

    def _drop_superseded(self, job: jobs.PutList) -> None:
        """A whole list makes a queued whole list of the same key pointless: drop that one.

        Back-to-back lists (a client relisting, kubectl in a loop) otherwise queue tens of MB
        each and cost a parse each, for a state the newest one replaces anyway.
        """
        kind = "" if job.continued is True else _whole_list_kind(job)
        if not kind:
            return
        for queued in list(self._pending):
            if (
                isinstance(queued, jobs.PutList)
                and queued.list_key == job.list_key
                and queued.continued is not True
                and _whole_list_kind(queued) == kind
            ):
                self._pending.remove(queued)
                self._pending_bytes -= queued.size
                self._stats.superseded_lists += 1
                self._finished += 1

    def _kick(self) -> None:
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        if self._in_flight is not None:
            return
        if not self._pending or self._closed:
            self._idle.set()
            return
        batch: list[jobs.Job] = []
        size = 0
        # A batch is everything queued, up to a byte budget so one hop stays short.
        while self._pending and (not batch or size < 16 << 20):
            job = self._pending.popleft()
            size += job.size
            batch.append(job)
        self._pending_bytes -= size
        self._idle.clear()
        loop = asyncio.get_running_loop()
        self._in_flight_jobs = len(batch)
        self._in_flight = loop.run_in_executor(self._pool, self._run_batch, batch)
        self._in_flight.add_done_callback(self._batch_done)

    def _batch_done(self, future: asyncio.Future[batching.Outcome]) -> None:
        self._in_flight = None
        done, self._in_flight_jobs = self._in_flight_jobs, 0
        self._finished += done
        self._progress()
        try:
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                # _run_batch catches what it expects; anything else is a bug, keep serving.
                # Its jobs are lost all the same: failed writes, as a disk error's are.
                logger.error("cache writer crashed", exc_info=exc)
                self._stats.last_error = f"writer crashed: {exc!r}"
                self._stats.write_failures += done
                self._failures.failed(f"the cache writer crashed ({exc!r})", self._clock())
                return
            self._apply(future.result())
        finally:
            if not self._pending or self._closed:
                self._idle.set()
            self._kick()

    def _apply(self, outcome: batching.Outcome) -> None:
        self._stats.batches += 1
        self._stats.bad_bodies += outcome.bad_bodies
        self._stats.refused_objects += outcome.refused_objects
        if outcome.corrupt:
            self.drop_corrupt(sorted(outcome.corrupt))
        if outcome.error:
            # Every job of the batch is lost: each counts (the metric and /v1/status agree).
            self._stats.write_failures += outcome.jobs
            self._stats.last_error = outcome.error
            if len(self._stats.error_keys) < 100_000:
                # What the batch lost: its objects and the records of its lists (a list that
                # only claimed objects already stored changes no object, only its record).
                self._stats.error_keys.update(str(k) for k in outcome.objects)
                self._stats.error_keys.update(str(k) for k in outcome.lists)
            was_failing = self._failures.failing
            self._failures.failed(
                outcome.reason or outcome.error, self._clock(), outcome.whole_lists
            )
            if not was_failing:
                now = time.monotonic()
                # A nearly full disk flaps (small batches fit, big ones fail): one warning per
                # WARN_EVERY, the rest is counted (node_yurthub_cache_write_failures_total).
                if self._warned_at is None or now - self._warned_at >= WARN_EVERY:
                    self._warned_at = now
                    logger.warning(
                        "cache write failed, the cache falls behind "
                        "(online traffic is unaffected): %s",
                        outcome.error,
                    )
                else:
                    logger.debug("cache write failed again: %s", outcome.error)
            return
        if outcome.committed:
            if self._failures.failing:
                logger.debug("cache writes succeed again")
            self._failures.succeeded(outcome.lists)
        self._stats.jobs_applied += outcome.jobs
        for key, entry in outcome.objects.items():
            if self._stats.error_keys:
                self._stats.error_keys.discard(str(key))
            if entry is None:
                self._index.del_entry(key)
                self._stats.objects_removed += 1
            else:
                self._index.set_entry(key, entry)
                self._stats.objects_written += 1
        for list_key in outcome.dropped_lists:
            self._index.lists.pop(list_key, None)
        self._index.lists.update(outcome.lists)
        if self._stats.error_keys:
            self._stats.error_keys.difference_update(
                str(k) for k in (*outcome.lists, *outcome.dropped_lists)
            )
        self._index.documents -= outcome.dropped_documents
        self._index.documents |= outcome.documents
        self._dropping -= outcome.dropped

    def drop_corrupt(self, names: list[str]) -> None:
        """Corrupt rows met by a read: counted, logged, and dropped by the writer (with every
        list record that needed them: such a list is no longer whole)."""
        fresh = [n for n in names if n not in self._dropping]
        if not fresh:
            return
        self._dropping.update(fresh)
        self._stats.corrupt_entries += len(fresh)
        logger.warning(
            "dropping %d corrupt cache entries (answered as cache misses): %s",
            len(fresh),
            ", ".join(fresh[:5]),
        )
        self.submit(jobs.DropCorrupt(tuple(fresh)))

    # --- the writer thread -------------------------------------------------------------------

    def _run_batch(self, batch: list[jobs.Job]) -> batching.Outcome:
        big = sum(job.size for job in batch) > _TRIM_AFTER
        outcome = self._write_batch(batch)
        if big:
            # Once the batch's state and its jobs are gone (the executor holds this list until
            # we return; a body on the heap would stay mapped); also after a batch that
            # changed nothing: a relist decodes as much as a first list.
            batch.clear()
            trim_heap()
        return outcome

    def _write_batch(self, batch: list[jobs.Job]) -> batching.Outcome:
        batch_state = batching.Batch(self._index, self._transcoder, self._pages)
        for queued in batch:
            job = self._as_json(queued)
            if job is None:
                batch_state.outcome.bad_bodies += 1
                continue
            try:
                batch_state.run(job)
            except (framing.BadBody, applying.NotStorable, entries.CorruptEntry) as e:
                batch_state.outcome.bad_bodies += 1
                logger.debug("cache skipped a response body: %s", e)
        outcome = batch_state.outcome
        outcome.jobs = len(batch)
        if batch_state.unchanged():
            # Most gets repeat what is stored (same version, same claim): no transaction.
            return outcome
        try:
            with self._cache.transact():
                batch_state.write(self._cache, self._sealer)
        except batching.CorruptStored as e:
            # A header-only rewrite met a stored body that rotted: the batch is lost (counted as
            # a failed write, the cache stays as it was) and that row is dropped next.
            outcome.error = f"corrupt stored entry {e.name!r}"
            outcome.reason = "a stored entry failed its check (being dropped)"
            outcome.corrupt.add(e.name)
            self._pages.clear()
        except (sqlite3.Error, OSError, diskcache.Timeout) as e:
            outcome.error = f"{type(e).__name__}: {e}"
            outcome.reason = failures.describe(e)
            self._pages.clear()
        else:
            outcome.committed = True
        return outcome

    def _as_json(self, job: jobs.Job) -> jobs.Job | None:
        """A protobuf job as the JSON job it stands for (writer thread); None: not storable.
        Protobuf objects, lists, streaming lists and watch frames stay as they are (stored as
        received, the index's fields read from the wire); views (Tables, metadata only) and
        what is no list of the built-in API are converted here."""
        if isinstance(job, jobs.PutList) and job.protobuf and transcoding.list_kind(job.body):
            return job
        if isinstance(job, jobs.PutObject) and job.protobuf and transcoding.storable(job.body):
            return job
        if isinstance(job, jobs.PutObject | jobs.PutList) and job.protobuf:
            body = self._transcoder.body(job.body)
            return None if body is None else dataclasses.replace(job, body=body, protobuf=False)
        return job
