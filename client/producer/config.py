"""The producer's settings (Kafka's ProducerConfig): acks, batching, retries, timeouts, idempotence.

Option names are the Java client's with underscores (``linger_ms`` for linger.ms), as in
aiokafka's ``AIOKafkaProducer``. ``__post_init__`` validates them and normalises ``acks``
("all" is -1); :attr:`ProducerConfig.idempotent` decides enable.idempotence as Kafka 3.x does
(KIP-679: on by default exactly when acks is all and retries > 0). See docs/guarantees.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.config import require_non_negative, require_positive
from client.protocol.records import COMPRESSION_CODECS, build_batch

_ACKS = {0: 0, 1: 1, -1: -1, "0": 0, "1": 1, "-1": -1, "all": -1}


@dataclass
class ProducerConfig:
    acks: int | str = 1  # 0, 1, -1 or "all" (== -1); normalised to an int
    linger_ms: int = 5
    batch_size: int = 16384
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120000
    request_timeout_ms: int = 30000
    max_in_flight_requests_per_connection: int = 5
    compression_type: str = "none"
    partitioner: str = "sticky"  # "sticky" | "round_robin"
    client_id: str = "floodmark-producer"
    buffer_memory: int = 33554432
    max_request_size: int = 1048576
    #: Beyond the brief, with Kafka's meaning: how long send() waits for an unknown topic's
    #: metadata or for buffer space, and how old metadata may get before a refresh.
    max_block_ms: int = 60000
    metadata_max_age_ms: int = 300000
    #: Kafka's enable.idempotence. None (the default): on exactly when acks is all (-1) and
    #: retries > 0, as Kafka 3.x decides it. True with another acks is an error.
    enable_idempotence: bool | None = None

    @property
    def idempotent(self) -> bool:
        if self.enable_idempotence is None:
            return self.acks == -1 and self.retries > 0
        return self.enable_idempotence

    def __post_init__(self) -> None:
        if isinstance(self.acks, str):
            self.acks = self.acks.strip().lower()
        if self.acks not in _ACKS or isinstance(self.acks, bool):
            raise ValueError(f"acks must be 0, 1, -1 or 'all', got {self.acks!r}")
        self.acks = _ACKS[self.acks]
        require_positive(
            self,
            (
                "batch_size",
                "request_timeout_ms",
                "delivery_timeout_ms",
                "max_in_flight_requests_per_connection",
                "buffer_memory",
                "max_request_size",
            ),
        )
        require_non_negative(
            self,
            ("linger_ms", "retries", "retry_backoff_ms", "max_block_ms", "metadata_max_age_ms"),
            allow_float=True,
        )
        if self.compression_type not in COMPRESSION_CODECS:
            raise ValueError(
                f"compression_type must be one of {sorted(COMPRESSION_CODECS)}, got {self.compression_type!r}"
            )
        if self.compression_type != "none":
            try:
                build_batch([(None, b"probe", 0, [])], self.compression_type)
            except Exception as exc:
                raise ValueError(
                    f"compression_type {self.compression_type!r} is not usable here: {exc}"
                ) from None
        if self.partitioner not in ("sticky", "round_robin"):
            raise ValueError(f"partitioner must be 'sticky' or 'round_robin', got {self.partitioner!r}")
        if self.enable_idempotence is not None and not isinstance(self.enable_idempotence, bool):
            raise ValueError(
                f"enable_idempotence must be True, False or None, got {self.enable_idempotence!r}"
            )
        if self.enable_idempotence and self.acks != -1:
            raise ValueError(
                f"enable_idempotence=True needs acks='all' (-1), got acks={self.acks}: "
                "set acks='all' or enable_idempotence=False"
            )
        if self.enable_idempotence and self.retries == 0:
            raise ValueError(
                "enable_idempotence=True needs retries > 0: set retries or enable_idempotence=False"
            )
