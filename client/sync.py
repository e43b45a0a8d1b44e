"""A small synchronous facade over the asyncio clients, for scripts.

Each facade owns a private uvloop event loop running in a daemon thread and forwards every
call to it with ``run_coroutine_threadsafe``, so the asyncio client objects are only ever
touched from their own loop. The methods are the async ones without ``await``;
``SyncProducer.send`` returns a :class:`concurrent.futures.Future` of the RecordMetadata.
A facade is ready once constructed, as kafka-python's KafkaProducer and KafkaConsumer are: the
constructor connects (and raises the client's KafkaError when no broker answers, its loop thread
stopped). Use them as context managers, or call ``close()``::

    with SyncProducer("localhost:9092", acks="all") as producer:
        producer.send_and_wait("events", b"hello")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import uvloop

from client.admin import AdminClient
from client.consumer import Consumer, ConsumerConfig
from client.consumer.rebalance_listener import ConsumerRebalanceListener
from client.producer import Producer, ProducerConfig
from client.types import (
    ClusterDescription,
    ConsumerGroupMetadata,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync client method was called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a plain function on the loop thread (client state is only touched there)."""

        async def invoke() -> T:
            return fn(*args)

        return self.run(invoke())

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _SyncClient:
    _client: Any
    _thread: _LoopThread

    def _start_or_stop(self) -> None:
        """Called by every constructor: connect now; on failure stop the loop thread and raise."""
        try:
            self.start()
        except BaseException:
            self._shutdown(self._client.close())
            raise

    def start(self) -> None:
        """Connect (the constructor already did: calling it again does nothing)."""
        self._thread.run(self._client.start())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _shutdown(self, coro: Awaitable) -> None:
        try:
            self._thread.run(coro)
        finally:
            self._thread.stop()


class SyncProducer(_SyncClient):
    def __init__(self, bootstrap_servers, config: ProducerConfig | None = None, **overrides) -> None:
        self._client = Producer(bootstrap_servers, config, **overrides)
        self._thread = _LoopThread("floodmark-sync-producer")
        self._start_or_stop()

    @property
    def metrics(self) -> dict[str, int]:
        return dict(self._client.metrics)

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> concurrent.futures.Future:
        """Append the record (blocking only for metadata or buffer space); the returned future
        resolves to its RecordMetadata or raises KafkaError."""
        result: concurrent.futures.Future = concurrent.futures.Future()

        def copy(future: asyncio.Future) -> None:
            if future.cancelled():
                result.cancel()
            elif future.exception() is not None:
                result.set_exception(future.exception())
            else:
                result.set_result(future.result())

        async def append() -> None:
            future = await self._client.send(topic, value, key, partition, timestamp_ms, headers)
            future.add_done_callback(copy)

        self._thread.run(append())
        return result

    def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> RecordMetadata:
        return self._thread.run(
            self._client.send_and_wait(topic, value, key, partition, timestamp_ms, headers)
        )

    def flush(self) -> None:
        self._thread.run(self._client.flush())

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._client.partitions_for(topic))

    def close(self, timeout: float | None = None) -> None:
        self._shutdown(self._client.close(timeout))


class SyncConsumer(_SyncClient):
    def __init__(self, bootstrap_servers, config: ConsumerConfig | None = None, **overrides) -> None:
        self._client = Consumer(bootstrap_servers, config, **overrides)
        self._thread = _LoopThread("floodmark-sync-consumer")
        self._start_or_stop()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._thread.call(self._client.assign, list(partitions))

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Join the consumer's group for these topics (or a pattern). ``listener``, if given, has
        plain ``on_partitions_revoked(set)`` / ``on_partitions_assigned(set)`` methods, and optionally
        ``on_partitions_lost(set)`` (kafka-python's ConsumerRebalanceListener); they run on the client's loop thread, during ``poll``."""
        wrapped = _ListenerAdapter(listener) if listener is not None else None
        self._thread.call(self._client.subscribe, list(topics), pattern, wrapped)

    def unsubscribe(self) -> None:
        self._thread.run(self._client.unsubscribe())

    def subscription(self) -> set[str]:
        return self._thread.call(self._client.subscription)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit the positions (or the given offsets) and wait for the coordinator's answer."""
        self._thread.run(self._client.commit(offsets))

    def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self._thread.run(self._client.committed(tp))

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._thread.call(self._client.group_metadata)

    def assignment(self) -> set[TopicPartition]:
        return self._thread.call(self._client.assignment)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._thread.call(self._client.seek, tp, offset)

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._thread.run(self._client.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._thread.run(self._client.seek_to_end(*tps))

    def position(self, tp: TopicPartition) -> int:
        return self._thread.run(self._client.position(tp))

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._thread.run(self._client.poll(timeout_ms, max_records))

    def partitions_for_topic(self, topic: str) -> list[int]:
        return self._thread.run(self._client.partitions_for_topic(topic))

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._client.beginning_offsets(list(tps)))

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._client.end_offsets(list(tps)))

    def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        return self._thread.run(self._client.offsets_for_times(dict(times)))

    def close(self) -> None:
        self._shutdown(self._client.close())


class _ListenerAdapter(ConsumerRebalanceListener):
    """A synchronous rebalance listener, called from the asynchronous consumer."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if hasattr(self.listener, "on_partitions_revoked"):
            self.listener.on_partitions_revoked(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The listener's own ``on_partitions_lost`` if it has one, else its revoke callback
        (Kafka's default)."""
        callback = getattr(self.listener, "on_partitions_lost", None) or getattr(
            self.listener, "on_partitions_revoked", None
        )
        if callback is not None:
            callback(lost)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if hasattr(self.listener, "on_partitions_assigned"):
            self.listener.on_partitions_assigned(assigned)


class SyncAdmin(_SyncClient):
    def __init__(
        self, bootstrap_servers, client_id: str = "floodmark-admin", request_timeout_ms: int = 30000
    ) -> None:
        self._client = AdminClient(bootstrap_servers, client_id, request_timeout_ms)
        self._thread = _LoopThread("floodmark-sync-admin")
        self._start_or_stop()

    def create_topics(self, topics: list[NewTopic], timeout_ms: int = 30000, validate_only: bool = False):
        return self._thread.run(self._client.create_topics(topics, timeout_ms, validate_only))

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        timeout_ms: int = 30000,
    ) -> None:
        self._thread.run(
            self._client.create_topic(name, num_partitions, replication_factor, configs, timeout_ms)
        )

    def delete_topics(self, names: list[str], timeout_ms: int = 30000):
        return self._thread.run(self._client.delete_topics(names, timeout_ms))

    def list_topics(self, include_internal: bool = True) -> list[str]:
        return self._thread.run(self._client.list_topics(include_internal))

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        return self._thread.run(self._client.describe_topics(names))

    def describe_cluster(self) -> ClusterDescription:
        return self._thread.run(self._client.describe_cluster())

    def api_versions(self) -> list[dict]:
        return self._thread.run(self._client.api_versions())

    def close(self) -> None:
        self._shutdown(self._client.close())
