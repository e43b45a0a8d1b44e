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

A failed event's retry (:func:`retry_of`) is kept at the head of the queue
(:meth:`ControllerEventManager.retry_first`): after its backoff it runs before any event queued
after the one that failed, so no later event sees the half-done state the failure left (docs/design.md
"The retry order"; Kafka's event thread retries nothing, its ZooKeeper client never gives up).
Only the events about who is the controller (:data:`PASS_A_WAITING_RETRY`: Expire, Reelect,
ControllerChange) pass a retry that waits out its backoff: they touch none of the state a
retried event works on, and a controller that resigned makes the retry a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

#: A failed event's retry backoff, doubling while it keeps failing (docs/design.md "The retry order").
RETRY_INITIAL_BACKOFF_S = 0.1
RETRY_MAX_BACKOFF_S = 5.0
#: Consecutive failures of one kind of event from which each is logged as an error.
RETRY_ERROR_AFTER = 5


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
    """A broker answered a StopReplica(delete=true): the error of each partition the request
    asked for (a request-level error counts for every one of them)."""

    broker_id: int = -1
    partition_errors: dict = field(default_factory=dict)  # TopicPartition -> error code


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
class PartitionReassignmentIsrChange(ControllerEvent):
    """The state znode of a partition being reassigned changed (Kafka's
    PartitionReassignmentIsrChangeHandler): its target replicas may all be in the ISR now."""

    partition: Any = None  # a TopicPartition


@dataclass
class PreferredReplicaElection(ControllerEvent):
    """/admin/preferred_replica_election was created."""


@dataclass
class ControlledShutdown(ControllerEvent):
    """A broker asks to move its leaderships away before it exits."""

    broker_id: int = -1
    broker_epoch: int = -1  # KIP-380: -1 = unknown (not checked)


@dataclass
class ReplicaLeaderElection(ControllerEvent):
    """An ElectLeaders request (KIP-460): preferred or unclean election of the given partitions
    (None: every partition); its future gets each partition's (error code, message)."""

    partitions: list | None = None
    election_type: int = 0  # Kafka's ElectionType: 0 preferred, 1 unclean


@dataclass
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The periodic leader-imbalance check (auto.leader.rebalance.enable)."""


#: The events a caller sends and waits on (:meth:`ControllerEventManager.ask`): when the broker
#: turns out not to be the controller, the caller gets NOT_CONTROLLER and may ask the new one.
ASKED = (ControlledShutdown, ReplicaLeaderElection)


def retry_of(event: ControllerEvent) -> ControllerEvent | None:
    """The event that does again what a failed ``event`` left undone, or None when a failure
    needs no retry. Every watch event retried here re-reads ZooKeeper and re-registers its watch,
    so running it twice is harmless, and a watch lost with a failed read is set again (Kafka
    relies on its ZooKeeper client never surfacing a connection drop; ours can still surface
    one after ``retry_timeout_s`` or a session expiry: docs/design.md "The controller under
    ZooKeeper blips")."""
    if isinstance(event, Startup | Reelect | ControllerChange):
        return Reelect()
    if isinstance(event, PartitionModifications):
        return PartitionModifications(topic=event.topic)
    if isinstance(event, PartitionReassignmentIsrChange):
        return PartitionReassignmentIsrChange(partition=event.partition)
    if isinstance(event, LeaderAndIsrResponseReceived):
        # KIP-112: the answer is the only news of the offline dir; its handling is redone whole
        return LeaderAndIsrResponseReceived(broker_id=event.broker_id, response=event.response)
    if isinstance(event, TopicDeletionStopReplicaResponse):
        # its replica states changed before anything could fail: the deletions resume from them
        return TopicDeletion()
    if isinstance(event, _RE_READ_EVENTS):
        return type(event)()
    return None


class ControllerEventManager:
    """One queue, one task. ``put`` and ``retry_first`` must be called on the event loop."""

    def __init__(
        self, process: Callable[[ControllerEvent], Awaitable[Any]], name: str = "controller-events"
    ) -> None:
        self._process = process
        self._name = name
        self._queue: deque[ControllerEvent] = deque()
        self._wakeup = asyncio.Event()
        #: Failed events' retries, each with when it is due on the loop's clock: they run before
        #: the queue. At most one is not an election event (nothing else runs while it waits).
        self._retries: list[tuple[float, ControllerEvent]] = []
        self._task: asyncio.Task | None = None
        self.current: ControllerEvent | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def put(self, event: ControllerEvent) -> ControllerEvent:
        self._queue.append(event)
        self._wakeup.set()
        return event

    async def ask(self, event: ControllerEvent) -> Any:
        """Queue ``event`` with a future and wait for what its handler returns (or raises): a
        request a caller waits on (ControlledShutdown, ElectLeaders)."""
        event.done = asyncio.get_running_loop().create_future()
        return await self.put(event).done

    def retry_first(self, event: ControllerEvent, failures: int, failed: str = "") -> None:
        """Run ``event`` after a backoff (0.1 s doubling to 5 s with the consecutive ``failures``
        of its kind) and before every queued event, except those of :data:`PASS_A_WAITING_RETRY`
        (called while the event it retries, named ``failed``, is being processed). An equal retry
        already waiting stands for both. An event that never stops failing holds the queue, so
        each failure says so, as an error from the fifth on."""
        delay_s = min(RETRY_MAX_BACKOFF_S, RETRY_INITIAL_BACKOFF_S * 2 ** (failures - 1))
        log.log(
            logging.ERROR if failures >= RETRY_ERROR_AFTER else logging.WARNING,
            "controller event %s failed (%d in a row); %s runs again in %.1f s, before the %d event(s) "
            "queued after it",
            failed or event.name,
            failures,
            event.name,
            delay_s,
            len(self._queue),
        )
        if any(waiting == event for _, waiting in self._retries):
            return
        self._retries.append((asyncio.get_running_loop().time() + delay_s, event))
        self._wakeup.set()

    def clear_and_put(self, event: ControllerEvent) -> ControllerEvent:
        """Drop every queued event and a waiting retry, then queue ``event`` (Kafka's
        clearAndPut). A dropped event's waiter gets NOT_CONTROLLER (Kafka's preempt); the event
        in progress is left to finish."""
        dropped = [*(e for _, e in self._retries), *self._queue]
        self._queue.clear()
        self._retries.clear()
        for old in dropped:
            log.info("controller event %s dropped: queued %s", old.name, event.name)
            old.complete(exc=KafkaError(ErrorCode.NOT_CONTROLLER, f"dropped for {event.name}"))
        return self.put(event)

    @property
    def queue_size(self) -> int:
        """Events waiting, a waiting retry included."""
        return len(self._queue) + len(self._retries)

    async def close(self) -> None:
        """Stop after cancelling the event in progress; pending events fail with CancelledError."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pending = [*(e for _, e in self._retries), *self._queue]
        self._queue.clear()
        self._retries.clear()
        for event in pending:
            if event.done is not None and not event.done.done():
                event.done.cancel()

    async def _next(self) -> ControllerEvent:
        """The waiting retry once due, before anything queued but the election events; else the
        oldest queued event."""
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            if self._retries:
                passing = next((e for e in self._queue if isinstance(e, PASS_A_WAITING_RETRY)), None)
                if passing is not None:
                    self._queue.remove(passing)
                    return passing
                first = min(range(len(self._retries)), key=lambda i: self._retries[i][0])
                remaining = self._retries[first][0] - loop.time()
                if remaining <= 0:
                    return self._retries.pop(first)[1]
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow close()'s cancellation
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._wakeup.wait()
            elif self._queue:
                return self._queue.popleft()
            else:
                await self._wakeup.wait()

    async def _run(self) -> None:
        while True:
            event = await self._next()
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

#: The events about who is the controller: they run ahead of a retry waiting out its backoff
#: (see :meth:`ControllerEventManager.retry_first`), so a controller whose event keeps failing
#: still resigns, and still stands for election, when ZooKeeper says so.
PASS_A_WAITING_RETRY = (Expire, Reelect, ControllerChange)
