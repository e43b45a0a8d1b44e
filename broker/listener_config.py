"""Parsing of the listener and connection properties (Kafka's KafkaConfig checks for KIP-103's
``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``, and
``max.connections.per.ip.overrides``; docs/operations.md "Listeners" and "Broker
configuration"). :class:`broker.config.BrokerConfig` calls these; each raises
:class:`~broker.config_error.ConfigError` naming the key.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping

from broker.config_error import ConfigError
from broker.network.quotas import derived_connection_limits
from broker.network.wire_codec import FLOODMARK, WIRE_PROTOCOLS
from zk.data import PLAINTEXT, SECURITY_PROTOCOLS, EndPoint


def connection_limits(
    max_connections: int, per_ip: int, overrides: str, open_files_limit: int
) -> tuple[int, int, tuple[tuple[str, int], ...]]:
    """``(max.connections, max.connections.per.ip, the overrides by address)`` in force: a limit
    left at -1 is derived from ``open_files_limit`` (:func:`~broker.network.quotas.derived_connection_limits`),
    ``max.connections.per.ip`` -1 is half of ``max.connections``. At start and for each dynamic
    change (broker/dynamic_broker_config.py)."""
    derived_max, _ = derived_connection_limits(open_files_limit)
    max_connections = derived_max if max_connections < 0 else max_connections
    per_ip = max(1, max_connections // 2) if per_ip < 0 else per_ip
    return max_connections, per_ip, parse_per_ip_overrides(overrides)


def parse_per_ip_overrides(value: str) -> tuple[tuple[str, int], ...]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs (Kafka's), each host resolved to
    its addresses (an IPv6 address in brackets)."""
    out: list[tuple[str, int]] = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(
                f"Invalid value {item!r} in configuration max.connections.per.ip.overrides: expected host:count"
            )
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as exc:
            raise ConfigError(
                f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc.strerror or exc}"
            ) from None
        out.extend((address, int(count)) for address in sorted(addresses))
    return tuple(out)


def parse_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs, names upper-cased as Kafka's."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, protocol = (part.strip() for part in item.partition(":"))
        if not sep or not name or not protocol:
            raise ConfigError(
                f"Invalid value {item!r} in configuration listener.security.protocol.map: "
                "expected NAME:PROTOCOL"
            )
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {item!r} in configuration listener.security.protocol.map: "
                f"unknown security protocol {protocol} (one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name.upper() in out:
            raise ConfigError(f"listener.security.protocol.map maps listener {name.upper()} twice")
        out[name.upper()] = protocol.upper()
    return out


def parse_wire_protocol_map(value: str, listener_names: Iterable[str], inter_broker: str) -> dict[str, str]:
    """``listener.wire.protocol.map``: ``NAME:WIRE`` pairs saying which listener speaks which wire
    protocol (``FLOODMARK``, msgpack, or ``KAFKA``, Kafka's binary protocol); a listener not named
    speaks FLOODMARK. The inter-broker listener must: replication and the controller's requests
    stay msgpack. Returns every listener's wire protocol by name."""
    mapped: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, wire = (part.strip().upper() for part in item.partition(":"))
        if not sep or not name or wire not in WIRE_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {item!r} in configuration listener.wire.protocol.map: expected "
                f"NAME:WIRE with WIRE one of {', '.join(WIRE_PROTOCOLS)}"
            )
        if name in mapped:
            raise ConfigError(f"listener.wire.protocol.map maps listener {name} twice")
        mapped[name] = wire
    if mapped.get(inter_broker, FLOODMARK) != FLOODMARK:
        raise ConfigError(
            f"listener.wire.protocol.map: the inter-broker listener {inter_broker} must speak FLOODMARK "
            "(replication and the controller's requests are msgpack); give Kafka's clients a listener "
            "of their own"
        )
    return {name: mapped.get(name, FLOODMARK) for name in listener_names}


def parse_listeners(value: str, key: str, protocols: Mapping[str, str] | None) -> tuple[EndPoint, ...]:
    """``NAME://host:port[,NAME://host:port...]`` (an IPv6 host in brackets; empty host: every
    interface); with ``protocols``, every name must be mapped to PLAINTEXT, the one protocol
    floodmark speaks (advertised listeners are checked against the listeners instead)."""
    out = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, hostport = item.partition("://")
        host, colon, port = hostport.rpartition(":")
        name = name.strip().upper()
        if not sep or not name or not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(
                f"Invalid value {item!r} in configuration {key}: expected NAME://host:port "
                "(e.g. PLAINTEXT://127.0.0.1:9092)"
            )
        protocol = PLAINTEXT if protocols is None else protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"{key}: no security protocol defined for listener {name}: add {name}:PLAINTEXT "
                "to listener.security.protocol.map"
            )
        if protocol != PLAINTEXT:
            raise ConfigError(
                f"{key}: listener {name} uses security protocol {protocol}; only PLAINTEXT is supported"
            )
        out.append(EndPoint(name, host.removeprefix("[").removesuffix("]"), int(port), protocol))
    if not out:
        raise ConfigError(f"{key} must hold at least one NAME://host:port, got {value!r}")
    return tuple(out)


def check_unique(endpoints: Iterable[EndPoint], key: str, ports: bool) -> None:
    """Kafka's rules: listener names are unique, and so are the ports one binds (port 0, an
    ephemeral port, may repeat); advertised listeners may share a port."""
    names: set[str] = set()
    bound: set[int] = set()
    for e in endpoints:
        if e.listener_name in names:
            raise ConfigError(f"{key}: each listener must have a different name; {e.listener_name} repeats")
        names.add(e.listener_name)
        if ports and e.port != 0:
            if e.port in bound:
                raise ConfigError(f"{key}: each listener must have a different port; {e.port} repeats")
            bound.add(e.port)
