"""The consumer's settings (Kafka's ConsumerConfig): fetch sizes and waits, offset reset, timeouts.

Option names are the Java client's with underscores (``fetch_max_wait_ms`` for
fetch.max.wait.ms), as in aiokafka's ``AIOKafkaConsumer``; ``__post_init__`` validates them.
See docs/guarantees.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.config import require_non_negative, require_positive


@dataclass
class ConsumerConfig:
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1048576
    fetch_max_bytes: int = 52428800
    max_poll_records: int = 500
    auto_offset_reset: str = "latest"  # "earliest" | "latest" | "none"
    client_id: str = "floodmark-consumer"
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100
    check_crcs: bool = True
    #: Beyond the brief, with Kafka's meaning.
    metadata_max_age_ms: int = 300000
    #: Consumer groups (seed 004): None reads assigned partitions only, with no commits.
    group_id: str | None = None
    group_instance_id: str | None = None  # KIP-345
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000  # also the rebalance timeout the member asks for
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    partition_assignment_strategy: tuple[str, ...] = ("range",)
    exclude_internal_topics: bool = True

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {self.auto_offset_reset!r}"
            )
        require_positive(
            self,
            (
                "max_partition_fetch_bytes",
                "fetch_max_bytes",
                "max_poll_records",
                "request_timeout_ms",
                "session_timeout_ms",
                "heartbeat_interval_ms",
                "max_poll_interval_ms",
                "auto_commit_interval_ms",
            ),
        )
        if self.group_id is not None and (not isinstance(self.group_id, str) or not self.group_id):
            raise ValueError(f"group_id must be a non-empty string, got {self.group_id!r}")
        if isinstance(self.partition_assignment_strategy, str):
            self.partition_assignment_strategy = tuple(
                s.strip() for s in self.partition_assignment_strategy.split(",") if s.strip()
            )
        if not self.partition_assignment_strategy:
            raise ValueError("partition_assignment_strategy must name at least one assignor")
        require_non_negative(
            self, ("fetch_min_bytes", "fetch_max_wait_ms", "retry_backoff_ms", "metadata_max_age_ms")
        )
