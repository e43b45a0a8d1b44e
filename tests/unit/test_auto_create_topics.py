"""auto.create.topics.enable's create at a Metadata request (broker/apis.py): a ZooKeeper blip
during the create is not a Metadata failure. The create's outcome is unknown, so the topic answers
LEADER_NOT_AVAILABLE and the client asks again; an invalid name answers its own error. The
ZooKeeper stand-in only fails (pure logic: the real path is tests/integration/test_cluster.py)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from kazoo.exceptions import ConnectionLoss

from broker.apis import KafkaApis
from client.protocol.errors import ErrorCode


class LostZooKeeper:
    def __getattr__(self, name: str):  # noqa: ANN204 - every bridge call loses its connection
        async def call(*args: object, **kwargs: object) -> None:
            raise ConnectionLoss()

        return call


def apis() -> SimpleNamespace:
    config = {"num.partitions": 1, "default.replication.factor": 1}
    return SimpleNamespace(zk=LostZooKeeper(), config=config, rng=random.Random(0))


async def test_a_zookeeper_blip_during_the_create_answers_leader_not_available() -> None:
    assert await KafkaApis._auto_create_topic(apis(), "events") == ErrorCode.LEADER_NOT_AVAILABLE


async def test_an_invalid_name_answers_its_error() -> None:
    assert await KafkaApis._auto_create_topic(apis(), "bad/name") == ErrorCode.INVALID_TOPIC_EXCEPTION
