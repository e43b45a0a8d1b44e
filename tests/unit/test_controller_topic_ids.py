"""Topic ids (KIP-516) in the controller, against a real ZooKeeper with the broker requests
recorded (tests/unit/controller_harness.py): a topic znode without an id gets one on the
controller's first read (Kafka 2.8+'s ``setTopicIds`` at failover and on topic changes); a topic
created through the admin path has one from its creation; no rewrite of the znode (partitions
added, a reassignment) loses it; every LeaderAndIsr and UpdateMetadata partition state carries
it; the first LeaderAndIsr to each broker at failover and at a broker's start-up is FULL, naming
everything the broker hosts. Only names that existed before topic ids are imported, so each test
also runs against the code before them (and fails there with its assertion).
"""

from __future__ import annotations

import json
import random

from client.protocol.api import ApiKey
from client.types import TopicPartition
from controller import topic_admin
from controller.reassignment import update_assigned_replicas
from tests.unit.controller_harness import start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import ZkBridge
from zk.client import register_broker
from zk.data import EndPoint
from zk.paths import topic_path

FULL = 2  # LeaderAndIsr type FULL (Kafka's AbstractControlRequest.Type)
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


async def znode_topic_id(zk: ZkBridge, topic: str) -> str | None:
    got = await zk.get(topic_path(topic))
    assert got is not None
    return json.loads(got[0]).get("topic_id")


async def test_a_topic_without_an_id_gets_one_on_the_controllers_first_read(zk: ZkBridge) -> None:
    """The harness writes version-1 znodes (as an older floodmark or kafka-topics.sh did): the
    controller's failover gives each an id, fenced and conditional, and keeps it in its context;
    the znode is Kafka's version 3 with its assignment unchanged."""
    controller, _ = await start(zk, zk, [1, 2], {"t": {0: [1, 2], 1: [2, 1]}, "u": {0: [1]}})
    try:
        ids = {t: await znode_topic_id(zk, t) for t in ("t", "u")}
        assert all(ids.values()) and len(set(ids.values())) == 2, ids
        assert controller.context.topic_ids == ids
        got = await zk.get(topic_path("t"))
        assert json.loads(got[0])["version"] == 3 and json.loads(got[0])["partitions"] == {
            "0": [1, 2],
            "1": [2, 1],
        }
    finally:
        await controller.shutdown()


async def test_a_created_topic_has_its_id_from_creation_and_keeps_it(zk: ZkBridge) -> None:
    """CreateTopics' write carries the id; the controller's TopicChange reads it and writes
    nothing; CreatePartitions and a reassignment's assignment writes keep it."""
    controller, calls = await start(zk, zk, [1, 2], {})
    try:
        await topic_admin.create_topic(zk, "c", {0: [1, 2]})
        created = await znode_topic_id(zk, "c")
        assert created is not None
        assert await eventually(lambda: controller.context.topic_ids.get("c") == created)
        await idle(controller)
        await topic_admin.add_partitions(zk, "c", 2, random.Random(0))
        assert await znode_topic_id(zk, "c") == created
        await update_assigned_replicas(controller, TopicPartition("c", 0), [2, 1])
        assert await znode_topic_id(zk, "c") == created
        await idle(controller)
        entries = [
            p
            for s in calls.sent
            if s.api_key in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA)
            for p in s.body["partition_states"]
            if p["topic"] == "c"
        ]
        assert entries and {p.get("topic_id") for p in entries} == {created}
    finally:
        await controller.shutdown()


async def test_failover_sends_each_live_broker_a_full_leader_and_isr(zk: ZkBridge) -> None:
    """Every live broker's first LeaderAndIsr is FULL and names what it hosts with the topic ids;
    broker 3 hosts nothing and still gets one (empty): all its logs are strays."""
    controller, calls = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2], 1: [2]}})
    try:
        topic_id = controller.context.topic_ids["t"]
        first = {b: calls.of(b, ApiKey.LEADER_AND_ISR)[0].body for b in (1, 2, 3)}
        assert {b: body.get("type") for b, body in first.items()} == {1: FULL, 2: FULL, 3: FULL}
        assert first[1]["hosted_topics"] == [{"topic": "t", "topic_id": topic_id, "partitions": [0]}]
        assert first[2]["hosted_topics"] == [{"topic": "t", "topic_id": topic_id, "partitions": [0, 1]}]
        assert first[3]["hosted_topics"] == [] and first[3]["partition_states"] == []
        assert all(len(calls.of(b, ApiKey.LEADER_AND_ISR)) == 1 for b in (1, 2, 3))
    finally:
        await controller.shutdown()


async def test_a_starting_broker_gets_a_full_leader_and_isr_first(zk: ZkBridge) -> None:
    """Broker 2 registers (a start-up): its first LeaderAndIsr is FULL and names t-0, which it
    hosts; a later one (t-1 created on it) is not FULL."""
    controller, calls = await start(zk, zk, [1], {"t": {0: [1, 2]}})
    try:
        calls.sent.clear()
        await register_broker(zk, 2, [EndPoint("PLAINTEXT", "127.0.0.1", 2)], 0)
        assert await eventually(lambda: bool(calls.of(2, ApiKey.LEADER_AND_ISR)))
        await idle(controller)
        (startup,) = calls.of(2, ApiKey.LEADER_AND_ISR)
        topic_id = controller.context.topic_ids["t"]
        assert startup.body.get("type") == FULL
        assert startup.body["hosted_topics"] == [{"topic": "t", "topic_id": topic_id, "partitions": [0]}]
        assert [p.get("topic_id") for p in startup.body["partition_states"]] == [topic_id]
        await topic_admin.create_topic(zk, "later", {0: [2]})
        assert await eventually(lambda: len(calls.of(2, ApiKey.LEADER_AND_ISR)) == 2)
        assert calls.of(2, ApiKey.LEADER_AND_ISR)[1].body.get("type", 0) != FULL
    finally:
        await controller.shutdown()
