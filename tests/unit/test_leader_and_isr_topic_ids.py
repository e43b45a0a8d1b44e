"""A broker applying LeaderAndIsr with topic ids (KIP-516; Kafka's
ReplicaManager.becomeLeaderOrFollower): a new log records its topic id in ``partition.metadata``;
a log of another id answers INCONSISTENT_TOPIC_ID and is not served; a FULL LeaderAndIsr deletes
the stray replicas it shows (Kafka's findStrayReplicas / updateStrayLogs) before it applies its
partitions, so a re-created topic never starts from a deleted incarnation's log. Real
ReplicaManager and LogManager on a temporary dir, requests validated as the network does. Only
names that existed before topic ids are imported, so each test runs against the code before them
(and fails there with its assertion).
"""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.replica_manager import ReplicaManager
from client.protocol.api import ApiKey, validate_request
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch

OLD_ID = "b1Sle8nHTmWcGCu-bBzMJw"
NEW_ID = "Vf3q5yUFQ4i0gn0Pfq4MKA"
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
FULL = 2  # LeaderAndIsr type FULL (Kafka's AbstractControlRequest.Type)
INCONSISTENT_TOPIC_ID = 103


def recorded_id(partition_dir: Path) -> str | None:
    """partition.metadata's topic id, read as Kafka's format says ("version: 0\ntopic_id: <id>")."""
    path = partition_dir / "partition.metadata"
    if not path.exists():
        return None
    version, topic_id = path.read_text().split("\n")
    assert version == "version: 0"
    return topic_id.removeprefix("topic_id: ")


def hosted(topic: str, topic_id: str, *partitions: int) -> dict:
    return {"topic": topic, "topic_id": topic_id, "partitions": list(partitions)}


def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "logs")}
    )


class Broker:
    """Broker 1: a real ReplicaManager and LogManager, requests validated as the network would."""

    def __init__(self, tmp_path: Path) -> None:
        self.cfg = broker_config(tmp_path)
        self.state_changes: list[dict] = []
        self.lm = LogManager(
            self.cfg.log_dirs, self.cfg.log_config(), lambda: 0, schedule_once=lambda n, j: j()
        )
        self.lm.load_logs()

        async def topic_config(topic: str) -> dict[str, str]:
            return {}

        self.rm = ReplicaManager(
            self.cfg, self.lm, MetadataCache(1), lambda: 0, self.state_changes.append, topic_config
        )

    async def leader_and_isr(
        self, states: list[dict], full: list[dict] | None = None, epoch: int = 1
    ) -> dict:
        body = {
            "controller_id": 9,
            "controller_epoch": epoch,
            "partition_states": states,
            "live_leaders": [{"id": 1, "host": "h", "port": 1}],
        }
        if full is not None:
            body.update(type=FULL, hosted_topics=full)
        return await self.rm.become_leader_or_follower(validate_request(ApiKey.LEADER_AND_ISR, 0, body))

    def dirs(self) -> list[str]:
        return sorted(p.name for p in (self.cfg.log_dirs[0]).iterdir() if p.is_dir())


def state(topic: str, topic_id: str, leader_epoch: int = 0, partition: int = 0, is_new: bool = False) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "controller_epoch": 1,
        "leader": 1,
        "leader_epoch": leader_epoch,
        "isr": [1],
        "zk_version": leader_epoch,
        "replicas": [1],
        "topic_id": topic_id,
        "is_new": is_new,
    }


def codes(answer: dict) -> dict[tuple[str, int], int]:
    return {(p["topic"], p["partition"]): p["error_code"] for p in answer["partitions"]}


async def test_a_log_created_by_leader_and_isr_records_the_topic_id(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    assert codes(await broker.leader_and_isr([state("t", OLD_ID, is_new=True)])) == {("t", 0): 0}
    assert recorded_id(broker.lm.get_log("t", 0).dir) == OLD_ID


async def test_a_log_of_another_topic_id_answers_inconsistent_topic_id_and_is_not_served(
    tmp_path: Path,
) -> None:
    """The interleaving: t-0 leads with OLD_ID's records; an incremental LeaderAndIsr names NEW_ID
    with a newer leader epoch. Kafka's hasConsistentTopicId: INCONSISTENT_TOPIC_ID, the
    partition no longer led here, the old records untouched (the next FULL request judges it).
    Before: NONE, and the re-created topic was served from the old incarnation's records."""
    broker = Broker(tmp_path)
    await broker.leader_and_isr([state("t", OLD_ID, is_new=True)])
    lg = broker.lm.get_log("t", 0)
    lg.append_as_leader(build_batch([(None, b"old", 0, [])]), 0)
    answer = await broker.leader_and_isr([state("t", NEW_ID, leader_epoch=1)])
    assert codes(answer) == {("t", 0): INCONSISTENT_TOPIC_ID}
    assert not broker.rm.partitions[("t", 0)].is_leader
    assert broker.lm.get_log("t", 0) is lg and lg.log_end_offset == 1 and recorded_id(lg.dir) == OLD_ID
    assert any(s.get("event") == "LeaderAndIsrInconsistentTopicId" for s in broker.state_changes)


async def test_a_log_without_an_id_is_given_the_requests(tmp_path: Path) -> None:
    """A log older than topic ids (no partition.metadata) is told its id, as Kafka's
    LeaderAndIsr "upgrade to using topic IDs" does."""
    broker = Broker(tmp_path)
    await broker.leader_and_isr([state("t", ZERO_UUID, is_new=True)])
    assert recorded_id(broker.lm.get_log("t", 0).dir) is None
    assert codes(await broker.leader_and_isr([state("t", OLD_ID, leader_epoch=1)])) == {("t", 0): 0}
    assert recorded_id(broker.lm.get_log("t", 0).dir) == OLD_ID


async def test_a_full_leader_and_isr_deletes_strays_and_refuses_another_incarnation(tmp_path: Path) -> None:
    """The sequence of the issue, on one broker: it hosts "moved"-0 and "reborn"-0 (OLD_ID) with
    records and restarts; meanwhile "moved"-0 was reassigned off it and "reborn" deleted and
    re-created as NEW_ID with this broker among its replicas. Its start-up's FULL LeaderAndIsr
    names "reborn"-0 (NEW_ID) and "kept"-0: "moved"-0 is deleted (not assigned here); the old
    "reborn"-0 is refused with INCONSISTENT_TOPIC_ID and never served, as in Kafka, but kept (an
    id can differ without a re-creation: issue 33's review); "kept"-0 keeps its records. Before
    topic ids the new "reborn"-0 led from the old incarnation's record."""
    broker = Broker(tmp_path)
    await broker.leader_and_isr(
        [state(t, OLD_ID if t != "kept" else NEW_ID, is_new=True) for t in ("kept", "moved", "reborn")]
    )
    for t in ("kept", "moved", "reborn"):
        broker.lm.get_log(t, 0).append_as_leader(build_batch([(None, b"old " + t.encode(), 0, [])]), 0)
    broker.lm.shutdown()
    broker = Broker(tmp_path)  # restarted: the logs load from disk, no Partition in memory
    answer = await broker.leader_and_isr(
        [state("kept", NEW_ID, leader_epoch=1), state("reborn", NEW_ID, is_new=True)],
        full=[hosted("kept", NEW_ID, 0), hosted("reborn", NEW_ID, 0)],
        epoch=2,
    )
    assert codes(answer) == {("kept", 0): 0, ("reborn", 0): ErrorCode.INCONSISTENT_TOPIC_ID}
    assert broker.lm.get_log("moved", 0) is None
    assert recorded_id(broker.lm.get_log("reborn", 0).dir) == OLD_ID  # kept, not served
    assert ("reborn", 0) not in broker.rm.partitions or broker.rm.partitions[("reborn", 0)].leader_id == -1
    assert broker.lm.get_log("kept", 0).log_end_offset == 1
    deleted = {
        (s["topic"], s["reason"]) for s in broker.state_changes if s.get("event") == "StrayReplicaDeleted"
    }
    assert deleted == {("moved", "not assigned to this broker")}


async def test_an_incremental_leader_and_isr_deletes_nothing(tmp_path: Path) -> None:
    """Only a FULL request says what a broker hosts: an ordinary LeaderAndIsr naming one partition
    never takes the others for strays."""
    broker = Broker(tmp_path)
    await broker.leader_and_isr([state("a", OLD_ID, is_new=True), state("b", OLD_ID, is_new=True)])
    await broker.leader_and_isr([state("a", OLD_ID, leader_epoch=1)], epoch=2)
    assert broker.lm.get_log("b", 0) is not None
