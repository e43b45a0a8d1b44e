"""The idempotent producer held to the log (issue 35 item 3; docs/guarantees.md "Idempotent
producer"; KIP-98: Kafka's ``ProducerStateManager`` keeps each producer's last five batches, so a
retry of any batch in flight is answered with the original's offsets and written once).

* ``produce-answers``: every answer a leader gives a producer is true of its log when it is
  given. A batch answered as appended (``NONE``, a retried duplicate included) is in the log at
  the base offset answered, with its producer id, epoch and sequence; a batch answered as not
  appended for a sequence reason (``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``DUPLICATE_SEQUENCE_NUMBER``)
  is not among its producer's last five batches of its latest epoch in the log (the window Kafka's
  duplicate check covers: the client never has more in flight). ``INVALID_PRODUCER_EPOCH`` says
  fenced, not "not written": a retry of a batch of an older epoch is refused whether or not it
  landed, as Kafka refuses it;
* ``committed-once``: below the HW, a partition holds each record once (the workload's values
  are unique, sim/workload.py) and each (producer id, epoch, sequence) once: a retried batch
  written twice, or re-sent under a bumped epoch after it had landed, is a duplicate the
  idempotent producer promises away.

:class:`Idempotence` wraps ``ReplicaManager._append_to_leader`` of each broker incarnation (the
answers) and reads each partition's committed log incrementally from the current leader at the
schedule's full checks (the committed prefix never changes, so each record is read once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from client.protocol.errors import ErrorCode
from client.protocol.records import NO_PRODUCER_ID, decode_batches, iter_batches
from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.log import Log
    from sim.world import World

PRODUCE_ANSWERS = "produce-answers"
COMMITTED_ONCE = "committed-once"
IDEMPOTENCE_INVARIANTS = (PRODUCE_ANSWERS, COMMITTED_ONCE)
#: answers that say the batch was not written because of its producer id, epoch or sequence
NOT_APPENDED = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.DUPLICATE_SEQUENCE_NUMBER})
WINDOW = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain
_READ_BYTES = 1 << 20


class _Cursor:
    """How far one partition's committed log was read, and what it held."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.values: dict[bytes, int] = {}
        self.sequences: dict[tuple[int, int, int], int] = {}


class Idempotence:
    def __init__(self, world: World, fail: Callable[[str, str], None], enabled: frozenset[str]) -> None:
        self.world = world
        self.fail = fail
        self.answers = PRODUCE_ANSWERS in enabled
        self.once = COMMITTED_ONCE in enabled
        self.checked_answers = 0
        self._attached: dict[int, object] = {}
        #: (topic, topic znode czxid, partition) -> cursor
        self._cursors: dict[tuple[str, int, int], _Cursor] = {}

    # -- the answers -----------------------------------------------------------------------------
    def attach(self) -> None:
        if not self.answers:
            return
        for broker_id in sorted(self.world.brokers):
            rm = getattr(self.world.brokers[broker_id].server, "replica_manager", None)
            if rm is None or self._attached.get(broker_id) is rm:
                continue
            self._attached[broker_id] = rm
            self._wrap(broker_id, rm)

    def _wrap(self, broker_id: int, rm: Any) -> None:
        append = rm._append_to_leader

        def checked(tp: TopicPartition, records: bytes, acks: int) -> Any:
            status = append(tp, records, acks)
            if tp[0].startswith("__"):
                return status
            try:
                headers = [h for _, h in iter_batches(records, check_crc=False)]
            except Exception:  # noqa: BLE001 - a malformed request: the broker's own answer stands
                return status
            idempotent = [h for h in headers if h.producer_id != NO_PRODUCER_ID]
            if idempotent:
                self.checked_answers += 1
                with self.world.observing():  # the check's reads never steer the run
                    self._check_answer(broker_id, rm, TopicPartition(*tp), idempotent[0], status)
            return status

        rm._append_to_leader = checked

    def _check_answer(self, broker_id: int, rm: Any, tp: TopicPartition, header: Any, status: Any) -> None:
        log_ = rm.get_log(tp)
        if log_ is None:
            return
        ident = (header.producer_id, header.producer_epoch, header.base_sequence)
        if status.error_code == ErrorCode.NONE:
            found = _batch_at(log_, status.base_offset)
            if found is None or (found.producer_id, found.producer_epoch, found.base_sequence) != ident:
                got = (
                    None if found is None else (found.producer_id, found.producer_epoch, found.base_sequence)
                )
                self.fail(
                    PRODUCE_ANSWERS,
                    f"broker {broker_id} answered producer {ident[0]}'s batch (epoch {ident[1]}, sequence "
                    f"{ident[2]}) of {tp.topic}-{tp.partition} as appended at offset {status.base_offset}, "
                    f"but its log holds {got} there",
                )
        elif status.error_code in NOT_APPENDED:
            recent = _recent_batches(log_, header.producer_id)
            if ident in recent:
                self.fail(
                    PRODUCE_ANSWERS,
                    f"broker {broker_id} answered {ErrorCode(status.error_code).name} to producer "
                    f"{ident[0]}'s batch (epoch {ident[1]}, sequence {ident[2]}) of {tp.topic}-{tp.partition}, "
                    f"but the batch is in its log at offset {recent[ident]}, among the producer's last "
                    f"{WINDOW}",
                )

    # -- the committed log -----------------------------------------------------------------------
    def check(self, leaders: Callable[[], list[tuple[str, int, int, Log]]]) -> None:
        """Read on from each partition's cursor to its current leader's HW. ``leaders``: (topic,
        topic czxid, partition, the current leader's log) of every live partition."""
        if not self.once:
            return
        for topic, czxid, partition, log_ in leaders():
            cursor = self._cursors.setdefault((topic, czxid, partition), _Cursor())
            start = max(cursor.next_offset, log_.log_start_offset)
            end = log_.high_watermark
            offset = start
            while offset < end:
                data = log_.read(offset, _READ_BYTES, max_offset=end).records
                if not data:
                    break
                begun = offset
                for header, records in decode_batches(data):
                    if header.base_offset >= begun and header.producer_id != NO_PRODUCER_ID:
                        self._once_sequence(topic, partition, cursor, header)
                    for record in records:
                        if record.offset >= begun and record.value is not None:
                            self._once_value(topic, partition, cursor, bytes(record.value), record.offset)
                    offset = max(offset, header.next_offset)
                if offset <= begun:
                    break
            cursor.next_offset = max(cursor.next_offset, offset)

    def _once_sequence(self, topic: str, partition: int, cursor: _Cursor, header: Any) -> None:
        ident = (header.producer_id, header.producer_epoch, header.base_sequence)
        earlier = cursor.sequences.setdefault(ident, header.base_offset)
        if earlier != header.base_offset:
            self.fail(
                COMMITTED_ONCE,
                f"{topic}-{partition} holds producer {ident[0]}'s batch (epoch {ident[1]}, sequence "
                f"{ident[2]}) twice below the HW: at offsets {earlier} and {header.base_offset}",
            )

    def _once_value(self, topic: str, partition: int, cursor: _Cursor, value: bytes, offset: int) -> None:
        earlier = cursor.values.setdefault(value, offset)
        if earlier != offset:
            self.fail(
                COMMITTED_ONCE,
                f"{topic}-{partition} holds record {value!r} twice below the HW: at offsets {earlier} and {offset}",
            )


def _batch_at(log_: Log, offset: int) -> Any:
    """The header of the batch starting at ``offset`` in the log, or None."""
    if offset < log_.log_start_offset or offset >= log_.log_end_offset:
        return None
    data = log_.read(offset, 1, min_one_message=True).records
    for _, header in iter_batches(data, check_crc=False):
        if header.base_offset == offset:
            return header
        if header.base_offset > offset:
            break
    return None


def _recent_batches(log_: Log, producer_id: int) -> dict[tuple[int, int, int], int]:
    """The producer's last WINDOW batches of its latest epoch in the log: (id, epoch, sequence)
    -> base offset."""
    found: list[tuple[tuple[int, int, int], int]] = []
    offset = log_.log_start_offset
    end = log_.log_end_offset
    while offset < end:
        data = log_.read(offset, _READ_BYTES).records
        if not data:
            break
        begun = offset
        for _, header in iter_batches(data, check_crc=False):
            if header.base_offset >= begun and header.producer_id == producer_id:
                found.append(
                    ((header.producer_id, header.producer_epoch, header.base_sequence), header.base_offset)
                )
            offset = max(offset, header.next_offset)
        if offset <= begun:
            break
    if not found:
        return {}
    latest = found[-1][0][1]
    return dict([entry for entry in found if entry[0][1] == latest][-WINDOW:])
