"""Topic ids in the controller (KIP-516 in ZooKeeper mode: Kafka's
``KafkaController.processTopicIds`` and ``KafkaZkClient.setTopicIds``; docs/design.md "Topic ids
(KIP-516)").

Every read of a topic znode by the controller goes through :func:`read_topic`: it returns the
assignment, records the topic's id in the context, and gives a topic that has none (created by
an older floodmark or a tool that writes version 1) a random id first, as Kafka 2.8+ does on the
controller's first read of it (at failover and on each topic change); a topic whose znode was
rewritten without its id while this controller knew the id gets that id back (Kafka keeps its
context's id there too, but writes it back only with the next assignment change). The write is fenced by the
controller epoch and conditional on the version read, so it never overwrites a partition added or
a reassignment written meanwhile: it reads again instead. Once written, an id never changes: a
rewrite of the znode (partitions added, a reassignment) keeps the id it read.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import BadVersionError

from client.protocol.topic_id import random_uuid
from controller.parts import ControllerParts
from zk.client import set_topic_id
from zk.data import ReplicaAssignment, decode_full_topic_assignment, decode_topic_id
from zk.paths import topic_path

log = logging.getLogger(__name__)

#: How often a topic id write may meet a znode changed since its read before the event fails
#: (and is retried as a whole by the event manager).
MAX_ID_WRITE_ATTEMPTS = 5


async def read_topic(ctl: ControllerParts, topic: str) -> dict[int, list[int]] | None:
    """The topic's assignment (None: no such topic), with a watch on its znode; its id is in
    ``ctl.context.topic_ids`` afterwards, written first if the znode had none."""
    full = await read_full_topic(ctl, topic)
    return None if full is None else {p: list(a.replicas) for p, a in full.items()}


async def read_full_topic(ctl: ControllerParts, topic: str) -> dict[int, ReplicaAssignment] | None:
    """:func:`read_topic` with each partition's adding and removing replicas (KIP-455)."""
    for _ in range(MAX_ID_WRITE_ATTEMPTS):
        got = await ctl.zk.get(topic_path(topic), watch=ctl.topic_watcher(topic))
        if got is None:
            return None
        data, stat = got
        assignment = decode_full_topic_assignment(data)
        topic_id = decode_topic_id(data)
        if topic_id is None:
            # a znode rewritten without its id (an older tool) gets back the one its replicas
            # already hold, as far as this controller knows it; a topic new to it gets a new one
            known = ctl.context.topic_ids.get(topic)
            topic_id = known or random_uuid(ctl.rng.randbytes)
            try:
                await set_topic_id(ctl.zk, topic, data, stat.version, ctl.context.epoch_zk_version, topic_id)
            except BadVersionError:
                continue  # changed since the read: read it again (it may have an id now)
            log.info("%s topic id %s of topic %s", "restored" if known else "assigned", topic_id, topic)
            ctl.record("topic_id_restored" if known else "topic_id_assigned", topic=topic, topic_id=topic_id)
        ctl.context.topic_ids[topic] = topic_id
        return assignment
    raise BadVersionError(f"{topic_path(topic)} kept changing while its topic id was written")
