"""Every znode path floodmark uses, and nothing else spells one (Kafka's ZkData; the layout is
docs/architecture.md "ZooKeeper layout"). Paths only: the values they hold are in :mod:`zk.data`, the
reads and writes in :mod:`zk.client`.
"""

from __future__ import annotations

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
#: The entity name of the cluster-wide broker defaults (Kafka's ConfigEntityName.Default).
DEFAULT_BROKER_ENTITY = "<default>"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
#: KIP-112: a broker whose log dir failed writes log_dir_event_<seq> here (Kafka's LogDirEventNotificationZNode).
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
#: Kafka's ProducerIdBlockZNode: the last block of producer ids handed to a broker
#: (KIP-98; docs/design.md "Idempotent producer").
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

#: The persistent paths Kafka creates at start-up (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
)

#: The cluster id (Kafka's ClusterIdZNode), written once by the first broker.
CLUSTER_ID_PATH = "/cluster/id"


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def config_topic_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def config_broker_path(entity: str) -> str:
    """/config/brokers/<id> or /config/brokers/<default>: dynamic broker configs (KIP-226)."""
    return f"{CONFIG_BROKERS_PATH}/{entity}"


def config_change_path(name: str) -> str:
    """One config change notification, ``name`` being ``config_change_<seq>`` (Kafka's
    ConfigEntityChangeNotificationSequenceZNode); :data:`CONFIG_CHANGE_PREFIX` alone is the
    prefix a sequential create completes."""
    return f"{CONFIG_CHANGES_PATH}/{name}"
