"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata, StopReplica, batched so that
one request to a broker carries many partitions' changes (Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch).

* :class:`ControllerChannelManager` (Kafka's ControllerChannelManager): per live broker, one
  :class:`~client.connection.BrokerConnection`, one queue and one sender task. Requests to a
  broker leave in order, one at a time; on connection loss or timeout the sender reconnects and
  resends the same request with backoff, until the broker is removed (it died) or the
  controller resigns.
* :class:`ControllerBrokerRequestBatch`: the state machines add partition states to it while an
  event is processed; at the end of the event (or of a step whose requests must go first) it
  sends one request of each kind per broker, with bodies exactly as client/protocol/api.py
  defines them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from client.connection import BrokerConnection, ConnectionFactory
from client.protocol.api import ApiKey, ControlRequestType, InvalidBody
from client.protocol.errors import ErrorCode, KafkaError, error_name
from client.types import TopicPartition
from controller.context import ControllerContext
from controller.request_bodies import (
    LeaderAndIsrEntry,
    hosted_topics,
    leader_and_isr_body,
    update_metadata_body,
)
from zk.data import PLAINTEXT, BrokerInfo, LeaderIsrAndControllerEpoch

log = logging.getLogger(__name__)

ResponseCallback = Callable[[int, dict], None]  # (broker id, response body)
#: (broker id, response body, request body): LeaderAndIsr answers are read against the request.
LeaderAndIsrCallback = Callable[[int, dict, dict], None]

#: ``controller.request.max.partitions``'s default: partition states per LeaderAndIsr or
#: UpdateMetadata request (about 200 KB of msgpack; docs/design.md "The controller at scale").
MAX_PARTITIONS_PER_REQUEST = 1000
T = TypeVar("T")

#: Failures after which the same request is sent again on a new connection.
_RESEND = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})


@dataclass
class _Request:
    api_key: ApiKey
    body: dict
    callback: ResponseCallback | None


class _BrokerSender:
    """Kafka's RequestSendThread for one broker, as a task."""

    def __init__(
        self,
        controller_id: int,
        broker: BrokerInfo,
        request_timeout_s: float,
        rng: random.Random,
        backoff_initial_s: float,
        backoff_max_s: float,
        listener_name: str = PLAINTEXT,
        connect: ConnectionFactory | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.broker = broker
        self._open_connection = connect
        self.listener_name = listener_name
        self.request_timeout_s = request_timeout_s
        self.rng = rng
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.queue: asyncio.Queue[_Request] = asyncio.Queue()
        self.connection: BrokerConnection | None = None
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-to-broker-{broker.id}"
        )

    async def _run(self) -> None:
        while True:
            request = await self.queue.get()
            response = await self._send_until_answered(request)
            if request.callback is not None:
                try:
                    request.callback(self.broker.id, response)
                except Exception:
                    log.exception("callback for %s to broker %s failed", request.api_key.name, self.broker.id)

    async def _send_until_answered(self, request: _Request) -> dict:
        """The broker's answer, or, when there will be none (a refusal, an answer that does not
        decode or validate, a socket or other error), :func:`error_response` with the reason's
        code: the callback always runs, so e.g. a topic deletion never waits for an answer that
        will not come (Kafka's RequestSendThread calls back with every response it gets)."""
        backoff = self.backoff_initial_s
        failures = 0
        while True:
            try:
                if self.connection is None or not self.connection.is_open:
                    endpoint = self.broker.endpoint_for(self.listener_name)
                    if endpoint is None:  # Kafka: BrokerEndPointNotAvailableException
                        log.error(
                            "broker %s has no endpoint on the inter-broker listener %s (it has %s)",
                            self.broker.id,
                            self.listener_name,
                            ", ".join(e.connection_string() for e in self.broker.endpoints) or "none",
                        )
                        return error_response(ErrorCode.NETWORK_EXCEPTION)
                    self.connection = await (self._open_connection or BrokerConnection.open)(
                        endpoint.host,
                        endpoint.port,
                        client_id=f"controller-{self.controller_id}",
                        timeout=self.request_timeout_s,
                    )
                response = await self.connection.request(
                    request.api_key, request.body, self.request_timeout_s
                )
            except KafkaError as exc:
                if exc.code not in _RESEND:
                    log.error("broker %s refused %s: %s", self.broker.id, request.api_key.name, exc)
                    return error_response(exc.code)
                failures += 1
                self._drop_connection()
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(
                    level, "%s to broker %s failed (%s); retrying", request.api_key.name, self.broker.id, exc
                )
            except (InvalidBody, OSError) as exc:
                log.error("bad %s exchange with broker %s: %s", request.api_key.name, self.broker.id, exc)
                self._drop_connection()
                code = ErrorCode.NETWORK_EXCEPTION if isinstance(exc, OSError) else ErrorCode.CORRUPT_MESSAGE
                return error_response(code)
            except Exception:
                log.exception("%s to broker %s failed", request.api_key.name, self.broker.id)
                self._drop_connection()
                return error_response(ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                if failures > 1:
                    log.info("broker %s reachable again after %d failed attempts", self.broker.id, failures)
                return response
            await asyncio.sleep(backoff * (0.8 + 0.4 * self.rng.random()))
            backoff = min(backoff * 2, self.backoff_max_s)

    def _drop_connection(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self._drop_connection()


class ControllerChannelManager:
    """Connections from the active controller to every live broker (itself included)."""

    def __init__(
        self,
        controller_id: int,
        request_timeout_s: float,
        rng: random.Random,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 2.0,
        listener_name: str = PLAINTEXT,
        connect: ConnectionFactory | None = None,
    ) -> None:
        """``connect`` opens the connection to each broker (None: BrokerConnection.open; the
        simulator passes its network's)."""
        self.controller_id = controller_id
        self.listener_name = listener_name
        self._connect = connect
        self.request_timeout_s = request_timeout_s
        self.rng = rng
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._senders: dict[int, _BrokerSender] = {}
        self._stopping: dict[asyncio.Task, None] = {}  # insertion-ordered: awaited in start order

    @property
    def broker_ids(self) -> set[int]:
        return set(self._senders)

    def add_broker(self, broker: BrokerInfo) -> None:
        existing = self._senders.get(broker.id)
        if existing is not None:
            if existing.broker == broker:
                return
            self.remove_broker(broker.id)  # it re-registered, perhaps at another address
        self._senders[broker.id] = _BrokerSender(
            self.controller_id,
            broker,
            self.request_timeout_s,
            self.rng,
            self.backoff_initial_s,
            self.backoff_max_s,
            self.listener_name,
            self._connect,
        )

    def remove_broker(self, broker_id: int) -> None:
        """Stop sending to a broker; what is queued for it is dropped (it is gone)."""
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            task = asyncio.get_running_loop().create_task(sender.stop())
            self._stopping[task] = None
            task.add_done_callback(lambda done: self._stopping.pop(done, None))

    def send(
        self, broker_id: int, api_key: ApiKey, body: dict, callback: ResponseCallback | None = None
    ) -> bool:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.debug("not sending %s to broker %s: not live", api_key.name, broker_id)
            return False
        sender.queue.put_nowait(_Request(api_key, body, callback))
        return True

    def queued(self, broker_id: int) -> int:
        sender = self._senders.get(broker_id)
        return 0 if sender is None else sender.queue.qsize()

    async def shutdown(self) -> None:
        senders, self._senders = list(self._senders.values()), {}
        await asyncio.gather(*(s.stop() for s in senders), *list(self._stopping), return_exceptions=True)


class ControllerBrokerRequestBatch:
    """Collects what each broker must be told during one step of an event; :meth:`send` sends it
    (and empties it), one LeaderAndIsr, one UpdateMetadata and one StopReplica (per delete flag)
    per broker, in that order. An event that must order its steps sends after each."""

    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        send: Callable[[int, ApiKey, dict, ResponseCallback | None], object],
        leader_and_isr_callback: LeaderAndIsrCallback | None = None,
        listener_name: str = PLAINTEXT,
        max_partitions: int = MAX_PARTITIONS_PER_REQUEST,
    ) -> None:
        self.controller_id = controller_id
        #: ``controller.request.max.partitions``: partition states per LeaderAndIsr / UpdateMetadata
        self.max_partitions = max_partitions
        self.context = context
        #: The controller's inter-broker listener: the host/port of each broker entry (KIP-103).
        self.listener_name = listener_name
        self._send = send
        self._leader_and_isr_callback = leader_and_isr_callback or (
            lambda b, r, _req: log_response_errors(b, r)
        )
        self.leader_and_isr: dict[int, dict[TopicPartition, LeaderAndIsrEntry]] = {}
        self.elected: set[TopicPartition] = set()  # partitions whose leader an election chose
        self.update_metadata: dict[int, set[TopicPartition]] = {}
        self.stop_replica: dict[tuple[int, bool], dict[TopicPartition, None]] = {}
        self.stop_replica_callbacks: dict[tuple[int, bool], ResponseCallback] = {}
        #: KIP-516: broker -> the ``hosted_topics`` of its next LeaderAndIsr, sent as FULL
        self.full: dict[int, list[dict]] = {}

    def is_empty(self) -> bool:
        return not (self.leader_and_isr or self.update_metadata or self.stop_replica or self.full)

    def clear(self) -> None:
        self.elected.clear()
        self.leader_and_isr.clear()
        self.update_metadata.clear()
        self.stop_replica.clear()
        self.stop_replica_callbacks.clear()
        self.full.clear()

    def new_batch(self) -> None:
        if not self.is_empty():
            log.warning("controller request batch was not empty at the start of an event; discarding it")
            self.clear()

    # -- adding ----------------------------------------------------------------------------------
    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderIsrAndControllerEpoch,
        replicas: Sequence[int],
        is_new: bool = False,
        elected: bool = False,
    ) -> None:
        """Tell ``broker_ids`` the partition's leadership; every live broker also gets it in
        UpdateMetadata. ``elected``: a leader election chose this leader; a broker's requests
        carry the elected partitions first (:meth:`requests`)."""
        if elected:
            self.elected.add(tp)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self.leader_and_isr.setdefault(broker_id, {})
            previous = per_broker.get(tp)
            per_broker[tp] = LeaderAndIsrEntry(
                state, list(replicas), is_new or (previous is not None and previous.is_new)
            )
        self.add_update_metadata(self.context.live_or_shutting_down_broker_ids, [tp])

    def add_full_leader_and_isr(self, broker_ids: Iterable[int]) -> None:
        """Make the first LeaderAndIsr this batch sends each of ``broker_ids`` a FULL one (KIP-516):
        its ``hosted_topics`` are what the context assigns the broker *now* (taken at a broker's
        start-up and at failover, between events), and the broker deletes its logs of anything
        else as strays; sent even without partition states (:func:`hosted_topics`)."""
        self.full.update(hosted_topics(self.context, broker_ids))

    def add_update_metadata(self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition]) -> None:
        """Send ``partitions``' current state to ``broker_ids`` (an empty ``partitions`` still sends
        the live broker list)."""
        partitions = list(partitions)
        for broker_id in broker_ids:
            self.update_metadata.setdefault(broker_id, set()).update(partitions)

    def add_stop_replica(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        delete_partition: bool,
        callback: ResponseCallback | None = None,
    ) -> None:
        for broker_id in broker_ids:
            key = (broker_id, delete_partition)
            self.stop_replica.setdefault(key, {})[tp] = None
            if callback is not None:
                self.stop_replica_callbacks[key] = callback

    # -- sending ---------------------------------------------------------------------------------
    def send(self, controller_epoch: int) -> None:
        """Send what the batch holds and empty it (see :meth:`requests`)."""
        try:
            for broker_id, api_key, body, callback in self.requests(controller_epoch):
                self._send(broker_id, api_key, body, callback)
        finally:
            self.clear()

    async def send_async(self, controller_epoch: int) -> None:
        """:meth:`send`, yielding to the event loop after each request when a broker's states take
        more than one request: building and queueing 10,000 partitions' requests for every
        broker is then never one long step (docs/design.md "The controller at
        scale (issue 25)"). Nothing else changes the batch or the context meanwhile: only the
        controller's event task does, and it is here. A batch that fits one request per broker
        is sent without yielding, exactly as :meth:`send` sends it."""
        large = self.largest_request() > self.max_partitions
        try:
            for broker_id, api_key, body, callback in self.requests(controller_epoch):
                self._send(broker_id, api_key, body, callback)
                if large:
                    await asyncio.sleep(0)
        finally:
            self.clear()

    def largest_request(self) -> int:
        """The most partition states one broker's LeaderAndIsr or UpdateMetadata would carry unsplit."""
        sizes = [len(e) for e in self.leader_and_isr.values()] + [
            len(p) for p in self.update_metadata.values()
        ]
        return max(sizes, default=0)

    def requests(self, controller_epoch: int) -> Iterator[tuple[int, ApiKey, dict, ResponseCallback | None]]:
        """Each request of the batch, built when asked for: LeaderAndIsr, then UpdateMetadata, then
        StopReplica, per broker in id order. A broker's LeaderAndIsr and UpdateMetadata states go
        in requests of at most ``max_partitions`` partitions each
        (``controller.request.max.partitions``), the partitions of leader elections first, each part
        in partition order; a broker applies each on its own, as Kafka's brokers do. StopReplica is not split: its entries are a name and a number,
        and topic deletion accounts for its answers per request
        (:class:`controller.topic_deletion.StopReplicaDeletionCallback`)."""
        for broker_id in sorted(set(self.leader_and_isr) | set(self.full)):
            entries = self.leader_and_isr.get(broker_id, {})
            # elected partitions first: after a failover at scale a broker's states take many
            # requests, applied one after another, and a partition without a leader must not wait
            # behind thousands of ISR updates of partitions that have one
            ordered = sorted(entries.items(), key=lambda item: (item[0] not in self.elected, item[0]))
            for i, chunk in enumerate(_chunks(ordered, self.max_partitions) or [[]]):
                body = leader_and_isr_body(self, controller_epoch, dict(chunk))
                body["broker_epoch"] = self._broker_epoch(broker_id)
                if i == 0 and broker_id in self.full:  # KIP-516: the first says what it hosts
                    body["type"] = ControlRequestType.FULL
                    body["hosted_topics"] = self.full[broker_id]
                callback = functools.partial(self._on_leader_and_isr, body=body)
                yield broker_id, ApiKey.LEADER_AND_ISR, body, callback
        for broker_id, partitions in sorted(self.update_metadata.items()):
            for chunk in _chunks(sorted(partitions), self.max_partitions) or [[]]:
                body = update_metadata_body(self, controller_epoch, chunk)
                body["broker_epoch"] = self._broker_epoch(broker_id)
                yield broker_id, ApiKey.UPDATE_METADATA, body, log_response_errors
        for (broker_id, delete), partitions in sorted(self.stop_replica.items()):
            body = {
                "controller_id": self.controller_id,
                "controller_epoch": controller_epoch,
                "broker_epoch": self._broker_epoch(broker_id),
                "delete_partitions": delete,
                "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)],
            }
            callback = self.stop_replica_callbacks.get((broker_id, delete), log_response_errors)
            yield broker_id, ApiKey.STOP_REPLICA, body, callback

    def _on_leader_and_isr(self, broker_id: int, response: dict, body: dict) -> None:
        self._leader_and_isr_callback(broker_id, response, body)

    def _broker_epoch(self, broker_id: int) -> int:
        """KIP-380: the addressee's broker epoch as this controller knows it; the broker refuses a
        request addressed to an older incarnation of itself (STALE_BROKER_EPOCH)."""
        broker = self.context.live_brokers.get(broker_id)
        return broker.epoch if broker is not None else -1


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive pieces of at most ``size``; none for no items."""
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


def error_response(code: int) -> dict:
    """The body a callback gets when a request got no usable answer: the whole request failed."""
    return {"error_code": int(code), "partitions": []}


def log_response_errors(broker_id: int, response: dict) -> None:
    if response.get("error_code"):
        log.warning("broker %s answered %s", broker_id, error_name(response["error_code"]))
    failed: dict[int, list[str]] = {}  # one line per error code: a failover's 10,000 fenced epochs
    for p in response.get("partitions", []):
        if p.get("error_code"):
            failed.setdefault(p["error_code"], []).append(f"{p.get('topic')}-{p.get('partition')}")
    for code, names in sorted(failed.items()):
        more = f" and {len(names) - 10} more" if len(names) > 10 else ""
        log.info("broker %s: %s for %s%s", broker_id, error_name(code), ", ".join(names[:10]), more)
