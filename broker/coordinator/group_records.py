"""The records of ``__consumer_offsets`` (Kafka's GroupMetadataManager message formats:
OffsetCommitKey v1, OffsetCommitValue v3 (v1 for a commit with an explicit retention, as Kafka
writes it; v0-v3 read), GroupMetadataKey v2, GroupMetadataValue v3; docs/design.md "Consumer
groups").

Byte for byte Kafka's layout, so the topic reads as Kafka's would: a key starts with an int16
version (0/1 an offset commit, 2 group metadata), strings are int16-length UTF-8, nullable ones
-1 for null, bytes int32-length. A null value is a tombstone: the offset or the group is gone,
and compaction removes the key. Pure functions; :class:`OffsetsRecordError` names what is wrong
with a record that does not parse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from client.types import TopicPartition

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
#: Kafka's OffsetCommitValue v1: the only one with an expire timestamp (a commit's retention_time_ms)
OFFSET_VALUE_EXPIRING_VERSION = 1
NO_TIMESTAMP = -1
GROUP_VALUE_VERSION = 3


class OffsetsRecordError(ValueError):
    """A ``__consumer_offsets`` record that does not parse."""


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class GroupValue:
    """What a group metadata record holds (Kafka's GroupMetadataValue v3)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[dict, ...]


# -- writing ---------------------------------------------------------------------------------------


def _str(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _nstr(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else _str(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    return struct.pack(">h", OFFSET_KEY_VERSION) + _str(group_id) + _str(tp[0]) + struct.pack(">i", tp[1])


def group_key(group_id: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _str(group_id)


def offset_value(committed: CommittedOffset) -> bytes:
    """v3, or v1 when the commit carries its own expiry (v1 has no leader epoch: Kafka drops it)."""
    if committed.expire_timestamp_ms is not None:
        return (
            struct.pack(">hq", OFFSET_VALUE_EXPIRING_VERSION, committed.offset)
            + _str(committed.metadata)
            + struct.pack(">qq", committed.commit_timestamp_ms, committed.expire_timestamp_ms)
        )
    return (
        struct.pack(">hqi", OFFSET_VALUE_VERSION, committed.offset, committed.leader_epoch)
        + _str(committed.metadata)
        + struct.pack(">q", committed.commit_timestamp_ms)
    )


def group_value(group: GroupMetadata, assignment: dict[str, bytes]) -> bytes:
    """A group's metadata record, with each member's subscription for the chosen protocol and its
    assignment (Kafka writes it after SyncGroup, and an empty one when the group empties)."""
    out = [
        struct.pack(">h", GROUP_VALUE_VERSION),
        _str(group.protocol_type or ""),
        struct.pack(">i", group.generation_id),
        _nstr(group.protocol_name),
        _nstr(group.leader_id),
        struct.pack(">q", group.state_timestamp_ms),
        struct.pack(">i", len(group.members)),
    ]
    for member in group.members.values():
        subscription = member.metadata(group.protocol_name) if group.protocol_name else b""
        out += [
            _str(member.member_id),
            _nstr(member.group_instance_id),
            _str(member.client_id),
            _str(member.client_host),
            struct.pack(">ii", member.rebalance_timeout_ms, member.session_timeout_ms),
            _bytes(subscription),
            _bytes(assignment.get(member.member_id, b"")),
        ]
    return b"".join(out)


# -- reading ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise OffsetsRecordError(f"record ends at byte {len(self.data)}, {size} more expected")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise OffsetsRecordError(f"null string at byte {self.pos}")
        return text

    def nullable_string(self) -> str | None:
        (length,) = self.unpack(">h")
        if length == -1:
            return None
        data = self._take(length)
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise OffsetsRecordError(f"string before byte {self.pos} is not UTF-8: {exc}") from None

    def bytes_(self) -> bytes:
        (length,) = self.unpack(">i")
        return b"" if length == -1 else self._take(length)

    def _take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise OffsetsRecordError(f"length {length} at byte {self.pos} runs past the record")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out


def read_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    if version in (0, 1):
        group_id, topic = reader.string(), reader.string()
        (partition,) = reader.unpack(">i")
        return OffsetKey(group_id, TopicPartition(topic, partition))
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    raise OffsetsRecordError(f"unknown key version {version}")


def read_offset_value(data: bytes, record_offset: int) -> CommittedOffset:
    """Any of Kafka's OffsetCommitValue versions 0-3 (Kafka's readOffsetMessageValue)."""
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unknown offset commit value version {version}")
    (offset,) = reader.unpack(">q")
    leader_epoch = reader.unpack(">i")[0] if version == 3 else -1
    metadata = reader.string()
    (timestamp,) = reader.unpack(">q")
    expire = reader.unpack(">q")[0] if version == 1 else NO_TIMESTAMP
    return CommittedOffset(
        offset,
        leader_epoch,
        metadata,
        timestamp,
        expire_timestamp_ms=None if expire == NO_TIMESTAMP else expire,
        record_offset=record_offset,
    )


def read_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    if version != GROUP_VALUE_VERSION:
        raise OffsetsRecordError(f"group metadata value version {version} is not {GROUP_VALUE_VERSION}")
    protocol_type = reader.string()
    (generation,) = reader.unpack(">i")
    protocol, leader = reader.nullable_string(), reader.nullable_string()
    (timestamp, count) = reader.unpack(">qi")
    if count < 0:
        raise OffsetsRecordError(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id, instance_id = reader.string(), reader.nullable_string()
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout, session_timeout = reader.unpack(">ii")
        subscription, assignment = reader.bytes_(), reader.bytes_()
        members.append(
            {
                "member_id": member_id,
                "group_instance_id": instance_id,
                "client_id": client_id,
                "client_host": client_host,
                "rebalance_timeout_ms": rebalance_timeout,
                "session_timeout_ms": session_timeout,
                "subscription": subscription,
                "assignment": assignment,
            }
        )
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def group_from_value(group_id: str, value: GroupValue, now_ms: int) -> GroupMetadata:
    """A group as its metadata record left it: Empty without members, else Stable with the
    members and their assignments (Kafka's GroupMetadata.loadGroup). Its heartbeats start now."""
    group = GroupMetadata(
        group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        state_timestamp_ms=value.state_timestamp_ms,
        generation_id=value.generation_id,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol_name,
    )
    for m in value.members:
        member = MemberMetadata(
            member_id=m["member_id"],
            group_instance_id=m["group_instance_id"],
            client_id=m["client_id"],
            client_host=m["client_host"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"],
            session_timeout_ms=m["session_timeout_ms"],
            protocol_type=value.protocol_type,
            protocols=[(value.protocol_name or "", m["subscription"])],
            assignment=m["assignment"],
            latest_heartbeat_ms=now_ms,
        )
        group.add(member)
    group.leader_id = value.leader_id if value.leader_id in group.members else group.leader_id
    return group
