"""The records of ``__consumer_offsets`` (broker/coordinator/group_records.py).

Oracle: Kafka's GroupMetadataManager schemas (OffsetCommitKey v1, OffsetCommitValue v1 and v3,
GroupMetadataKey v2, GroupMetadataValue v3 with MEMBER_METADATA_V3), the bytes below written out
by hand from those schemas: int16 version first, STRING = int16 length + UTF-8, NULLABLE_STRING
-1 for null, BYTES = int32 length, INT64 / INT32 big-endian.
"""

from __future__ import annotations

import pytest

from broker.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from broker.coordinator.group_records import (
    GroupKey,
    OffsetKey,
    OffsetsRecordError,
    group_from_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
    read_group_value,
    read_key,
    read_offset_value,
)
from client.types import TopicPartition


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def member(member_id: str = "m", instance: str | None = None, subscription: bytes = b"S") -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="h",
        rebalance_timeout_ms=300,
        session_timeout_ms=100,
        protocol_type="consumer",
        protocols=[("range", subscription)],
    )


def stable_group(*members: MemberMetadata) -> GroupMetadata:
    group = GroupMetadata(
        "g", state=GroupState.STABLE, state_timestamp_ms=9, generation_id=1, protocol_type="consumer"
    )
    for m in members:
        group.add(m)
    group.protocol_name = "range"
    return group


# -- byte layout -------------------------------------------------------------------------------------


def test_offset_key_layout() -> None:
    assert offset_key("g", TopicPartition("t", 1)) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + i32(1)


def test_group_key_layout() -> None:
    assert group_key("g") == b"\x00\x02" + b"\x00\x01g"


def test_offset_value_v3_layout() -> None:
    value = offset_value(CommittedOffset(offset=5, leader_epoch=2, metadata="m", commit_timestamp_ms=7))
    assert value == b"\x00\x03" + i64(5) + i32(2) + b"\x00\x01m" + i64(7)


def test_offset_value_with_an_explicit_retention_is_v1_like_kafkas() -> None:
    """Kafka writes v1 (with expire_timestamp) when the commit carried a retention time."""
    value = offset_value(
        CommittedOffset(offset=5, leader_epoch=2, metadata="m", commit_timestamp_ms=7, expire_timestamp_ms=70)
    )
    assert value == b"\x00\x01" + i64(5) + b"\x00\x01m" + i64(7) + i64(70)


def test_group_value_v3_layout() -> None:
    value = group_value(stable_group(member()), {"m": b"A"})
    assert value == (
        b"\x00\x03"
        + b"\x00\x08consumer"
        + i32(1)
        + b"\x00\x05range"
        + b"\x00\x01m"  # leader
        + i64(9)
        + i32(1)
        + b"\x00\x01m"
        + b"\xff\xff"  # group_instance_id: null
        + b"\x00\x01c"
        + b"\x00\x01h"
        + i32(300)
        + i32(100)
        + i32(1)
        + b"S"
        + i32(1)
        + b"A"
    )


def test_an_empty_groups_value_layout() -> None:
    group = GroupMetadata("g", state_timestamp_ms=4, generation_id=2, protocol_type="consumer")
    assert group_value(group, {}) == (
        b"\x00\x03" + b"\x00\x08consumer" + i32(2) + b"\xff\xff" + b"\xff\xff" + i64(4) + i32(0)
    )


# -- round trips -------------------------------------------------------------------------------------


def test_keys_round_trip() -> None:
    tp = TopicPartition("t\u00e9", 2**31 - 1)
    assert read_key(offset_key("gr\u00fcppe", tp)) == OffsetKey("gr\u00fcppe", tp)
    assert read_key(group_key("\U0001f600")) == GroupKey("\U0001f600")


def test_offset_values_round_trip_with_their_record_offset() -> None:
    for c in (
        CommittedOffset(2**40, 7, "meta\u00e9", 123),
        CommittedOffset(0, -1, "", -1),
        CommittedOffset(3, -1, "x", 10, expire_timestamp_ms=99),
    ):
        back = read_offset_value(offset_value(c), 17)
        assert back.offset == c.offset and back.metadata == c.metadata
        assert back.commit_timestamp_ms == c.commit_timestamp_ms
        assert back.expire_timestamp_ms == c.expire_timestamp_ms
        assert back.leader_epoch == (c.leader_epoch if c.expire_timestamp_ms is None else -1)
        assert back.record_offset == 17


def test_kafkas_older_offset_values_read() -> None:
    v0 = b"\x00\x00" + i64(5) + b"\x00\x01m" + i64(7)
    v2 = b"\x00\x02" + i64(5) + b"\x00\x01m" + i64(7)
    for data in (v0, v2):
        back = read_offset_value(data, 1)
        assert (back.offset, back.metadata, back.commit_timestamp_ms, back.expire_timestamp_ms) == (
            5,
            "m",
            7,
            None,
        )


def test_a_group_round_trips() -> None:
    a, b = member("a", "static-a", b"Sa"), member("b", None, b"Sb")
    group = stable_group(a, b)
    group.leader_id = "b"
    loaded = group_from_value("g", read_group_value(group_value(group, {"a": b"Aa", "b": b"Ab"})), now_ms=50)
    assert loaded.state is GroupState.STABLE and loaded.generation_id == 1
    assert loaded.protocol_type == "consumer" and loaded.protocol_name == "range"
    assert loaded.leader_id == "b" and list(loaded.members) == ["a", "b"]
    assert loaded.static_members == {"static-a": "a"}
    assert loaded.state_timestamp_ms == 9
    ma = loaded.members["a"]
    assert (ma.client_id, ma.client_host, ma.rebalance_timeout_ms, ma.session_timeout_ms) == (
        "c",
        "h",
        300,
        100,
    )
    assert ma.metadata("range") == b"Sa" and ma.assignment == b"Aa" and ma.latest_heartbeat_ms == 50


def test_an_empty_group_round_trips_empty() -> None:
    group = GroupMetadata("g", generation_id=3, protocol_type="consumer")
    loaded = group_from_value("g", read_group_value(group_value(group, {})), now_ms=0)
    assert loaded.state is GroupState.EMPTY and loaded.generation_id == 3 and not loaded.members
    assert loaded.protocol_name is None and loaded.leader_id is None


# -- malformed input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        b"",
        b"\x00",
        b"\x00\x05\x00\x01g",  # unknown key version
        b"\x00\x01\x00\x01g\x00\x01t\x00\x00",  # partition cut short
        b"\x00\x02\x00\x09g",  # length past the end
        b"\x00\x02\xff\xfe",  # negative length
        b"\x00\x02\xff\xff",  # null group id
        b"\x00\x02\x00\x01\xff",  # not UTF-8
    ],
)
def test_a_malformed_key_raises(key: bytes) -> None:
    with pytest.raises(OffsetsRecordError):
        read_key(key)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00\x09" + i64(1),  # unknown version
        b"\x00\x03" + i64(1) + i32(0),  # metadata missing
        b"\x00\x03" + i64(1) + i32(0) + b"\x00\x01m" + b"\x00\x00",  # timestamp cut short
        b"\x00\x01" + i64(1) + b"\x00\x01m" + i64(7),  # v1 without its expire timestamp
    ],
)
def test_a_malformed_offset_value_raises(value: bytes) -> None:
    with pytest.raises(OffsetsRecordError):
        read_offset_value(value, 0)


GOOD_GROUP = group_value(stable_group(member()), {"m": b"A"})


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00\x07" + GOOD_GROUP[2:],  # unknown version
        GOOD_GROUP[:-1],  # assignment cut short
        GOOD_GROUP[:30],
        b"\x00\x03\x00\x08consumer" + i32(1) + b"\xff\xff\xff\xff" + i64(0) + i32(-1),  # negative count
        b"\x00\x03\x00\x08consumer" + i32(1) + b"\xff\xff\xff\xff" + i64(0) + i32(2),  # members missing
    ],
)
def test_a_malformed_group_value_raises(value: bytes) -> None:
    with pytest.raises(OffsetsRecordError):
        read_group_value(value)
