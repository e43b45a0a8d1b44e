"""Response bodies the data-path handlers of :mod:`broker.apis` build (Kafka's ProduceResponse,
FetchResponse and the per-partition answers of ListOffsets and OffsetsForLeaderEpoch;
docs/design.md "Wire protocol")."""

from __future__ import annotations

from collections.abc import Callable

from broker.replica.delayed import ProducePartitionStatus
from broker.replica.replica_manager import ReadResult
from client.protocol.errors import ErrorCode


def fetch_response(
    results: dict[tuple[str, int], ReadResult], session_id: int = 0, error_code: int = ErrorCode.NONE
) -> dict:
    """The Fetch response body for the replica manager's read results (KIP-227: of a fetch
    session, only its partitions with something to say)."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), r in results.items():
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "error_code": r.error_code,
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.high_watermark,
                "log_start_offset": r.log_start_offset,
                "records": r.records,
            }
        )
    return {
        "error_code": error_code,
        "throttle_time_ms": 0,
        "session_id": session_id,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }


def per_partition(body: dict, answer: Callable[[tuple[str, int], dict], dict]) -> dict:
    """A ``{"topics": [...]}`` response with ``answer(tp, request partition)`` for every partition
    the request names (ListOffsets, OffsetsForLeaderEpoch)."""
    return {
        "topics": [
            {
                "topic": t["topic"],
                "partitions": [
                    {"partition": p["partition"], **answer((t["topic"], p["partition"]), p)}
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ]
    }


def produce_response(statuses: dict[tuple[str, int], ProducePartitionStatus]) -> dict:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), s in statuses.items():
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "error_code": s.error_code,
                "base_offset": s.base_offset,
                "log_append_time": -1,
                "log_start_offset": s.log_start_offset,
                "error_message": s.error_message,
            }
        )
    return {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()], "throttle_time_ms": 0}
