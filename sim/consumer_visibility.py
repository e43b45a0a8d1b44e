"""What consumers are given, held to the committed log (issue 35 item 3; docs/guarantees.md
"Consumer groups"; Kafka's read isolation for consumers: a Fetch from a consumer reads only below
the high watermark, ``FetchIsolation.HIGH_WATERMARK``).

``consumer-visibility``, fed by the simulated group's members (sim/group_workload.py):

* every fetch answer a member accepts holds only batches wholly below the HW the same answer
  gives (a record at or above it may still be truncated away by the next leader);
* a member is never given one offset twice within one assignment (its position only moves on);
* every record a member is given is the committed log's: at the next check at which the current
  leader's HW has passed its offset, the leader holds the same value there (values are unique:
  ``p<producer>-<n>``, sim/workload.py), and two members given one offset were given one value;
  at the end of a run every record given must be below the leader's HW.

:meth:`ConsumerVisibility.check` runs with the schedule's full checks and at the end; the other
two are judged as the member sees the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from client.consumer.fetcher import whole_batches_end
from client.protocol.records import iter_batches
from client.types import TopicPartition
from sim.log_reading import records_below

if TYPE_CHECKING:
    from broker.log import Log
    from sim.world import World

CONSUMER_VISIBILITY = "consumer-visibility"


class ConsumerVisibility:
    def __init__(
        self,
        world: World,
        fail: Callable[[str, str], None],
        enabled: frozenset[str],
        deleting: Callable[[str], bool],
    ) -> None:
        self.world = world
        self.fail = fail
        self.enabled = CONSUMER_VISIBILITY in enabled
        self.deleting = deleting
        self.given = 0  # records given to members
        #: partition -> offset -> value, every record any member was given
        self._values: dict[TopicPartition, dict[int, bytes]] = {}
        #: partition -> offsets given but not yet compared with a leader's log
        self._pending: dict[TopicPartition, dict[int, str]] = {}
        #: member -> (generation, the offsets given in its current assignment)
        self._assignment: dict[str, tuple[int, set[tuple[TopicPartition, int]]]] = {}

    # -- what the members see ------------------------------------------------------------------
    def instrument(self, member: str, consumer: Any) -> None:
        """Check every fetch answer the member's fetcher accepts against its own HW."""
        if not self.enabled:
            return
        fetcher = consumer._fetcher
        accept = fetcher._accept

        def checked_accept(tp: TopicPartition, offset: int, node: int, p: dict) -> None:
            self._check_answer(member, tp, node, p)
            accept(tp, offset, node, p)

        fetcher._accept = checked_accept

    def _check_answer(self, member: str, tp: TopicPartition, node: int, p: dict) -> None:
        data = p.get("records")
        if not data:
            return
        view = memoryview(data)
        hw = p["high_watermark"]
        for _, header in iter_batches(view[: whole_batches_end(view)], check_crc=False):
            if header.last_offset >= hw:
                self.fail(
                    CONSUMER_VISIBILITY,
                    f"broker {node} answered member {member}'s fetch of {tp.topic}-{tp.partition} with "
                    f"a batch {header.base_offset}..{header.last_offset} at or above the HW {hw} it gave",
                )
                return

    def assigned(self, member: str, generation: int, partitions: set[TopicPartition]) -> None:
        self._assignment[member] = (generation, set())

    def received(self, member: str, records: list[Any]) -> None:
        if not self.enabled or not records:
            return
        generation, seen = self._assignment.setdefault(member, (-1, set()))
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            key = (tp, record.offset)
            if key in seen:
                self.fail(
                    CONSUMER_VISIBILITY,
                    f"member {member} was given {tp.topic}-{tp.partition} offset {record.offset} twice "
                    f"in one assignment (generation {generation})",
                )
                return
            seen.add(key)
            self.given += 1
            values = self._values.setdefault(tp, {})
            earlier = values.setdefault(record.offset, record.value)
            if earlier != record.value:
                self.fail(
                    CONSUMER_VISIBILITY,
                    f"member {member} was given {record.value!r} at {tp.topic}-{tp.partition} offset "
                    f"{record.offset}, another member {earlier!r}",
                )
                return
            self._pending.setdefault(tp, {})[record.offset] = member

    # -- against the committed log -------------------------------------------------------------
    def check(self, final: bool = False) -> None:
        """Compare what members were given with the current leaders' logs, below their HWs."""
        if not self.enabled:
            return
        for tp in sorted(self._pending):
            pending = self._pending[tp]
            if not pending or self.deleting(tp.topic):
                continue
            found = self._leader_log(tp)
            if found is None:
                if final:
                    self.fail(CONSUMER_VISIBILITY, f"{tp.topic}-{tp.partition} has no leader at the end")
                    return
                continue
            leader, log_ = found
            hw = log_.high_watermark
            below = sorted(o for o in pending if o < hw)
            if final and len(below) < len(pending):
                above = min(o for o in pending if o >= hw)
                self.fail(
                    CONSUMER_VISIBILITY,
                    f"member {pending[above]} was given {tp.topic}-{tp.partition} offset {above}, but at "
                    f"the end leader {leader}'s HW is {hw}",
                )
                return
            if not below:
                continue
            held = {r.offset: r.value for r in records_below(log_, below[-1] + 1, below[0])}
            values = self._values[tp]
            for offset in below:
                if held.get(offset) != values[offset]:
                    self.fail(
                        CONSUMER_VISIBILITY,
                        f"member {pending[offset]} was given {values[offset]!r} at {tp.topic}-{tp.partition} "
                        f"offset {offset}; leader {leader} holds {held.get(offset)!r} there below its HW {hw}",
                    )
                    return
                del pending[offset]

    def _leader_log(self, tp: TopicPartition) -> tuple[int, Log] | None:
        leader = self.world.leader_of(tp.topic, tp.partition)
        if leader is None or not self.world.brokers[leader].running:
            return None
        rm = getattr(self.world.brokers[leader].server, "replica_manager", None)
        state = rm.partitions.get(tp) if rm is not None else None
        if state is None or not state.is_leader or tp in rm.offline_partitions:
            return None
        log_ = rm.get_log(tp)
        return None if log_ is None else (leader, log_)
