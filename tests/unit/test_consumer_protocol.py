"""Kafka's ConsumerProtocol Subscription and Assignment bytes (client.protocol.consumer_protocol).

The layout is pinned by hand-written byte strings; kafka-python's encoders of Kafka's own
ConsumerProtocolSubscription / ConsumerProtocolAssignment schemas (and its older v0 structs)
are the independent oracle for everything else: equal bytes, and each side reads the other's.
"""

from __future__ import annotations

import random
import struct
from collections import Counter

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from client.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

# Subscription v1: topics ["ab"], user_data b"\x01", owned_partitions [("ab", [3])].
SUB_V1 = Subscription(topics=("ab",), user_data=b"\x01", owned_partitions=(("ab", 3),))
SUB_V1_BYTES = bytes.fromhex(
    "0001"  # version 1
    "00000001" "0002" "6162"  # topics: 1 string, "ab"
    "00000001" "01"  # user_data: 1 byte
    "00000001" "0002" "6162" "00000001" "00000003"  # owned: 1 topic "ab", partitions [3]
)  # fmt: skip
# Assignment v0: partitions [("t", [0, 2])], user_data null.
ASG_V0 = Assignment(partitions=(("t", 0), ("t", 2)), user_data=None)
ASG_V0_BYTES = bytes.fromhex(
    "0000"  # version 0
    "00000001" "0001" "74" "00000002" "00000000" "00000002"  # 1 topic "t": [0, 2]
    "ffffffff"  # user_data null
)  # fmt: skip


def grouped(partitions: tuple[tuple[str, int], ...]) -> list[tuple[str, list[int]]]:
    """Flat (topic, partition) pairs grouped by topic in order of first appearance."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def flat(k_partitions: list) -> tuple[tuple[str, int], ...]:
    return tuple((tp.topic, p) for tp in k_partitions for p in tp.partitions)


def k_subscription(sub: Subscription, version: int) -> KSubscription:
    owned = [KSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in grouped(sub.owned_partitions)]
    return KSubscription(
        version=version, topics=list(sub.topics), user_data=sub.user_data, owned_partitions=owned
    )


def k_assignment(asg: Assignment, version: int) -> KAssignment:
    assigned = [KAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in grouped(asg.partitions)]
    return KAssignment(version=version, assigned_partitions=assigned, user_data=asg.user_data)


def random_subscription(rng: random.Random) -> Subscription:
    names = [f"topic-{rng.randrange(100)}" for _ in range(rng.randrange(6))]
    topics = tuple(dict.fromkeys(names))
    owned = tuple(
        (topic, p)
        for topic in topics
        if rng.random() < 0.5
        for p in rng.sample(range(50), rng.randrange(1, 5))
    )
    return Subscription(topics=topics, user_data=random_user_data(rng), owned_partitions=owned)


def random_assignment(rng: random.Random) -> Assignment:
    topics = dict.fromkeys(f"t{rng.randrange(30)}.é" for _ in range(rng.randrange(5)))
    partitions = tuple(
        (topic, p) for topic in topics for p in rng.sample(range(2**31 - 1), rng.randrange(0, 5))
    )
    return Assignment(partitions=partitions, user_data=random_user_data(rng))


def random_user_data(rng: random.Random) -> bytes | None:
    return rng.choice([None, b"", rng.randbytes(rng.randrange(1, 20))])


# --- the layout, pinned by hand ---------------------------------------------------------


def test_protocol_type_is_consumer() -> None:
    assert PROTOCOL_TYPE == "consumer"


def test_subscription_v1_bytes_by_hand() -> None:
    assert encode_subscription(SUB_V1, version=1) == SUB_V1_BYTES
    assert decode_subscription(SUB_V1_BYTES) == SUB_V1


def test_subscription_v0_bytes_by_hand_drops_owned_partitions() -> None:
    expected = bytes.fromhex("0000" "00000001" "0002" "6162" "00000001" "01")  # fmt: skip
    assert encode_subscription(SUB_V1, version=0) == expected
    assert decode_subscription(expected) == Subscription(topics=("ab",), user_data=b"\x01")


def test_default_subscription_version_is_1() -> None:
    assert encode_subscription(SUB_V1) == SUB_V1_BYTES


def test_assignment_v0_bytes_by_hand() -> None:
    assert encode_assignment(ASG_V0) == ASG_V0_BYTES
    assert decode_assignment(ASG_V0_BYTES) == ASG_V0


def test_assignment_v1_is_v0_layout_with_version_1() -> None:
    assert encode_assignment(ASG_V0, version=1) == b"\x00\x01" + ASG_V0_BYTES[2:]
    assert decode_assignment(b"\x00\x01" + ASG_V0_BYTES[2:]) == ASG_V0


def test_partitions_are_grouped_by_topic_in_order_of_first_appearance() -> None:
    asg = Assignment(partitions=(("b", 1), ("a", 0), ("b", 0)))
    assert decode_assignment(encode_assignment(asg)).partitions == (("b", 1), ("b", 0), ("a", 0))


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("user_data", [None, b"", b"\x00\xff"])
@pytest.mark.parametrize("version", [0, 1])
def test_round_trip_null_empty_and_some_user_data(user_data: bytes | None, version: int) -> None:
    owned = (("x", 0), ("x", 7)) if version >= 1 else ()
    sub = Subscription(topics=("x", "y"), user_data=user_data, owned_partitions=owned)
    asg = Assignment(partitions=(("x", 0), ("y", 3)), user_data=user_data)
    assert decode_subscription(encode_subscription(sub, version)) == sub
    assert decode_assignment(encode_assignment(asg, version)) == asg


def test_null_and_empty_user_data_differ_on_the_wire() -> None:
    null = encode_assignment(Assignment(partitions=(), user_data=None))
    empty = encode_assignment(Assignment(partitions=(), user_data=b""))
    assert null == bytes.fromhex("0000" "00000000" "ffffffff")  # fmt: skip
    assert empty == bytes.fromhex("0000" "00000000" "00000000")  # fmt: skip


def test_empty_everything() -> None:
    assert decode_subscription(encode_subscription(Subscription(topics=()))) == Subscription(topics=())
    assert decode_assignment(encode_assignment(Assignment(partitions=()))) == Assignment(partitions=())


# --- kafka-python as the oracle ----------------------------------------------------------


def test_subscription_bytes_equal_kafka_pythons_both_ways() -> None:
    rng = random.Random(4)
    for _ in range(300):
        sub = random_subscription(rng)
        for version in (0, 1):
            ours = encode_subscription(sub, version)
            theirs = k_subscription(sub, version).encode()
            assert ours == theirs, (sub, version)
            decoded = KSubscription.decode(ours)
            assert decoded.version == version
            assert (decoded.topics, decoded.user_data) == (list(sub.topics), sub.user_data)
            owned = sub.owned_partitions if version >= 1 else ()
            assert flat(decoded.owned_partitions or []) == owned
            assert decode_subscription(theirs) == Subscription(sub.topics, sub.user_data, owned)


def test_assignment_bytes_equal_kafka_pythons_both_ways() -> None:
    rng = random.Random(4)
    for _ in range(300):
        asg = random_assignment(rng)
        for version in (0, 1):
            ours = encode_assignment(asg, version)
            theirs = k_assignment(asg, version).encode()
            assert ours == theirs, (asg, version)
            decoded = KAssignment.decode(ours)
            assert decoded.version == version
            assert flat(decoded.assigned_partitions) == asg.partitions
            assert decoded.user_data == asg.user_data
            assert decode_assignment(theirs) == asg


def test_v0_bytes_equal_kafka_pythons_old_structs() -> None:
    sub = Subscription(topics=("a", "bc"), user_data=b"u")
    old_sub = ConsumerProtocolMemberMetadata_v0(0, ["a", "bc"], b"u").encode()
    assert encode_subscription(sub, version=0) == old_sub
    asg = Assignment(partitions=(("a", 1), ("a", 2), ("bc", 0)), user_data=b"")
    old_asg = ConsumerProtocolMemberAssignment_v0(0, [("a", [1, 2]), ("bc", [0])], b"").encode()
    assert encode_assignment(asg) == old_asg
    assert decode_assignment(old_asg) == asg


@pytest.mark.parametrize("version", [2, 3])
def test_newer_subscription_versions_read_the_known_fields(version: int) -> None:
    """Kafka's forward compatibility: v2's generation id and v3's rack id are skipped."""
    newer = KSubscription(
        version=version,
        topics=["a", "b"],
        user_data=b"ud",
        owned_partitions=[KSubscription.TopicPartition(topic="a", partitions=[4, 1])],
        generation_id=7,
        rack_id="rack-1",
    ).encode()
    assert decode_subscription(newer) == Subscription(("a", "b"), b"ud", (("a", 4), ("a", 1)))


@pytest.mark.parametrize("version", [2, 3, 0x7FFF])
def test_newer_assignment_versions_read_the_known_fields(version: int) -> None:
    newer = struct.pack(">h", version) + ASG_V0_BYTES[2:] + b"future fields"
    assert decode_assignment(newer) == ASG_V0


def test_trailing_bytes_are_ignored() -> None:
    assert decode_subscription(SUB_V1_BYTES + b"\x00\x01\x02") == SUB_V1
    assert decode_assignment(ASG_V0_BYTES + b"\xff") == ASG_V0


# --- malformed input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decode", "valid"),
    [
        (decode_subscription, SUB_V1_BYTES),
        (decode_subscription, encode_subscription(SUB_V1, version=0)),
        (decode_assignment, ASG_V0_BYTES),
        (decode_assignment, encode_assignment(Assignment((("topic", 1),), b"data"), version=1)),
    ],
)
def test_truncation_at_every_byte_is_refused(decode, valid: bytes) -> None:  # noqa: ANN001
    for end in range(len(valid)):
        with pytest.raises(ConsumerProtocolError, match="truncated"):
            decode(valid[:end])


def test_negative_topics_count() -> None:
    with pytest.raises(ConsumerProtocolError, match="topics count -1 .* negative"):
        decode_subscription(bytes.fromhex("0000" "ffffffff" "ffffffff"))  # fmt: skip


def test_negative_partitions_count() -> None:
    data = bytes.fromhex("0000" "00000001" "0001" "74" "fffffffe" "ffffffff")  # fmt: skip
    with pytest.raises(ConsumerProtocolError, match="negative"):
        decode_assignment(data)


def test_array_count_past_the_end() -> None:
    with pytest.raises(ConsumerProtocolError, match="truncated"):
        decode_assignment(bytes.fromhex("0000" "7fffffff" "ffffffff"))  # fmt: skip


def test_string_length_past_the_end() -> None:
    data = bytes.fromhex("0000" "00000001" "0010" "6162" "ffffffff")  # fmt: skip
    with pytest.raises(ConsumerProtocolError, match="truncated Subscription: topic needs 16 bytes"):
        decode_subscription(data)


def test_negative_string_length() -> None:
    data = bytes.fromhex("0000" "00000001" "ffff" "ffffffff")  # fmt: skip
    with pytest.raises(ConsumerProtocolError, match="topic length -1 .* negative"):
        decode_subscription(data)


def test_user_data_length_below_minus_one() -> None:
    with pytest.raises(ConsumerProtocolError, match="user_data length -2 .* negative"):
        decode_subscription(bytes.fromhex("0000" "00000000" "fffffffe"))  # fmt: skip


def test_user_data_length_past_the_end() -> None:
    with pytest.raises(ConsumerProtocolError, match="truncated"):
        decode_assignment(bytes.fromhex("0000" "00000000" "00000003" "0102"))  # fmt: skip


def test_negative_version() -> None:
    with pytest.raises(ConsumerProtocolError, match="version -1"):
        decode_assignment(b"\xff\xff" + ASG_V0_BYTES[2:])


def test_topic_not_utf8() -> None:
    data = bytes.fromhex("0000" "00000001" "0001" "ff" "ffffffff")  # fmt: skip
    with pytest.raises(ConsumerProtocolError, match="not UTF-8"):
        decode_subscription(data)


def test_consumer_protocol_error_is_a_value_error() -> None:
    assert issubclass(ConsumerProtocolError, ValueError)


def test_random_corruption_raises_only_consumer_protocol_error() -> None:
    """Corrupted and cut bytes either decode or raise ConsumerProtocolError, nothing else."""
    rng = random.Random(4)
    outcomes: Counter[str] = Counter()
    for _ in range(3000):
        data = bytearray(encode_subscription(random_subscription(rng)))
        data += encode_assignment(random_assignment(rng))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[: rng.randrange(len(data) + 1)]
        for decode in (decode_subscription, decode_assignment):
            try:
                decode(bytes(data))
                outcomes["decoded"] += 1
            except ConsumerProtocolError:
                outcomes["refused"] += 1
    assert outcomes["decoded"] > 100 and outcomes["refused"] > 100, outcomes


# --- values that cannot be encoded -------------------------------------------------------


def test_encode_refuses_unknown_or_negative_versions() -> None:
    with pytest.raises(ConsumerProtocolError, match="v2"):
        encode_subscription(SUB_V1, version=2)
    with pytest.raises(ConsumerProtocolError, match="v2"):
        encode_assignment(ASG_V0, version=2)
    with pytest.raises(ConsumerProtocolError, match="version -1"):
        encode_assignment(ASG_V0, version=-1)


def test_encode_refuses_partition_beyond_int32_and_overlong_topic() -> None:
    with pytest.raises(ConsumerProtocolError, match="not an int32"):
        encode_assignment(Assignment(partitions=(("t", 2**31),)))
    with pytest.raises(ConsumerProtocolError, match="int16 length"):
        encode_subscription(Subscription(topics=("x" * 0x8000,)))
