"""Committed records straight from a live cluster, as raw batches (docs/design.md "Verification job").

The verification job needs what a consumer cannot give it: each record's batch header (producer
id and epoch, base sequence, partition leader epoch, whether the CRC holds). So it does what the
consumer (:mod:`client.consumer`) does underneath, with the client library only: find the
partition's leader in the metadata (:class:`client.metadata.Cluster`), send Fetch requests as an
ordinary consumer (replica id -1, so the broker answers with batches wholly below the high
watermark) from the log start offset up to a high watermark fixed beforehand with ListOffsets,
and decode the bytes with :mod:`client.protocol.records`.

Retriable errors (leadership moved, connection lost, timeouts) refresh the metadata and retry
with a backoff until ``timeout_s`` passes; anything else is raised as a KafkaError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from client.consumer import Consumer, whole_batches_end
from client.metadata import Cluster
from client.protocol.api import CONSUMER_REPLICA_ID, ApiKey
from client.protocol.errors import INVALIDATES_METADATA, RETRIABLE, ErrorCode, KafkaError
from client.protocol.records import compute_crc, iter_batches
from client.types import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
CLIENT_ID = "floodmark-verify"
DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
#: Errors after which the fetch refreshes metadata and tries again.
RETRY = RETRIABLE | INVALIDATES_METADATA | {ErrorCode.NETWORK_EXCEPTION}


async def partition_offsets(
    bootstrap: str, topics: Iterable[str], timeout_ms: int = 30000
) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (log start offset, high watermark)}`` for every partition of ``topics``."""
    offsets, _ = await partition_layout(bootstrap, topics, timeout_ms)
    return offsets


async def partition_layout(
    bootstrap: str, topics: Iterable[str], timeout_ms: int = 30000
) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[tuple[str, int], list[int]]]:
    """:func:`partition_offsets` and the assignment in the metadata: ``{(topic, partition):
    [replica broker ids]}``."""
    consumer = Consumer(bootstrap, client_id=CLIENT_ID, request_timeout_ms=timeout_ms)
    await consumer.start()
    try:
        tps: list[TopicPartition] = []
        replicas: dict[tuple[str, int], list[int]] = {}
        for topic in sorted(set(topics)):
            for partition in await consumer.partitions_for_topic(topic):
                tps.append(TopicPartition(topic, partition))
            info = consumer.cluster.topics.get(topic)
            for partition, p in (info.partitions if info else {}).items():
                replicas[(topic, partition)] = sorted(p.replicas)
        if not tps:
            return {}, replicas
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        return {(tp.topic, tp.partition): (starts[tp], ends[tp]) for tp in tps}, replicas
    finally:
        await consumer.close()


async def fetch_batches(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout_s: float = 60.0,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    retry_backoff_s: float = 0.2,
) -> AsyncIterator[tuple[bytes, Any, bool]]:
    """Yield ``(batch bytes, BatchHeader, crc_ok)`` for every batch of ``topic``-``partition``
    holding offsets in ``[start, end)``, in offset order, read from the partition's leader."""
    tp = TopicPartition(topic, partition)
    cluster = Cluster(bootstrap, CLIENT_ID, request_timeout_ms=int(timeout_s * 1000))
    loop = asyncio.get_running_loop()
    offset = start
    max_bytes = fetch_bytes
    deadline = loop.time() + timeout_s
    try:
        await cluster.refresh([topic])
        while offset < end:
            try:
                data = await _fetch_once(cluster, tp, offset, max_bytes, timeout_s)
            except KafkaError as exc:
                if exc.code not in RETRY:
                    raise
                if loop.time() > deadline:
                    raise KafkaError(exc.code, f"reading {tp} at offset {offset}: {exc.message}") from None
                log.debug("retrying fetch of %s at %d after %s", tp, offset, exc)
                await asyncio.sleep(retry_backoff_s)
                with contextlib.suppress(KafkaError):
                    await cluster.refresh([topic])
                continue
            view = memoryview(data)
            whole = whole_batches_end(view)
            if whole == 0:
                if not data:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"{tp}: no data at offset {offset} though the high watermark was {end}",
                    )
                max_bytes *= 2  # one batch larger than we asked for: ask for more
                continue
            progressed = False
            for pos, header in iter_batches(view[:whole], check_crc=False):
                if header.next_offset <= offset:
                    continue
                if header.base_offset >= end:
                    offset = end
                    break
                batch = bytes(view[pos : pos + header.size])
                yield batch, header, compute_crc(batch) == header.crc
                offset = header.next_offset
                progressed = True
            if progressed:
                deadline = loop.time() + timeout_s
    finally:
        await cluster.close()


async def _fetch_once(
    cluster: Cluster, tp: TopicPartition, offset: int, max_bytes: int, timeout_s: float
) -> bytes:
    leader = cluster.leader_for(tp)
    if leader is None:
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader known for {tp}")
    conn = await cluster.connection(leader)
    body = {
        "replica_id": CONSUMER_REPLICA_ID,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "topics": [
            {
                "topic": tp.topic,
                "partitions": [
                    {
                        "partition": tp.partition,
                        "fetch_offset": offset,
                        "current_leader_epoch": cluster.leader_epoch_for(tp),
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
    }
    response = await conn.request(ApiKey.FETCH, body, timeout=timeout_s)
    top = response.get("error_code") or 0
    for t in response["topics"]:
        for p in t["partitions"]:
            if t["topic"] != tp.topic or p["partition"] != tp.partition:
                continue
            code = top or p["error_code"]
            if code != ErrorCode.NONE:
                if code in RETRY:
                    cluster.invalidate()
                raise KafkaError(code, f"fetch of {tp} at offset {offset} from broker {leader} failed")
            return p["records"]
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"fetch response from broker {leader} lacks {tp}")


def iterate_async(agen: AsyncIterator[T]) -> Iterator[T]:
    """Drive an async generator from synchronous code (a Spark data source's ``read``) on a
    private event loop, one item at a time, so rows stream instead of piling up."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                item = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                break
            yield item
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(agen.aclose())
        loop.close()


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous code. When the calling thread already runs
    an event loop (the job called from async code, say ``floodmark chaos run``), the coroutine
    runs on a helper thread's own loop instead of failing."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.close()
    with ThreadPoolExecutor(1, thread_name_prefix="floodmark-verify") as pool:
        return pool.submit(run_sync, coro).result()
