"""Broker and topic configuration with Kafka's property names and defaults (Kafka's
KafkaConfig and LogConfig; docs/operations.md "Broker configuration" and "Topic-level overrides").

One table, :data:`BROKER_PROPERTIES`, says each property's type, default and valid range;
parsing a properties file or a ``--override key=value`` goes through it, so an unknown key
or an out-of-range value is refused with a message that names the key. Topic-level
overrides (``segment.bytes``, ``min.insync.replicas``, ...) map onto the broker's ``log.*``
defaults exactly as in Kafka (``LogConfig``'s ``ServerDefaultHeaderName``). Each part's
settings object is built here from the properties (``log_config``, ``network_config``,
``controller_config``, ``controlled_shutdown_settings``), as Kafka's parts read KafkaConfig.
"""

from __future__ import annotations

import resource
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from broker.config_error import ConfigError
from broker.config_prop import INT_MAX, LONG_MAX, Prop, props_table
from broker.controlled_shutdown import ControlledShutdownSettings
from broker.coordinator.coordinator_config import GROUP_COORDINATOR_PROPERTIES, GroupConfig
from broker.listener_config import (
    check_unique,
    connection_limits,
    parse_listeners,
    parse_protocol_map,
    parse_wire_protocol_map,
)
from broker.log import LogConfig
from broker.log.cleaner_config import CLEANUP_POLICY_PROPERTY, LOG_CLEANER_PROPERTIES, CleanerConfig
from broker.network import Listener, NetworkConfig
from broker.replica.replication_quota import parse_throttled_replicas
from controller.controller import ControllerConfig
from zk.data import PLAINTEXT, SECURITY_PROTOCOLS, EndPoint

#: Kafka's default ``listener.security.protocol.map``: each security protocol as a listener name.
#: floodmark adds ``KAFKA:PLAINTEXT``: the listener Kafka's clients use (docs/design.md "Two wire
#: protocols") needs no map entry of its own.
DEFAULT_PROTOCOL_MAP = ",".join([*(f"{p}:{p}" for p in SECURITY_PROTOCOLS), "KAFKA:PLAINTEXT"])


BROKER_PROPERTIES: dict[str, Prop] = props_table(
    Prop("broker.id", "int", -1, low=-1, doc="this broker's id; must be set and unique"),
    Prop("listeners", "str", "PLAINTEXT://127.0.0.1:9092"),
    Prop("advertised.listeners", "str", ""),
    Prop("listener.security.protocol.map", "str", DEFAULT_PROTOCOL_MAP),
    Prop("inter.broker.listener.name", "str", ""),
    Prop(
        "listener.wire.protocol.map",
        "str",
        "KAFKA:KAFKA",
        doc="NAME:WIRE pairs: the wire protocol each listener speaks, FLOODMARK (msgpack; every listener "
        "not named) or KAFKA (Kafka's binary protocol, for Kafka's own clients)",
    ),
    Prop("log.dirs", "list", ["/tmp/floodmark-logs"]),
    Prop("zookeeper.connect", "str", ""),
    Prop("zookeeper.session.timeout.ms", "int", 18000, low=1000),
    Prop("zookeeper.connection.timeout.ms", "int", 18000, low=1000),
    Prop("num.network.threads", "int", 3, low=1),
    Prop("num.io.threads", "int", 8, low=1),
    Prop("num.recovery.threads.per.data.dir", "int", 1, low=1),
    Prop("queued.max.requests", "int", 500, low=1),
    Prop("socket.request.max.bytes", "int", 104857600, low=1),
    Prop(
        "max.connections",
        "int",
        -1,
        low=-1,
        doc="Most connections the broker keeps at once (the inter-broker listener's do not count when "
        "there are several listeners); one more is closed at once and counted. -1: derived from the "
        "open-file limit (the soft RLIMIT_NOFILE at start): max(16, limit // 8).",
    ),
    Prop(
        "max.connections.per.ip",
        "int",
        -1,
        low=-1,
        doc="Most connections from one address; one more is closed at once and counted. "
        "-1: half of max.connections.",
    ),
    Prop(
        "max.connections.per.ip.overrides",
        "str",
        "",
        doc="Per-address exceptions to max.connections.per.ip: `host:count,host:count` "
        "(a host name is resolved at start).",
    ),
    Prop("connections.max.idle.ms", "int", 600000, low=1),
    Prop(
        "queued.max.request.bytes",
        "int",
        200 * 1024 * 1024,
        low=-1,
        doc="Bytes of requests being received, queued or handled at once (the memory pool): a "
        "frame's bytes are granted when its length is read and released when it is answered; a "
        "connection waiting for them stops reading. Frames over 1 MiB share half of it. -1: unbounded "
        "(Kafka's default).",
    ),
    Prop("default.replication.factor", "int", 1, low=1),
    Prop("num.partitions", "int", 1, low=1),
    Prop("min.insync.replicas", "int", 1, low=1),
    Prop("unclean.leader.election.enable", "bool", False),
    Prop("replica.lag.time.max.ms", "int", 30000, low=1),
    Prop("replica.fetch.wait.max.ms", "int", 500, low=0),
    Prop("replica.fetch.min.bytes", "int", 1, low=1),
    Prop("replica.fetch.max.bytes", "int", 1048576, low=0),
    Prop("replica.fetch.backoff.ms", "int", 1000, low=0),
    Prop("max.incremental.fetch.session.cache.slots", "int", 1000, low=0),
    Prop("replica.socket.timeout.ms", "int", 30000, low=1),
    Prop("replica.high.watermark.checkpoint.interval.ms", "int", 5000, low=1),
    Prop("replica.truncation.policy", "str", "leader-epoch", choices=("leader-epoch", "high-watermark")),
    Prop(
        "leader.replication.throttled.rate",
        "int",
        LONG_MAX,
        low=0,
        doc="Bytes/s this broker sends to followers of the partitions its topics' "
        "`leader.replication.throttled.replicas` name (only followers out of the ISR are held back). "
        'Dynamic: `floodmark configs --entity-type brokers --alter` (docs/design.md "Replication throttling").',
    ),
    Prop(
        "follower.replication.throttled.rate",
        "int",
        LONG_MAX,
        low=0,
        doc="Bytes/s this broker fetches for the partitions its topics' "
        "`follower.replication.throttled.replicas` name, while they are not in sync. Dynamic, as above.",
    ),
    Prop(
        "replication.quota.window.num",
        "int",
        11,
        low=1,
        doc="Samples the replication byte rates are measured over.",
    ),
    Prop("replication.quota.window.size.seconds", "int", 1, low=1, doc="The length of one such sample."),
    Prop("auto.leader.rebalance.enable", "bool", True),
    Prop("leader.imbalance.check.interval.seconds", "int", 300, low=1),
    Prop("leader.imbalance.per.broker.percentage", "int", 10, low=0, high=100),
    Prop("delete.topic.enable", "bool", True),
    Prop("controlled.shutdown.enable", "bool", True),
    Prop("controlled.shutdown.max.retries", "int", 3, low=0),
    Prop("controlled.shutdown.retry.backoff.ms", "int", 5000, low=0),
    Prop("controller.socket.timeout.ms", "int", 30000, low=1),
    Prop("controller.request.max.partitions", "int", 1000, low=1),  # docs/design.md "The controller at scale"
    Prop("event.loop.stall.monitor.interval.ms", "int", 100, low=0),  # broker/loop_stall.py
    Prop(
        "auto.create.topics.enable",
        "bool",
        True,
        doc="A producer's Metadata request for a missing topic creates it with num.partitions and "
        "default.replication.factor (Kafka's default: true).",
    ),
    Prop("request.timeout.ms", "int", 30000, low=1),
    Prop("log.segment.bytes", "int", 1073741824, low=14),
    Prop("log.roll.ms", "int", 604800000, low=1),
    Prop("log.roll.hours", "int", 168, low=1),
    Prop("log.retention.ms", "int", 604800000, low=-1),
    Prop("log.retention.hours", "int", 168, low=-1),
    Prop("log.retention.bytes", "int", -1, low=-1),
    Prop("log.retention.check.interval.ms", "int", 300000, low=1),
    Prop("log.flush.interval.messages", "int", LONG_MAX, low=1),
    Prop("log.flush.interval.ms", "int", LONG_MAX, low=0),
    Prop("log.flush.scheduler.interval.ms", "int", LONG_MAX, low=1),
    Prop("log.flush.offset.checkpoint.interval.ms", "int", 60000, low=0),
    Prop("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, low=0),
    Prop("log.index.interval.bytes", "int", 4096, low=0),
    Prop(
        "log.segment.delete.delay.ms",
        "int",
        60000,
        low=0,
        doc="How long a deleted partition's directory waits, renamed *-delete, before it is removed "
        "(the default of the topic config file.delete.delay.ms).",
    ),
    Prop("log.index.size.max.bytes", "int", 10485760, low=4),
    Prop("log.segment.open.files.max", "int", -1, low=-1),  # docs/design.md "Open files at scale"
    Prop("max.broker.partitions", "int", INT_MAX, low=1),  # KIP-578
    Prop("log.dir.min.free.bytes", "int", -1, low=-1),  # docs/design.md "Disk space as a budget"
    Prop("message.max.bytes", "int", 1048588, low=0),
    CLEANUP_POLICY_PROPERTY,
    Prop(
        "producer.id.expiration.ms",
        "int",
        86400000,
        low=1,
        high=INT_MAX,
        doc="How long a partition keeps an idle producer id's state (its epoch and last 5 batches, "
        "for duplicate detection): a producer whose last batch's max timestamp is this much older "
        "than the broker's clock is forgotten at the next check, in memory and in the next producer "
        "snapshot. A retry arriving after that is no longer recognised as a duplicate.",
    ),
    Prop(
        "producer.id.expiration.check.interval.ms",
        "int",
        600000,
        low=1,
        high=INT_MAX,
        doc="How often every log is checked for producer ids idle longer than `producer.id.expiration.ms`.",
    ),
    Prop(
        "metrics.port",
        "int",
        -1,
        low=-1,
        high=65535,
        doc="Prometheus /metrics port; -1 disables, 0 picks one",
    ),
    Prop("state.change.log.file", "str", "", doc="default: <first log dir>/../state-change.log"),
    *GROUP_COORDINATOR_PROPERTIES,
    *LOG_CLEANER_PROPERTIES,
)

#: Topic-level config name -> the broker property that supplies its default (Kafka's LogConfig).
TOPIC_TO_BROKER = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": "log.cleanup.policy",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
}


#: Topic-level configs with no broker default (Kafka's LogConfig: the replication throttles).
TOPIC_ONLY_PROPERTIES = {
    "leader.replication.throttled.replicas": Prop(
        "leader.replication.throttled.replicas",
        "str",
        "",
        doc="Replicas whose leader-side replication is throttled: `partition:broker,...` or `*`.",
    ),
    "follower.replication.throttled.replicas": Prop(
        "follower.replication.throttled.replicas",
        "str",
        "",
        doc="Replicas whose follower-side replication is throttled: `partition:broker,...` or `*`.",
    ),
}


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"line {number}: expected key=value, got {stripped!r}")
        out[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return out


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


class BrokerConfig:
    """Validated broker properties. Access as ``cfg["num.io.threads"]`` or the typed helpers."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values: dict[str, Any] = {}
        #: The keys set in server.properties or by ``--override`` (none derived from another):
        #: what DescribeConfigs reports as STATIC_BROKER_CONFIG (broker/config_admin.py).
        self.given: frozenset[str] = frozenset(values)
        for key, raw in values.items():
            prop = BROKER_PROPERTIES.get(key)
            if prop is None:
                raise ConfigError(f"Unknown broker configuration {key!r}")
            self._values[key] = prop.parse(raw) if isinstance(raw, str) else _check_typed(prop, raw)
        if self["broker.id"] < 0:
            raise ConfigError("broker.id must be set to a non-negative integer")
        if not self["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect must be set (host:port[,host:port][/chroot])")
        self._parse_listeners()
        if "log.retention.ms" not in self._values and "log.retention.hours" in self._values:
            hours = self["log.retention.hours"]
            self._values["log.retention.ms"] = -1 if hours < 0 else hours * 3600_000
        if "log.roll.ms" not in self._values and "log.roll.hours" in self._values:
            self._values["log.roll.ms"] = self["log.roll.hours"] * 3600_000

    def _parse_listeners(self) -> None:
        """KIP-103's keys, checked as Kafka's KafkaConfig checks them (docs/operations.md
        "Listeners"): ``listeners`` (where to bind), ``advertised.listeners`` (what goes into
        /brokers/ids/<id>), ``listener.security.protocol.map`` and ``inter.broker.listener.name``."""
        protocols = parse_protocol_map(self["listener.security.protocol.map"])
        #: Where the broker binds, one acceptor each; an empty host means every interface.
        self.listeners: tuple[EndPoint, ...] = parse_listeners(self["listeners"], "listeners", protocols)
        check_unique(self.listeners, "listeners", ports=True)
        names = [e.listener_name for e in self.listeners]
        advertised_text = self["advertised.listeners"] or self["listeners"]
        #: What the broker registers; port 0 is replaced by the bound port at registration.
        self.advertised_listeners: tuple[EndPoint, ...] = parse_listeners(
            advertised_text, "advertised.listeners", None
        )
        check_unique(self.advertised_listeners, "advertised.listeners", ports=False)
        for endpoint in self.advertised_listeners:
            if endpoint.listener_name not in names:
                raise ConfigError(
                    f"advertised.listeners listener name {endpoint.listener_name} is not a listener "
                    f"defined in listeners (the listener names are {', '.join(names)})"
                )
            if endpoint.host == "0.0.0.0":
                raise ConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0 "
                    f"({endpoint.connection_string()}): set advertised.listeners to a routable address"
                )
        advertised_names = [e.listener_name for e in self.advertised_listeners]
        inter = self["inter.broker.listener.name"].strip().upper()
        if not inter:
            if PLAINTEXT not in names:
                raise ConfigError(
                    "inter.broker.listener.name must be set when no listener is named PLAINTEXT "
                    f"(the listener names are {', '.join(names)})"
                )
            inter = PLAINTEXT
        if inter not in advertised_names:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in advertised.listeners: "
                f"{inter} is not one of {', '.join(advertised_names)}"
            )
        #: The listener other brokers and the controller reach this broker on (and it reaches them).
        self.inter_broker_listener_name: str = inter
        #: Listener name -> FLOODMARK or KAFKA (``listener.wire.protocol.map``).
        self.listener_wire_protocols: dict[str, str] = parse_wire_protocol_map(
            self["listener.wire.protocol.map"], names, inter
        )

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        values = parse_properties(text)
        values.update(overrides or {})
        return cls(values)

    def __getitem__(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        return BROKER_PROPERTIES[key].default

    @property
    def broker_id(self) -> int:
        return self["broker.id"]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self["log.dirs"]]

    def explicit(self) -> dict[str, Any]:
        return dict(self._values)

    def topic_defaults(self) -> dict[str, Any]:
        """The broker's default for every topic-level config key."""
        defaults = {topic_key: self[broker_key] for topic_key, broker_key in TOPIC_TO_BROKER.items()}
        return {**defaults, **{key: prop.default for key, prop in TOPIC_ONLY_PROPERTIES.items()}}

    def log_config(self, topic_overrides: Mapping[str, str] | None = None) -> LogConfig:
        merged = self.topic_defaults()
        merged.update(validate_topic_configs(topic_overrides or {}))
        return LogConfig(
            segment_bytes=merged["segment.bytes"],
            segment_ms=merged["segment.ms"],
            retention_ms=merged["retention.ms"],
            retention_bytes=merged["retention.bytes"],
            flush_interval_messages=merged["flush.messages"],
            flush_interval_ms=merged["flush.ms"],
            index_interval_bytes=merged["index.interval.bytes"],
            max_message_bytes=merged["max.message.bytes"],
            segment_index_bytes=merged["segment.index.bytes"],
            file_delete_delay_ms=merged["file.delete.delay.ms"],
            producer_id_expiration_ms=self["producer.id.expiration.ms"],  # broker-wide, as in Kafka
            cleanup_policy=tuple(merged["cleanup.policy"]),
            delete_retention_ms=merged["delete.retention.ms"],
            min_cleanable_dirty_ratio=merged["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=merged["min.compaction.lag.ms"],
            max_compaction_lag_ms=merged["max.compaction.lag.ms"],
            cleaner=self.cleaner_config(),  # broker-wide: the log manager reads the default config's
        )

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings (Kafka's ``LogCleaner.cleanerConfig``)."""
        return CleanerConfig.from_properties(self.__getitem__)

    def network_config(self, file_budget: int | None = None) -> NetworkConfig:
        """The socket server's settings (Kafka's SocketServer and KafkaRequestHandlerPool). The
        connection limits left at -1 are derived from ``file_budget`` (default: the soft
        RLIMIT_NOFILE now, so call it after the broker has raised its limit)."""
        if file_budget is None:
            file_budget = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if file_budget == resource.RLIM_INFINITY:
                file_budget = INT_MAX
        max_connections, per_ip, per_ip_overrides = connection_limits(
            self["max.connections"],
            self["max.connections.per.ip"],
            self["max.connections.per.ip.overrides"],
            file_budget,
        )
        pool_bytes = self["queued.max.request.bytes"]
        if pool_bytes == 0:
            raise ConfigError(
                "Invalid value 0 for configuration queued.max.request.bytes: use -1 or more than 0"
            )
        return NetworkConfig(
            listeners=tuple(Listener(e.listener_name, e.host, e.port) for e in self.listeners),
            num_network_threads=self["num.network.threads"],
            num_io_threads=self["num.io.threads"],
            queued_max_requests=self["queued.max.requests"],
            socket_request_max_bytes=self["socket.request.max.bytes"],
            max_connections=max_connections,
            max_connections_per_ip=per_ip,
            max_connections_per_ip_overrides=per_ip_overrides,
            connections_max_idle_ms=self["connections.max.idle.ms"],
            queued_max_request_bytes=None if pool_bytes < 0 else pool_bytes,
            inter_broker_listener=self.inter_broker_listener_name,
        )

    def group_config(self) -> GroupConfig:
        """The group coordinator's settings (Kafka's GroupConfig and OffsetConfig)."""
        return GroupConfig.from_properties(self.__getitem__)

    def controller_config(self) -> ControllerConfig:
        """The controller's settings (Kafka's KafkaController reads them from KafkaConfig)."""
        return ControllerConfig(
            unclean_leader_election_enable=self["unclean.leader.election.enable"],
            auto_leader_rebalance_enable=self["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_seconds=self["leader.imbalance.check.interval.seconds"],
            leader_imbalance_per_broker_percentage=self["leader.imbalance.per.broker.percentage"],
            delete_topic_enable=self["delete.topic.enable"],
            controller_socket_timeout_ms=self["controller.socket.timeout.ms"],
            inter_broker_listener_name=self.inter_broker_listener_name,
            request_max_partitions=self["controller.request.max.partitions"],
        )

    def controlled_shutdown_settings(self) -> ControlledShutdownSettings:
        """Controlled shutdown's settings (``controlled.shutdown.*``, ``request.timeout.ms``)."""
        return ControlledShutdownSettings(
            max_retries=self["controlled.shutdown.max.retries"],
            retry_backoff_ms=self["controlled.shutdown.retry.backoff.ms"],
            request_timeout_ms=self["request.timeout.ms"],
            inter_broker_listener_name=self.inter_broker_listener_name,
        )


def _check_typed(prop: Prop, value: Any) -> Any:
    return prop.parse(
        ",".join(value)
        if isinstance(value, list)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def validate_topic_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """Parse topic-level overrides; an unknown key or bad value raises ConfigError naming it."""
    out = {}
    for key, raw in configs.items():
        if key in TOPIC_ONLY_PROPERTIES:
            try:
                parse_throttled_replicas(str(raw))
            except ValueError as exc:
                raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {exc}") from None
            out[key] = str(raw).strip()
            continue
        broker_key = TOPIC_TO_BROKER.get(key)
        if broker_key is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        out[key] = replace(BROKER_PROPERTIES[broker_key], name=key).parse(raw)
    return out
