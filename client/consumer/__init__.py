"""The asyncio consumer, split by role as aiokafka's ``aiokafka/consumer/`` package is.

* :mod:`client.consumer.config` - :class:`ConsumerConfig` (Kafka's ConsumerConfig).
* :mod:`client.consumer.subscription_state` - :class:`SubscriptionState`, assignment and positions.
* :mod:`client.consumer.fetcher` - :class:`Fetcher`, Fetch requests and record decoding.
* :mod:`client.consumer.offsets` - :class:`OffsetFetcher`, ListOffsets and offset resets.
* :mod:`client.consumer.consumer` - :class:`Consumer`, the user-facing class.
"""

from client.consumer.config import ConsumerConfig
from client.consumer.consumer import Consumer
from client.consumer.fetcher import Fetcher, whole_batches_end
from client.consumer.offsets import OffsetFetcher
from client.consumer.subscription_state import SubscriptionState, TopicPartitionState

__all__ = [
    "Consumer",
    "ConsumerConfig",
    "Fetcher",
    "OffsetFetcher",
    "SubscriptionState",
    "TopicPartitionState",
    "whole_batches_end",
]
