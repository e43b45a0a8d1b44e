"""Resending the partitions of a LeaderAndIsr that a broker could not apply (docs/design.md
"Controller and shutdown"; issue 9 finding 2).

A broker answers LeaderAndIsr per partition, as Kafka's LeaderAndIsrResponse does. Some errors
are final answers the controller acts on elsewhere: NONE, FENCED_LEADER_EPOCH (the broker
already has a newer epoch), STALE_CONTROLLER_EPOCH (we are deposed), KAFKA_STORAGE_ERROR (KIP-112,
:mod:`controller.log_dir_failure`) and UNKNOWN_TOPIC_OR_PARTITION (the broker is not a replica).
Anything else (a ZooKeeper read that failed while the broker created the log, an unexpected
exception) means the partition was not applied and nothing else would ever tell the broker
again: the controller resends the partition's *current* leadership to that broker after a
backoff, doubling from 0.5 s to 10 s, at most :data:`MAX_ATTEMPTS` times. A whole-request error
other than STALE_CONTROLLER_EPOCH counts as every partition of the request failing.

This module decides what to resend and when; the controller schedules the resend as an event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from client.protocol.errors import ErrorCode, error_name
from client.types import TopicPartition

log = logging.getLogger(__name__)

FINAL = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.STALE_CONTROLLER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0
MAX_ATTEMPTS = 10


@dataclass(frozen=True)
class Resend:
    broker_id: int
    partitions: list[TopicPartition]
    delay_s: float


class LeaderAndIsrRetries:
    def __init__(self) -> None:
        self._attempts: dict[tuple[int, TopicPartition], int] = {}

    def reset(self) -> None:
        self._attempts.clear()

    def on_response(self, broker_id: int, response: dict, request: dict) -> Resend | None:
        """What to resend after this answer (None: nothing)."""
        asked = [TopicPartition(p["topic"], p["partition"]) for p in request.get("partition_states", [])]
        whole = response.get("error_code", ErrorCode.NONE)
        if whole == ErrorCode.STALE_CONTROLLER_EPOCH:
            return None
        if whole != ErrorCode.NONE:
            failed = {tp: whole for tp in asked}
        else:
            codes = {
                TopicPartition(p["topic"], p["partition"]): p["error_code"]
                for p in response.get("partitions", [])
            }
            failed = {tp: code for tp, code in codes.items() if code not in FINAL}
            for tp in codes.keys() - failed.keys():
                self._attempts.pop((broker_id, tp), None)
        resend: list[TopicPartition] = []
        attempts = 0
        for tp, code in sorted(failed.items()):
            attempt = self._attempts.get((broker_id, tp), 0) + 1
            if attempt > MAX_ATTEMPTS:
                log.error(
                    "broker %s still cannot apply LeaderAndIsr for %s (%s) after %d resends; giving up "
                    "until the next leadership change",
                    broker_id,
                    tp,
                    error_name(code),
                    MAX_ATTEMPTS,
                )
                self._attempts.pop((broker_id, tp), None)
                continue
            self._attempts[(broker_id, tp)] = attempt
            attempts = max(attempts, attempt)
            resend.append(tp)
        if not resend:
            return None
        delay = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** (attempts - 1))
        log.warning(
            "broker %s could not apply LeaderAndIsr for %d partition(s) (%s); resending in %.1fs",
            broker_id,
            len(resend),
            ", ".join(f"{tp}: {error_name(failed[tp])}" for tp in resend[:5]),
            delay,
        )
        return Resend(broker_id, resend, delay)
