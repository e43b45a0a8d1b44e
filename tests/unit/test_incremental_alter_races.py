"""Two IncrementalAlterConfigs of one resource at once lose neither change (broker/incremental_alter_configs.py;
docs/design.md "Incremental changes without lost updates").

The window: the broker reads the resource's overrides (one await), applies the operations, and
writes the whole set (a second await). Another alter that writes in between used to be
overwritten, both answered success (ZooKeeper-era Kafka's AdminManager has the same window). Now
the write is conditional on the version read, and a refused one reads and applies again.

A real ZooKeeper; the second alter runs in full just before the first one's write goes out
(:meth:`tests.bridge_faults.FailingZk.before`), for a topic's overrides (a set of an existing
znode) and for the brokers' default entity (a create of a missing one); then a write whose
answer is lost after it landed and that the bridge resends (beneath it,
:class:`tests.unit.kazoo_faults.KazooFaults`): the resend meets BadVersion, the alter reads its
own change back and writes it again, harmlessly. The first two tests fail without the
conditional write (the first alter's stale set is written over the second's change); the third
shows the retry it adds costs nothing when the conflict is the alter's own landed write.
"""

from __future__ import annotations

import logging

from broker.config import BrokerConfig
from broker.incremental_alter_configs import incremental_alter_configs
from client.protocol.admin_schemas import AlterConfigOpType
from client.protocol.api import ConfigResourceType
from tests.bridge_faults import FailingZk
from tests.unit.kazoo_faults import KazooFaults
from zk.bridge import ZkBridge
from zk.client import get_broker_config, get_topic_config, set_topic_config
from zk.data import encode_topic_assignment
from zk.paths import DEFAULT_BROKER_ENTITY, config_broker_path, config_topic_path, topic_path

CONFIG = BrokerConfig({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"})
SET, APPEND = int(AlterConfigOpType.SET), int(AlterConfigOpType.APPEND)


def request(kind: ConfigResourceType, name: str, *ops: tuple[str, int, str]) -> dict:
    configs = [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]
    return {
        "resources": [{"resource_type": int(kind), "resource_name": name, "configs": configs}],
        "validate_only": False,
    }


async def alter(zk: ZkBridge | FailingZk, body: dict) -> tuple[int, str | None]:
    (answer,) = (await incremental_alter_configs(zk, CONFIG, body))["responses"]  # type: ignore[arg-type]
    return answer["error_code"], answer["error_message"]


async def with_topic(zk: ZkBridge) -> None:
    await zk.create(topic_path("t"), encode_topic_assignment({0: [1]}))
    await set_topic_config(zk, "t", {"retention.ms": "1000"})


async def test_an_alter_between_a_read_and_its_write_is_kept_for_a_topic(zk: ZkBridge, caplog) -> None:
    await with_topic(zk)
    failing = FailingZk(zk)
    second = request(
        ConfigResourceType.TOPIC,
        "t",
        ("segment.ms", SET, "5000"),
        ("leader.replication.throttled.replicas", APPEND, "0:2"),
    )
    answers = []

    async def the_second_alter_lands_first() -> None:
        answers.append(await alter(zk, second))

    failing.before("set", the_second_alter_lands_first, path=config_topic_path("t"))
    first = request(ConfigResourceType.TOPIC, "t", ("leader.replication.throttled.replicas", APPEND, "0:1"))
    with caplog.at_level(logging.INFO, logger="broker.incremental_alter_configs"):
        assert await alter(failing, first) == (0, None)
    assert answers == [(0, None)]
    assert await get_topic_config(zk, "t") == {
        "retention.ms": "1000",
        "segment.ms": "5000",
        "leader.replication.throttled.replicas": "0:2,0:1",
    }
    assert (
        "changed since it was read (BadVersionError): applying the incremental changes again" in caplog.text
    )


async def test_two_first_alters_of_a_broker_entity_both_land(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    path = config_broker_path(DEFAULT_BROKER_ENTITY)
    second = request(ConfigResourceType.BROKER, "", ("follower.replication.throttled.rate", SET, "2000"))
    answers = []

    async def the_second_alter_creates_it() -> None:
        answers.append(await alter(zk, second))

    failing.before("create", the_second_alter_creates_it, path=path)
    first = request(ConfigResourceType.BROKER, "", ("leader.replication.throttled.rate", SET, "1000"))
    assert await alter(failing, first) == (0, None)
    assert answers == [(0, None)]
    assert await get_broker_config(zk, DEFAULT_BROKER_ENTITY) == {
        "leader.replication.throttled.rate": "1000",
        "follower.replication.throttled.rate": "2000",
    }


async def test_a_resent_write_that_had_landed_is_applied_again_harmlessly(zk: ZkBridge) -> None:
    await with_topic(zk)
    faults = KazooFaults(zk.client)
    faults.fail("set_async", path=config_topic_path("t"), after_answer=True)
    body = request(ConfigResourceType.TOPIC, "t", ("leader.replication.throttled.replicas", APPEND, "0:1"))
    assert await alter(zk, body) == (0, None)
    assert faults.injected == [("set_async", config_topic_path("t"))] and zk.resent_requests >= 1
    assert await get_topic_config(zk, "t") == {
        "retention.ms": "1000",
        "leader.replication.throttled.replicas": "0:1",
    }
