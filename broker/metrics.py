"""The broker's Prometheus ``/metrics`` endpoint (docs/operations.md "Metrics"), with Kafka's
headline metrics.

Names follow what the Prometheus JMX exporter makes of Kafka's MBeans, so dashboards and alerts
written for Kafka read them: ``kafka_controller_kafkacontroller_activecontrollercount``,
``kafka_server_replicamanager_underreplicatedpartitions`` and so on. Gauges are computed when
scraped, from the objects that own the state (the replica manager's partitions and logs, the
controller), so nothing on the produce or fetch path updates them; request counts, latencies and
bytes come from the network layer through the ``NetworkMetrics`` sink it already calls.

Each broker has its own registry (no global state): two brokers in one process (tests) do not mix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from broker.log.disk_space import LogDirSpaceView
from broker.log.file_cache import SegmentFileStats
from broker.loop_stall import STALL_BUCKETS_S, StallStats
from client.protocol.api import ApiKey
from zk.data import FileBudget

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True)
class PartitionView:
    """What the scrape needs of one hosted partition."""

    is_leader: bool
    replicas: int
    isr: int
    min_insync_replicas: int
    reassigning: bool = False


@dataclass(frozen=True)
class BrokerState:
    """A snapshot taken at scrape time by the server (it knows every subsystem)."""

    active_controller: bool
    offline_partitions: int
    partitions: list[PartitionView]
    isr_shrinks: int
    isr_expands: int
    offline_replicas: int = 0  # KIP-112: partitions whose log dir is offline
    offline_log_dirs: int = 0
    #: EMFILE, ENFILE, ENOMEM, ENOBUFS met by the logs, by errno name (never a log dir failure)
    resource_errors: dict[str, int] = field(default_factory=dict)
    file_budget: FileBudget | None = None
    open_files: int | None = None
    #: the log manager's segment file cache (docs/design.md "Open files at scale (issue 25)")
    segment_files: SegmentFileStats | None = None
    preferred_replica_imbalance: int = 0  # reported by the active controller
    #: KIP-73: bytes/s of throttled replication, sent as leader and fetched as follower
    leader_replication_byte_rate: float = 0.0
    follower_replication_byte_rate: float = 0.0
    #: each log dir's free space and floor (docs/design.md "Disk space as a budget (issue 25)")
    log_dir_space: list[LogDirSpaceView] = field(default_factory=list)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], BrokerState]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator:
        state = self.snapshot()
        yield from self._replication(state)
        yield from self._logs(state)

    def _replication(self, state: BrokerState) -> Iterator:
        """The controller's and the replica manager's gauges."""
        led = [p for p in state.partitions if p.is_leader]
        yield _gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that is the active controller",
            int(state.active_controller),
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader (reported by the controller)",
            state.offline_partitions,
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
            "Partitions not led by their preferred (first) replica (reported by the controller)",
            state.preferred_replica_imbalance,
        )
        yield _gauge(
            "kafka_server_leaderreplication_byte_rate",
            "Bytes/s this broker sent to followers of throttled partitions (KIP-73)",
            state.leader_replication_byte_rate,
        )
        yield _gauge(
            "kafka_server_followerreplication_byte_rate",
            "Bytes/s this broker fetched for its throttled partitions (KIP-73)",
            state.follower_replication_byte_rate,
        )
        yield _gauge(
            "kafka_server_replicamanager_partitioncount", "Partitions hosted here", len(state.partitions)
        )
        yield _gauge("kafka_server_replicamanager_leadercount", "Partitions led here", len(led))
        yield _gauge(
            "kafka_server_replicamanager_reassigningpartitions",
            "Partitions led here that a reassignment is moving (KIP-352)",
            sum(1 for p in led if p.reassigning),
        )
        yield _gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica set",
            sum(1 for p in led if p.isr < p.replicas),
        )
        yield _gauge(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions led here whose ISR is below min.insync.replicas",
            sum(1 for p in led if p.isr < p.min_insync_replicas),
        )
        yield _gauge(
            "kafka_server_replicamanager_offlinereplicacount",
            "Replicas here whose log dir is offline (KIP-112)",
            state.offline_replicas,
        )
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs of this broker that an I/O error took offline (KIP-112)",
            state.offline_log_dirs,
        )

    def _logs(self, state: BrokerState) -> Iterator:
        """Log dirs, resources and ISR change counters."""
        errors = CounterMetricFamily(
            "kafka_log_logdirfailurechannel_resourceerrors",
            "I/O calls of the logs that failed for lack of a file descriptor or memory, by errno "
            "(the operation failed and is retried; the log dir stays online)",
            labels=["error"],
        )
        for name, count in sorted(state.resource_errors.items()):
            errors.add_metric([name], count)
        yield errors
        yield from self._files(state)
        yield from self._disk_space(state.log_dir_space)
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks written by this broker",
            value=state.isr_shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expands written by this broker",
            value=state.isr_expands,
        )

    def _files(self, state: BrokerState) -> Iterator:
        """The file budget and what holds descriptors now (docs/design.md "Open files at scale")."""
        budget = state.file_budget
        if budget is not None:
            yield _gauge(
                "kafka_server_filebudget_openfileslimit",
                "The open-file limit (soft RLIMIT_NOFILE) the broker runs under",
                budget.open_files_limit,
            )
            yield _gauge(
                "kafka_server_filebudget_reserve",
                "Descriptors kept for ZooKeeper, the controller channel, connections and checkpoints",
                budget.reserve,
            )
            yield _gauge(
                "kafka_server_filebudget_maxreplicas",
                "Replicas this broker may hold (max.broker.partitions, or the files' bound; "
                "CreateTopics, CreatePartitions and reassignments past it are refused)",
                budget.max_replicas,
            )
        if state.open_files is not None:
            yield _gauge("kafka_server_filebudget_openfiles", "File descriptors open now", state.open_files)
        cache = state.segment_files
        if cache is not None:
            yield _gauge(
                "kafka_log_segmentfilecache_max",
                "Most segment .log files open at once (log.segment.open.files.max)",
                cache.max_open,
            )
            yield _gauge("kafka_log_segmentfilecache_openfiles", "Segment .log files open now", cache.open)
            yield _gauge(
                "kafka_log_segmentfilecache_pinnedfiles",
                "Segment .log files in use by a call now",
                cache.pinned,
            )
            yield CounterMetricFamily(
                "kafka_log_segmentfilecache_opens", "Segment .log files opened", value=cache.opens
            )
            yield CounterMetricFamily(
                "kafka_log_segmentfilecache_evictions",
                "Idle segment .log files closed as least recently used",
                value=cache.evictions,
            )
            yield CounterMetricFamily(
                "kafka_log_segmentfilecache_exhaustionevictions",
                "Idle segment .log files closed because an open met EMFILE or ENFILE",
                value=cache.exhaustion_evictions,
            )

    @staticmethod
    def _disk_space(dirs: list[LogDirSpaceView]) -> Iterator:
        """Each log dir's free space against its floor, labelled as Kafka labels its per-dir
        LogDirectoryOffline gauge (``logDirectory``)."""
        label = ["logDirectory"]
        families = {
            "total": GaugeMetricFamily(
                "kafka_log_logmanager_logdirectorytotalbytes",
                "Size of the filesystem holding the log dir (at its last measurement)",
                labels=label,
            ),
            "usable": GaugeMetricFamily(
                "kafka_log_logmanager_logdirectoryusablebytes",
                "Bytes of that filesystem still usable (statvfs f_bavail, at its last measurement)",
                labels=label,
            ),
            "floor": GaugeMetricFamily(
                "kafka_log_logmanager_logdirectoryminfreebytes",
                "The log dir's free-space floor in force (log.dir.min.free.bytes; 0: none)",
                labels=label,
            ),
            "below": GaugeMetricFamily(
                "kafka_log_logmanager_logdirectorybelowminfree",
                "1 while the log dir is below its floor: appends to it refused, fetches for it paused",
                labels=label,
            ),
            "refused": CounterMetricFamily(
                "kafka_log_logmanager_logdirectoryrefusedappends",
                "Appends refused because the log dir was below its free-space floor",
                labels=label,
            ),
        }
        for d in dirs:
            name = [str(d.log_dir)]
            families["total"].add_metric(name, d.total_bytes)
            families["usable"].add_metric(name, d.usable_bytes)
            families["floor"].add_metric(name, d.floor)
            families["below"].add_metric(name, int(d.below))
            families["refused"].add_metric(name, d.refused_appends)
        yield from families.values()
        yield _gauge(
            "kafka_log_logmanager_belowminfreelogdirectorycount",
            "Log dirs of this broker below their free-space floor (issue 25)",
            sum(1 for d in dirs if d.below),
        )


class _LoopStallCollector(Collector):
    """The event-loop stall monitor's figures (broker/loop_stall.py; issue 25)."""

    def __init__(self, stats: Callable[[], StallStats]) -> None:
        self.stats = stats

    def collect(self) -> Iterator:
        s = self.stats()
        yield _gauge(
            "floodmark_event_loop_stall_max_seconds",
            "The longest the broker's event loop was held since start (a sleep woke that late)",
            s.max_s,
        )
        buckets = [(f"{b:g}", n) for b, n in zip(STALL_BUCKETS_S, s.buckets, strict=True)]
        yield HistogramMetricFamily(
            "floodmark_event_loop_stall_seconds",
            "How late each of the stall monitor's sleeps woke up",
            buckets=[*buckets, ("+Inf", s.count)],
            sum_value=s.sum_s,
        )


class BrokerMetrics:
    """The registry, the network sink, and the HTTP endpoint."""

    def __init__(
        self,
        broker_id: int,
        snapshot: Callable[[], BrokerState],
        loop_stall: Callable[[], StallStats] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by API",
            ["request"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kafka_network_requestmetrics_totaltimems_seconds",
            "Request time from arrival to response, by API",
            ["request"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin", "Request bytes received", registry=self.registry
        )
        self.bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout", "Response bytes sent", registry=self.registry
        )
        self.errors = Counter(
            "kafka_network_errors", "Network-level errors by kind", ["kind"], registry=self.registry
        )
        # Kafka's socket-server-metrics connection-creation/close meters per listener (rates are
        # Prometheus' rate() of these totals), and the connections refused at a limit.
        self.connections = Counter(
            "kafka_server_socket_server_metrics_connection",
            "Connections created, closed, or refused at max.connections / max.connections.per.ip",
            ["listener", "event"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(snapshot))
        if loop_stall is not None:
            self.registry.register(_LoopStallCollector(loop_stall))
        self._server = None
        self.port: int | None = None

    # -- NetworkMetrics (broker/network/metrics.py) -----------------------------------------------
    def on_request(self, api_key: ApiKey, latency_ms: float) -> None:
        name = api_key.name if isinstance(api_key, ApiKey) else str(api_key)
        self.requests.labels(name).inc()
        self.latency.labels(name).observe(latency_ms / 1000)

    def on_bytes(self, received: int, sent: int) -> None:
        if received:
            self.bytes_in.inc(received)
        if sent:
            self.bytes_out.inc(sent)

    def on_error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def on_connection(self, listener: str, event: str) -> None:
        self.connections.labels(listener, event).inc()

    # -- the endpoint -------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0 picks a free port) in a daemon thread; returns the port."""
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_port
        log.info("[KafkaServer id=%d] metrics on http://%s:%d/metrics", self.broker_id, host, self.port)
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
