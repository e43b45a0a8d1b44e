"""The producer's warning on a retried produce (Kafka's ``Sender.canRetry`` path logs "Got error
produce response ... retrying (N attempts left). Error: CODE" at WARN; docs/operations.md
"Producing").

A retry is not a failure, but a producer retrying for its whole ``delivery.timeout.ms`` (120 s by
default: acks=all with too few replicas in sync answers NOT_ENOUGH_REPLICAS on every attempt)
must not look hung. So each retried error is warned, in Kafka's words, at most once per
``interval_ms`` per partition and error code, with the number of retries since the last warning;
the clock is the caller's (sans-IO).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from client.protocol.errors import error_name

#: Kafka logs every retry; one line per partition and error per interval keeps a long outage readable.
RETRY_WARNING_INTERVAL_MS = 5000.0


@dataclass
class RetryWarnings:
    interval_ms: float = RETRY_WARNING_INTERVAL_MS
    #: (topic, partition, code) -> (time of the last warning, retries since it)
    _last: dict[tuple[str, int, int], tuple[float, int]] = field(default_factory=dict)

    def on_retry(
        self, now_ms: float, topic: str, partition: int, code: int, attempts_left: int, remaining_ms: float
    ) -> str | None:
        """The warning to log for this retry, or None while the last one is recent."""
        key = (topic, partition, code)
        last, since = self._last.get(key, (None, 0))
        if last is not None and now_ms - last < self.interval_ms:
            self._last[key] = (last, since + 1)
            return None
        self._last[key] = (now_ms, 0)
        more = f" ({since} more retries of this error since the last warning)" if since else ""
        return (
            f"Got error produce response on topic-partition {topic}-{partition}, retrying "
            f"({attempts_left} attempts left, {max(0, remaining_ms) / 1000:.0f} s of delivery.timeout.ms left). "
            f"Error: {error_name(code)}{more}"
        )

    def clear(self, topic: str, partition: int) -> None:
        """A batch of the partition completed: the next error there is warned at once."""
        if not self._last:  # the common case, on every completed batch
            return
        for key in [k for k in self._last if k[:2] == (topic, partition)]:
            del self._last[key]
