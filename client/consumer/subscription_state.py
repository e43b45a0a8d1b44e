"""Which partitions a consumer reads and where it stands in each (Kafka's SubscriptionState).

:class:`SubscriptionState` holds the manual assignment (``assign``; there is no group
subscription here) and, per partition, a :class:`TopicPartitionState` as Kafka's
``SubscriptionState.TopicPartitionState``: the position (the next offset to return; None until
reset per ``auto_offset_reset``), the records fetched but not yet returned, the fetch in flight,
the retry backoff, the last high watermark and an error to raise from ``poll``. Sans-IO: the
fetcher and the offset lookups change it, the consumer reads it. See docs/guarantees.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from client.protocol.errors import KafkaError
from client.types import ConsumerRecord, TopicPartition


@dataclass(eq=False)
class TopicPartitionState:
    position: int | None = None
    records: list[ConsumerRecord] = field(default_factory=list)
    index: int = 0  # next record of ``records`` to return
    next_fetch_offset: int = 0  # the position once ``records`` is used up
    fetching: bool = False
    backoff_until: float = 0.0
    high_watermark: int = -1
    error: KafkaError | None = None

    @property
    def buffered(self) -> int:
        return len(self.records) - self.index

    def clear(self) -> None:
        self.records = []
        self.index = 0


class SubscriptionState:
    """The assignment: TopicPartition -> :class:`TopicPartitionState`. ``notify`` wakes a
    waiting ``poll`` whenever the assignment or a position changes."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self.assignment: dict[TopicPartition, TopicPartitionState] = {}
        self._notify = notify

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions that stay assigned are kept."""
        new: dict[TopicPartition, TopicPartitionState] = {}
        for item in partitions:
            tp = TopicPartition(*item)
            if not isinstance(tp.topic, str) or not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"not a topic partition: {item!r}")
            new[tp] = self.assignment.get(tp) or TopicPartitionState()
        self.assignment = new
        self._notify()

    def assigned(self) -> set[TopicPartition]:
        return set(self.assignment)

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        state = self.assignment.get(TopicPartition(*tp))
        if state is None:
            raise ValueError(f"partition {TopicPartition(*tp)} is not assigned to this consumer")
        return state

    def set_position(self, state: TopicPartitionState, offset: int | None) -> None:
        state.position = offset
        state.clear()
        state.error = None
        state.backoff_until = 0.0
        self._notify()

    def topics(self) -> set[str]:
        return {tp.topic for tp in self.assignment}
