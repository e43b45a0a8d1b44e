"""A sans-IO group coordinator under a test's hand (broker/coordinator/; docs/design.md "Consumer
groups").

* :class:`FakeTimers` is a manual virtual clock: :meth:`FakeTimers.advance` fires every due
  callback in time order (ties in the order they were scheduled, callbacks scheduled while
  advancing included), and a cancelled timer never fires.
* :class:`FakeAppend` stands in for the replica manager's acks=all append to
  ``__consumer_offsets``: it records every batch and hands out base offsets in call order (the
  leader's log takes the batch at once; only the acknowledgement waits), and the test completes
  each write now or later with the error code it chooses, so the coordinator's windows can be
  forced. With ``auto`` set every write is acknowledged as soon as it is made.
* :class:`FakeLog` is what a newly elected coordinator reads: the batches the fake append
  acknowledged (or any the test appends), served in ``max_bytes`` chunks of whole batches, with a
  hook that runs before each read (to resign a partition in the middle of its load).
* :class:`GroupEnv` wires them to a real :class:`GroupMetadataManager` and
  :class:`GroupCoordinator` and builds request bodies through
  ``client.protocol.api.validate_request``, so defaults are filled exactly as the broker's
  handlers would see them; every answer is checked against the response schema.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinator import group_admin, group_offsets
from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_metadata import GroupMetadata, GroupState
from broker.coordinator.group_metadata_manager import GroupMetadataManager, LogStartOffset, ReadLog, Sleep
from client.protocol.api import ApiKey, validate_request, validate_response
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch, decode_records, parse_header, set_base_offset
from client.types import TopicPartition

# -- virtual time ----------------------------------------------------------------------------------


class Timer:
    def __init__(self, due_ms: int, callback: Callable[[], None]) -> None:
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """The coordinator's ``Timers`` and ``time_ms`` on a clock only :meth:`advance` moves."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.now_ms = start_ms
        self._heap: list[tuple[int, int, Timer]] = []
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self.now_ms

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now_ms + max(delay_ms, 0), callback)
        heapq.heappush(self._heap, (timer.due_ms, next(self._seq), timer))
        return timer

    def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward, firing what falls due on the way at its own time."""
        end = self.now_ms + ms
        while self._heap and self._heap[0][0] <= end:
            due, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.now_ms = due
            timer.callback()
        self.now_ms = end

    def pending(self) -> list[Timer]:
        return [t for _, _, t in self._heap if not t.cancelled]


# -- the offsets topic -----------------------------------------------------------------------------


@dataclass
class Write:
    """One append to ``__consumer_offsets``: its records (key, value) and its fate."""

    tp: TopicPartition
    batch: bytes
    timeout_ms: int
    callback: Callable[[int, int], None]
    base_offset: int
    records: list[tuple[bytes | None, bytes | None]]
    outcome: int | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None


class FakeAppend:
    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.writes: list[Write] = []
        self._end: dict[TopicPartition, int] = {}

    def __call__(
        self, tp: TopicPartition, batch: bytes, timeout_ms: int, callback: Callable[[int, int], None]
    ) -> None:
        base = self._end.get(tp, 0)
        records = [(r.key, r.value) for _, r in decode_records(batch)]
        rebased = bytearray(batch)
        set_base_offset(rebased, 0, base)
        self._end[tp] = base + len(records)
        write = Write(tp, bytes(rebased), timeout_ms, callback, base, records)
        self.writes.append(write)
        if self.auto:
            self.complete(write)

    def pending(self) -> list[Write]:
        return [w for w in self.writes if not w.done]

    def complete(self, write: Write, code: int = ErrorCode.NONE) -> None:
        assert not write.done, "a write is acknowledged once"
        write.outcome = int(code)
        write.callback(int(code), write.base_offset if code == ErrorCode.NONE else -1)

    def complete_all(self, code: int = ErrorCode.NONE) -> None:
        for write in self.pending():
            self.complete(write, code)

    def last(self) -> Write:
        return self.writes[-1]


class FakeLog:
    """``read_log`` over whole batches: the acknowledged writes of a :class:`FakeAppend` and
    whatever the test appends itself."""

    def __init__(self) -> None:
        self.batches: dict[TopicPartition, list[bytes]] = {}
        self.on_read: Callable[[TopicPartition, int], None] | None = None
        self.reads: list[tuple[TopicPartition, int]] = []
        self.fail: Exception | None = None

    def log_start_offset(self, tp: TopicPartition) -> int:
        """Where the fake log starts: its first batch (0 when it is empty)."""
        batches = self.batches.get(tp, [])
        return parse_header(batches[0]).base_offset if batches else 0

    def end_offset(self, tp: TopicPartition) -> int:
        batches = self.batches.get(tp, [])
        if not batches:
            return 0
        header, _ = next(iter(decode_records(batches[-1])))
        return header.next_offset

    def append(self, tp: TopicPartition, records: list[tuple[bytes, bytes | None]]) -> int:
        base = self.end_offset(tp)
        self.batches.setdefault(tp, []).append(
            build_batch(((k, v, 0, []) for k, v in records), base_offset=base)
        )
        return base

    def feed(self, append: FakeAppend) -> None:
        """Every acknowledged write, at the offset the append gave it."""
        for write in append.writes:
            if write.outcome == ErrorCode.NONE:
                self.batches.setdefault(write.tp, []).append(write.batch)

    def __call__(self, tp: TopicPartition, offset: int, max_bytes: int) -> bytes:
        self.reads.append((tp, offset))
        if self.on_read is not None:
            self.on_read(tp, offset)
        if self.fail is not None:
            raise self.fail
        out = b""
        for batch in self.batches.get(tp, []):
            header, _ = next(iter(decode_records(batch)))
            if header.next_offset <= offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return out


# -- answers -----------------------------------------------------------------------------------------


class Reply:
    """A ``respond`` callback that keeps what it was called with and checks its shape."""

    def __init__(self, api_key: ApiKey | None = None) -> None:
        self.api_key = api_key
        self.answers: list[dict] = []

    def __call__(self, body: dict) -> None:
        if self.api_key is not None:
            validate_response(self.api_key, _as_sent(body))
        self.answers.append(body)

    @property
    def answered(self) -> bool:
        return bool(self.answers)

    @property
    def value(self) -> dict:
        assert len(self.answers) == 1, f"expected exactly one answer, got {self.answers}"
        return self.answers[0]

    @property
    def error(self) -> ErrorCode:
        return ErrorCode(self.value["error_code"])


def _as_sent(value: object) -> object:
    """The body as the wire carries it: an IntEnum goes out as its int (msgpack packs int
    subclasses as ints), which the schema's exact type check would otherwise refuse."""
    if isinstance(value, dict):
        return {k: _as_sent(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_sent(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


# -- the whole coordinator ---------------------------------------------------------------------------


@dataclass
class GroupEnv:
    config: GroupConfig = field(
        default_factory=lambda: GroupConfig(initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=4)
    )
    auto_ack: bool = True
    own_all: bool = True
    #: what loads read instead of :attr:`log` (a real broker.log Log, say), and its log start
    read_log: ReadLog | None = None
    log_start_offset: LogStartOffset | None = None
    #: the load's retry backoff (asyncio.sleep unless a test steps it itself)
    load_sleep: Sleep | None = None

    def __post_init__(self) -> None:
        self.timers = FakeTimers()
        self.append = FakeAppend(auto=self.auto_ack)
        self.log = FakeLog()
        self.manager = GroupMetadataManager(
            self.config,
            self.append,
            self.read_log or self.log,
            self.timers.time_ms,
            log_start_offset=self.log_start_offset or self.log.log_start_offset,
            **({"sleep": self.load_sleep} if self.load_sleep else {}),
        )
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(
            self.config,
            self.manager,
            self.timers,
            self.timers.time_ms,
            lambda client_id: f"{client_id}-{next(ids)}",
        )
        if self.own_all:
            for partition in range(self.config.offsets_topic_num_partitions):
                self.manager.owned[partition] = 0

    # -- requests --------------------------------------------------------------------------------

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
        client_id: str = "c",
    ) -> Reply:
        body = validate_request(
            ApiKey.JOIN_GROUP,
            0,
            {
                "group_id": group_id,
                "session_timeout_ms": session_timeout_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "member_id": member_id,
                "group_instance_id": group_instance_id,
                "protocol_type": protocol_type,
                "protocols": [
                    {"name": n, "metadata": m}
                    for n, m in (
                        protocols if protocols is not None else [("range", b"sub-" + client_id.encode())]
                    )
                ],
                "require_known_member_id": require_known_member_id,
            },
        )
        reply = Reply(ApiKey.JOIN_GROUP)
        self.coordinator.handle_join_group(body, client_id, "/127.0.0.1", reply)
        return reply

    def sync(
        self,
        member_id: str,
        generation_id: int,
        group_id: str = "g",
        assignments: dict[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Reply:
        body = validate_request(
            ApiKey.SYNC_GROUP,
            0,
            {
                "group_id": group_id,
                "generation_id": generation_id,
                "member_id": member_id,
                "group_instance_id": group_instance_id,
                "protocol_type": protocol_type,
                "protocol_name": protocol_name,
                "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
            },
        )
        reply = Reply(ApiKey.SYNC_GROUP)
        self.coordinator.handle_sync_group(body, reply)
        return reply

    def heartbeat(
        self, member_id: str, generation_id: int, group_id: str = "g", group_instance_id: str | None = None
    ) -> Reply:
        body = validate_request(
            ApiKey.HEARTBEAT,
            0,
            {
                "group_id": group_id,
                "generation_id": generation_id,
                "member_id": member_id,
                "group_instance_id": group_instance_id,
            },
        )
        reply = Reply(ApiKey.HEARTBEAT)
        self.coordinator.handle_heartbeat(body, reply)
        return reply

    def leave(
        self, member_id: str = "", group_id: str = "g", members: list[tuple[str, str | None]] | None = None
    ) -> Reply:
        request: dict = {"group_id": group_id, "member_id": member_id}
        if members is not None:
            request["members"] = [{"member_id": m, "group_instance_id": i} for m, i in members]
        body = validate_request(ApiKey.LEAVE_GROUP, 0, request)
        reply = Reply(ApiKey.LEAVE_GROUP)
        self.coordinator.handle_leave_group(body, reply)
        return reply

    def commit(
        self,
        offsets: dict[TopicPartition, int | tuple[int, str | None]],
        group_id: str = "g",
        member_id: str = "",
        generation_id: int = -1,
        group_instance_id: str | None = None,
        retention_time_ms: int = -1,
    ) -> Reply:
        """OffsetCommit; the reply's one answer maps each partition to its error code."""
        topics: dict[str, list[dict]] = {}
        for tp, spec in offsets.items():
            offset, metadata = spec if isinstance(spec, tuple) else (spec, None)
            topics.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "committed_offset": offset, "committed_metadata": metadata}
            )
        body = validate_request(
            ApiKey.OFFSET_COMMIT,
            0,
            {
                "group_id": group_id,
                "generation_id": generation_id,
                "member_id": member_id,
                "group_instance_id": group_instance_id,
                "retention_time_ms": retention_time_ms,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        entries = {
            TopicPartition(t["topic"], p["partition"]): p for t in body["topics"] for p in t["partitions"]
        }
        reply = Reply()
        group_offsets.handle_offset_commit(self.coordinator, body, entries, reply)
        return reply

    def fetch(
        self, group_id: str = "g", partitions: list[TopicPartition] | None = None
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetFetch as (error, partition -> committed offset, -1 for none)."""
        error, offsets = group_offsets.handle_offset_fetch(self.coordinator, group_id, partitions)
        return error, {tp: (-1 if c is None else c.offset) for tp, c in offsets.items()}

    def delete_groups(self, *group_ids: str) -> Reply:
        body = validate_request(ApiKey.DELETE_GROUPS, 0, {"groups_names": list(group_ids)})
        reply = Reply()
        group_admin.delete_groups(self.coordinator, body["groups_names"], reply)
        return reply

    def describe(self, group_id: str = "g") -> dict:
        answer = group_admin.describe_group(self.coordinator, group_id)
        validate_response(ApiKey.DESCRIBE_GROUPS, _as_sent({"groups": [answer]}))
        return answer

    # -- shortcuts -------------------------------------------------------------------------------

    def group(self, group_id: str = "g") -> GroupMetadata:
        return self.manager.groups[group_id]

    def until_answered(self, *replies: Reply) -> None:
        """Advance one initial delay at a time (KIP-134 extends it while members arrive) until
        every reply is in."""
        for _ in range(1000):
            if all(r.answered for r in replies):
                return
            self.timers.advance(self.config.initial_rebalance_delay_ms)
        raise AssertionError("the rebalance never completed")

    def stable_group(self, n: int, group_id: str = "g", **join: object) -> tuple[list[str], int]:
        """n members joined (one rebalance, past the initial delay) and synced: (member ids in
        join order, generation)."""
        replies = [self.join(group_id, client_id=f"c{i}", **join) for i in range(n)]  # type: ignore[arg-type]
        self.until_answered(*replies)
        members = [r.value["member_id"] for r in replies]
        generation = replies[0].value["generation_id"]
        leader = replies[0].value["leader"]
        syncs = [
            self.sync(m, generation, group_id, {x: x.encode() for x in members} if m == leader else None)
            for m in members
        ]
        self.append.complete_all()
        assert all(s.error == ErrorCode.NONE for s in syncs), [s.answers for s in syncs]
        return members, generation


# -- what the coordinator's test modules share ------------------------------------------------------

E = ErrorCode
S = GroupState
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    S.EMPTY,
    S.PREPARING_REBALANCE,
    S.COMPLETING_REBALANCE,
    S.STABLE,
    S.DEAD,
)


def env_with(**config: int) -> GroupEnv:
    """A harness whose config has the initial delay and four offsets partitions, plus ``config``."""
    return GroupEnv(
        config=GroupConfig(
            **{"initial_rebalance_delay_ms": 3000, "offsets_topic_num_partitions": 4, **config}
        )
    )
