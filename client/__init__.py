"""floodmark's client library: producer, consumer, admin, and their synchronous facades
(Kafka's KafkaProducer, KafkaConsumer and Admin; docs/design.md "Client").

Everything a user process links; it imports nothing from the broker, controller, chaos or
verify packages. The wire contract lives in :mod:`client.protocol`.
"""

from client.admin import AdminClient
from client.bootstrap import parse_bootstrap
from client.consumer import Consumer, ConsumerConfig
from client.metadata import Cluster, ClusterMetadata
from client.partitioner import RoundRobinPartitioner, StickyPartitioner, murmur2, partition_for_key
from client.producer import Producer, ProducerConfig
from client.protocol.errors import ErrorCode, KafkaError
from client.sync import SyncAdmin, SyncConsumer, SyncProducer
from client.types import (
    BrokerInfo,
    ClusterDescription,
    ConsumerRecord,
    NewTopic,
    PartitionDescription,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

__all__ = [
    "AdminClient",
    "BrokerInfo",
    "Cluster",
    "ClusterDescription",
    "ClusterMetadata",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "ErrorCode",
    "KafkaError",
    "NewTopic",
    "PartitionDescription",
    "Producer",
    "ProducerConfig",
    "RecordMetadata",
    "RoundRobinPartitioner",
    "StickyPartitioner",
    "SyncAdmin",
    "SyncConsumer",
    "SyncProducer",
    "TopicDescription",
    "TopicPartition",
    "murmur2",
    "parse_bootstrap",
    "partition_for_key",
]
