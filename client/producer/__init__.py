"""The asyncio producer, split by role as aiokafka's ``aiokafka/producer/`` package is.

* :mod:`client.producer.config` - :class:`ProducerConfig` (Kafka's ProducerConfig).
* :mod:`client.producer.accumulator` - :class:`RecordAccumulator`, per-partition batches.
* :mod:`client.producer.sender` - :class:`Sender`, the task that sends Produce requests.
* :mod:`client.producer.idempotence` - :class:`IdempotenceManager`, producer ids (KIP-98, KIP-360).
* :mod:`client.producer.producer` - :class:`Producer`, the user-facing class.
"""

from client.config import config_with_overrides
from client.producer.accumulator import ProducerBatch, RecordAccumulator
from client.producer.config import ProducerConfig
from client.producer.idempotence import IdempotenceManager
from client.producer.producer import Producer
from client.producer.sender import Sender

__all__ = [
    "IdempotenceManager",
    "Producer",
    "ProducerBatch",
    "ProducerConfig",
    "RecordAccumulator",
    "Sender",
    "config_with_overrides",
]
