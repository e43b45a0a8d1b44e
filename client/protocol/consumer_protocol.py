"""Kafka's ConsumerProtocol: the bytes a consumer group puts inside JoinGroup and SyncGroup
(Kafka's ``org.apache.kafka.clients.consumer.internals.ConsumerProtocol``, protocol type
``"consumer"``; seed 004; docs/design.md "Consumer groups").

The group coordinator never reads these bytes: it stores each member's *Subscription* (the
JoinGroup protocol metadata) and hands them all to the leader, and it forwards the leader's
per-member *Assignment* (the SyncGroup member assignment). Only consumers encode and decode
them, so the layout must be Kafka's byte for byte for a Kafka client to share a group::

    Subscription v0:  version int16, topics [string], user_data nullable bytes
    Subscription v1:  v0 + owned_partitions [topic string, partitions [int32]]     (KIP-429)
    Assignment v0/v1: version int16, partitions [topic string, partitions [int32]],
                      user_data nullable bytes

Strings are an int16 length and UTF-8, arrays an int32 count, bytes an int32 length where
-1 means null; all big-endian. As Kafka does, a decoder reads a version newer than it knows
with the newest layout it knows (newer versions only append fields: v2's generation id and
v3's rack id are skipped) and ignores bytes after the fields it reads; and an encoder drops
``owned_partitions`` at Subscription v0 (Kafka marks the field ignorable). Anything else that
does not parse raises :class:`ConsumerProtocolError`, never ``IndexError`` or ``struct.error``.

Partitions travel grouped by topic: encoding groups a flat ``(topic, partition)`` sequence
by topic in order of first appearance (partition order kept), decoding flattens it again.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

PROTOCOL_TYPE = "consumer"

SUBSCRIPTION_V0 = 0
SUBSCRIPTION_V1 = 1
SUBSCRIPTION_LATEST_VERSION = SUBSCRIPTION_V1
ASSIGNMENT_V0 = 0
ASSIGNMENT_V1 = 1
ASSIGNMENT_LATEST_VERSION = ASSIGNMENT_V1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_NULL_LENGTH = -1


class ConsumerProtocolError(ValueError):
    """Bytes that are not a ConsumerProtocol Subscription or Assignment, or a value that
    cannot be encoded as one (Kafka's ``SchemaException``)."""


@dataclass(frozen=True)
class Subscription:
    """A member's JoinGroup metadata: the topics it wants, its assignor's user data, and
    (v1, KIP-429) the partitions it owns now."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Assignment:
    """What the leader gives one member in SyncGroup: its partitions and assignor user data."""

    partitions: tuple[tuple[str, int], ...]
    user_data: bytes | None = None


# --- encoding ---------------------------------------------------------------------------


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ConsumerProtocolError(f"string of {len(raw)} bytes exceeds the int16 length limit")
    return _INT16.pack(len(raw)) + raw


def _int32(value: int, what: str) -> bytes:
    try:
        return _INT32.pack(value)
    except struct.error:
        raise ConsumerProtocolError(f"{what} {value!r} is not an int32") from None


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _INT32.pack(_NULL_LENGTH)
    return _INT32.pack(len(value)) + bytes(value)


def _version(version: int) -> bytes:
    if not 0 <= version <= 0x7FFF:
        raise ConsumerProtocolError(f"version {version!r} is not a non-negative int16")
    return _INT16.pack(version)


def _topic_partitions(partitions: Iterable[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    parts = [_INT32.pack(len(by_topic))]
    for topic, numbers in by_topic.items():
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(numbers)))
        parts.extend(_int32(number, f"partition of {topic!r}") for number in numbers)
    return b"".join(parts)


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_LATEST_VERSION) -> bytes:
    """A Subscription's bytes at ``version`` (0 or 1). At v0 ``owned_partitions`` is dropped."""
    if version > SUBSCRIPTION_LATEST_VERSION:
        raise ConsumerProtocolError(f"cannot encode Subscription v{version}: v0-v1 known")
    parts = [_version(version), _INT32.pack(len(sub.topics))]
    parts.extend(_string(topic) for topic in sub.topics)
    parts.append(_nullable_bytes(sub.user_data))
    if version >= SUBSCRIPTION_V1:
        parts.append(_topic_partitions(sub.owned_partitions))
    return b"".join(parts)


def encode_assignment(asg: Assignment, version: int = ASSIGNMENT_V0) -> bytes:
    """An Assignment's bytes at ``version`` (0 or 1: the same layout)."""
    if version > ASSIGNMENT_LATEST_VERSION:
        raise ConsumerProtocolError(f"cannot encode Assignment v{version}: v0-v1 known")
    return b"".join((_version(version), _topic_partitions(asg.partitions), _nullable_bytes(asg.user_data)))


# --- decoding ---------------------------------------------------------------------------


class _Reader:
    """A cursor over one message; every read checks the bytes are there first."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def _take(self, size: int, field: str) -> bytes:
        left = len(self._data) - self._pos
        if size > left:
            raise ConsumerProtocolError(
                f"truncated {self._what}: {field} needs {size} bytes at offset {self._pos}, {left} left"
            )
        chunk = self._data[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def int16(self, field: str) -> int:
        return _INT16.unpack(self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return _INT32.unpack(self._take(4, field))[0]

    def count(self, field: str, min_item_size: int) -> int:
        """An array's int32 count, refused if negative or if the rest cannot hold that many."""
        at = self._pos
        count = self.int32(f"{field} count")
        if count < 0:
            raise ConsumerProtocolError(f"{self._what}: {field} count {count} at offset {at} is negative")
        left = len(self._data) - self._pos
        if count * min_item_size > left:
            raise ConsumerProtocolError(
                f"truncated {self._what}: {count} {field} at offset {at} need at least "
                f"{count * min_item_size} bytes, {left} left"
            )
        return count

    def string(self, field: str) -> str:
        at = self._pos
        length = self.int16(f"{field} length")
        if length < 0:
            raise ConsumerProtocolError(f"{self._what}: {field} length {length} at offset {at} is negative")
        raw = self._take(length, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConsumerProtocolError(f"{self._what}: {field} at offset {at} is not UTF-8") from None

    def nullable_bytes(self, field: str) -> bytes | None:
        at = self._pos
        length = self.int32(f"{field} length")
        if length == _NULL_LENGTH:
            return None
        if length < 0:
            raise ConsumerProtocolError(
                f"{self._what}: {field} length {length} at offset {at} is negative (not -1)"
            )
        return self._take(length, field)

    def version(self) -> int:
        version = self.int16("version")
        if version < 0:
            raise ConsumerProtocolError(f"{self._what}: version {version} is negative")
        return version

    def topic_partitions(self, field: str) -> tuple[tuple[str, int], ...]:
        result: list[tuple[str, int]] = []
        for _ in range(self.count(field, 2 + 4)):
            topic = self.string(f"{field} topic")
            numbers = self.count(f"partitions of {topic!r}", 4)
            result.extend((topic, self.int32("partition")) for _ in range(numbers))
        return tuple(result)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A Subscription from its bytes, any version (fields after v1's are skipped)."""
    reader = _Reader(data, "Subscription")
    version = reader.version()
    topics = tuple(reader.string("topic") for _ in range(reader.count("topics", 2)))
    user_data = reader.nullable_bytes("user_data")
    owned: tuple[tuple[str, int], ...] = ()
    if version >= SUBSCRIPTION_V1:
        owned = reader.topic_partitions("owned_partitions")
    return Subscription(topics=topics, user_data=user_data, owned_partitions=owned)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """An Assignment from its bytes, any version (all share v0's layout)."""
    reader = _Reader(data, "Assignment")
    reader.version()
    partitions = reader.topic_partitions("assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    return Assignment(partitions=partitions, user_data=user_data)
