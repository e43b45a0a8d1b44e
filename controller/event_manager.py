"""The controller's single event queue (Kafka's ControllerEventManager; docs/architecture.md
"The control path, file by file").

ZooKeeper watches fire on kazoo's threads; :class:`~zk.bridge.ZkBridge` forwards them to the
event loop, where they become :class:`ControllerEvent` objects on one ``asyncio.Queue``. One
task takes them off and processes them one at a time, so the controller's state is never
touched by two handlers at once, even though handlers await ZooKeeper.

An event may carry a future, completed when the event has been processed (how callers such as
``controlled_shutdown`` wait for an answer).

When the ZooKeeper session ends, :meth:`ControllerEventManager.clear_and_put` drops the backlog
and queues ``Expire`` first (Kafka's ControllerEventManager.clearAndPut): events queued in the old
session must not run against the old context as an active controller (docs/guarantees.md
"Fencing: stale controllers and stale leaders").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


@dataclass
class ControllerEvent:
    done: asyncio.Future | None = field(default=None, kw_only=True, repr=False, compare=False)

    @property
    def name(self) -> str:
        return type(self).__name__

    def complete(self, result: Any = None, exc: BaseException | None = None) -> None:
        if self.done is None or self.done.done():
            return
        if exc is not None:
            self.done.set_exception(exc)
        else:
            self.done.set_result(result)


@dataclass
class Startup(ControllerEvent):
    """Register the /controller watch and try to become controller."""


@dataclass
class Reelect(ControllerEvent):
    """/controller was deleted (or our watches were dropped): resign if need be, run again."""


@dataclass
class ControllerChange(ControllerEvent):
    """/controller was created or changed: resign if it is no longer us."""


@dataclass
class Expire(ControllerEvent):
    """Our ZooKeeper session ended: stop acting as controller."""


@dataclass
class BrokerChange(ControllerEvent):
    """/brokers/ids children changed."""


@dataclass
class TopicChange(ControllerEvent):
    """/brokers/topics children changed."""


@dataclass
class PartitionModifications(ControllerEvent):
    """/brokers/topics/<topic> data changed: partitions were added."""

    topic: str = ""


@dataclass
class TopicDeletion(ControllerEvent):
    """/admin/delete_topics children changed."""


@dataclass
class TopicDeletionStopReplicaResponse(ControllerEvent):
    """A broker answered a StopReplica(delete=true)."""

    broker_id: int = -1
    partition_errors: dict = field(default_factory=dict)


@dataclass
class IsrChangeNotification(ControllerEvent):
    """/isr_change_notification children changed."""


@dataclass
class LogDirEventNotification(ControllerEvent):
    """A child was added under /log_dir_event_notification (KIP-112): a broker lost a log dir."""


@dataclass
class LeaderAndIsrResponseReceived(ControllerEvent):
    """A broker answered LeaderAndIsr: partitions it answered KAFKA_STORAGE_ERROR for are on an
    offline log dir (KIP-112), those it answered NONE for are not."""

    broker_id: int
    response: dict


@dataclass
class LeaderAndIsrResend(ControllerEvent):
    """Partitions a broker could not apply: send it their current leadership again."""

    broker_id: int
    partitions: list


@dataclass
class PartitionReassignment(ControllerEvent):
    """/admin/reassign_partitions was created or changed."""


@dataclass
class PreferredReplicaElection(ControllerEvent):
    """/admin/preferred_replica_election was created."""


@dataclass
class ControlledShutdown(ControllerEvent):
    """A broker asks to move its leaderships away before it exits."""

    broker_id: int = -1
    broker_epoch: int = -1  # KIP-380: -1 = unknown (not checked)


@dataclass
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The periodic leader-imbalance check (auto.leader.rebalance.enable)."""


def retry_of(event: ControllerEvent) -> ControllerEvent | None:
    """The event that does again what a failed ``event`` left undone, or None when a failure
    needs no retry. Every event retried here re-reads ZooKeeper and re-registers its watch, so
    running it twice is harmless, and a watch lost with a failed read is set again (Kafka
    relies on its ZooKeeper client never surfacing a connection drop; ours can still surface
    one after ``retry_timeout_s`` or a session expiry: docs/design.md "The controller under
    ZooKeeper blips")."""
    if isinstance(event, Startup | Reelect | ControllerChange):
        return Reelect()
    if isinstance(event, PartitionModifications):
        return PartitionModifications(topic=event.topic)
    if isinstance(event, _RE_READ_EVENTS):
        return type(event)()
    return None


class ControllerEventManager:
    """One queue, one task. ``put`` must be called on the event loop."""

    def __init__(
        self, process: Callable[[ControllerEvent], Awaitable[Any]], name: str = "controller-events"
    ) -> None:
        self._process = process
        self._name = name
        self._queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self.current: ControllerEvent | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def put(self, event: ControllerEvent) -> ControllerEvent:
        self._queue.put_nowait(event)
        return event

    def clear_and_put(self, event: ControllerEvent) -> ControllerEvent:
        """Drop every queued event, then queue ``event`` (Kafka's clearAndPut). A dropped event's
        waiter gets NOT_CONTROLLER (Kafka's preempt); the event in progress is left to finish."""
        while not self._queue.empty():
            dropped = self._queue.get_nowait()
            log.info("controller event %s dropped: queued %s", dropped.name, event.name)
            dropped.complete(exc=KafkaError(ErrorCode.NOT_CONTROLLER, f"dropped for {event.name}"))
        return self.put(event)

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    async def close(self) -> None:
        """Stop after cancelling the event in progress; pending events fail with CancelledError."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():
            event = self._queue.get_nowait()
            if event.done is not None and not event.done.done():
                event.done.cancel()

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            self.current = event
            try:
                result = await self._process(event)
            except asyncio.CancelledError:
                if event.done is not None and not event.done.done():
                    event.done.cancel()
                raise
            except KafkaError as exc:
                log.info("controller event %s: %s", event.name, exc)
                event.complete(exc=exc)
            except Exception as exc:
                log.exception("controller event %s failed", event.name)
                event.complete(exc=exc)
            else:
                event.complete(result)
            finally:
                self.current = None


#: Events whose handler re-reads its znode and re-registers its watch (see :func:`retry_of`).
_RE_READ_EVENTS = (
    BrokerChange,
    TopicChange,
    TopicDeletion,
    IsrChangeNotification,
    LogDirEventNotification,
    PartitionReassignment,
    PreferredReplicaElection,
)
