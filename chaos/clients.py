"""Which clients a chaos run drives (``chaos run --client``; docs/operations.md "Chaos runs and
verification"): ``floodmark``, its own producers and consumers over the brokers' floodmark
listener (:mod:`chaos.workload`, :mod:`chaos.consumers`), or ``kafka``, Kafka's own through
librdkafka (confluent-kafka) over their KAFKA listener (:mod:`chaos.kafka_producers`,
:mod:`chaos.kafka_consumers`). Either way the ledgers are the same, and so is the verification.
The leadership watcher, the fault injector and the drain's end offsets always use floodmark's
listener (``bootstrap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from chaos.consumers import ConsumerGroup, Say
from chaos.workload import Workload, WorkloadSettings, WorkloadStats
from devcluster.cluster import LocalCluster
from ledger.format import LedgerWriter

FLOODMARK, KAFKA = "floodmark", "kafka"
CLIENTS = (FLOODMARK, KAFKA)


class RunningWorkload(Protocol):
    """What the run does with a workload (:class:`chaos.workload.Workload`,
    :class:`chaos.kafka_producers.KafkaWorkload`)."""

    ledger: LedgerWriter

    @property
    def stats(self) -> WorkloadStats: ...

    async def run(self) -> WorkloadStats: ...

    def stop(self) -> None: ...


def kafka_bootstrap_of(client: str, cluster: LocalCluster | None, given: str | None) -> str | None:
    """The KAFKA listener's ``bootstrap.servers`` a ``kafka`` run needs (the local cluster's, or
    the one given for the docker backend); None for a ``floodmark`` run."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}: {' or '.join(CLIENTS)}")
    if client == FLOODMARK:
        return None
    if cluster is not None:
        return cluster.kafka_bootstrap_servers  # ClusterError for a cluster without KAFKA listeners
    if not given:
        raise ValueError(
            "--client kafka with the docker backend needs --kafka-bootstrap-server (docs/docker.md)"
        )
    return given


@dataclass(frozen=True)
class Clients:
    """The run's choice of clients and the two bootstraps (``kafka_bootstrap`` None for floodmark)."""

    client: str
    bootstrap: str
    kafka_bootstrap: str | None = None

    @classmethod
    def of(cls, client: str, bootstrap: str, cluster: LocalCluster | None, given: str | None) -> Clients:
        """``client``'s clients for a run on the local ``cluster`` (or the docker backend's,
        its KAFKA listener ``given``)."""
        return cls(client, bootstrap, kafka_bootstrap_of(client, cluster, given))

    def workload(self, settings: WorkloadSettings, ledger: LedgerWriter) -> RunningWorkload:
        if self.kafka_bootstrap is None:
            return Workload(self.bootstrap, settings, ledger)
        from chaos.kafka_producers import KafkaWorkload  # librdkafka loads only for kafka runs

        return KafkaWorkload(self.kafka_bootstrap, settings, ledger)

    def group(
        self, report_dir: Path, topic: str, members: int, run_id: str, say: Say, duration_s: float
    ) -> ConsumerGroup:
        if self.kafka_bootstrap is None:
            return ConsumerGroup.open(report_dir, self.bootstrap, topic, members, run_id, say)
        from chaos.kafka_consumers import KafkaConsumerGroup

        return KafkaConsumerGroup.open_kafka(
            report_dir, self.bootstrap, self.kafka_bootstrap, topic, members, run_id, say, duration_s
        )
