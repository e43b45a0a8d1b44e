"""KIP-103's broker keys parsed and checked as Kafka's KafkaConfig does (broker/config.py;
docs/operations.md "Broker configuration"): ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``inter.broker.listener.name``, each error with a message
that names the key and the listener; and the /brokers/ids/<id> codec (zk/data.py, BrokerIdZNode v4)."""

from __future__ import annotations

import json

import pytest

from broker.config import BrokerConfig, ConfigError
from zk.data import BrokerInfo, EndPoint, decode_broker_registration, encode_broker_registration

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
MAP = "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"
TWO = "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092"
TWO_ADVERTISED = "INTERNAL://broker1:19092,EXTERNAL://127.0.0.1:9092"


def config(**keys: str) -> BrokerConfig:
    return BrokerConfig({**BASE, **{k.replace("_", "."): v for k, v in keys.items()}})


def two(**keys: str) -> BrokerConfig:
    defaults = {
        "listeners": TWO,
        "advertised_listeners": TWO_ADVERTISED,
        "listener_security_protocol_map": MAP,
        "inter_broker_listener_name": "INTERNAL",
    }
    return config(**{**defaults, **keys})


def test_the_default_is_one_plaintext_listener_used_between_brokers():
    cfg = config()
    assert cfg.listeners == (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.controller_config().inter_broker_listener_name == "PLAINTEXT"
    assert cfg.network_config().listeners == (("PLAINTEXT", "127.0.0.1", 9092),)


def test_port_0_is_accepted_and_advertised_as_given():
    cfg = config(listeners="PLAINTEXT://127.0.0.1:0")
    assert cfg.advertised_listeners == (EndPoint("PLAINTEXT", "127.0.0.1", 0),)


def test_two_named_listeners():
    cfg = two()
    assert [(e.listener_name, e.host, e.port) for e in cfg.listeners] == [
        ("INTERNAL", "0.0.0.0", 19092),
        ("EXTERNAL", "0.0.0.0", 9092),
    ]
    assert [e.connection_string() for e in cfg.advertised_listeners] == TWO_ADVERTISED.split(",")
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.controller_config().inter_broker_listener_name == "INTERNAL"
    assert cfg.controlled_shutdown_settings().inter_broker_listener_name == "INTERNAL"
    assert [lst.name for lst in cfg.network_config().listeners] == ["INTERNAL", "EXTERNAL"]


def test_names_are_upper_cased_an_empty_host_binds_everything_and_ipv6_hosts_are_bracketed():
    cfg = config(
        listeners="internal://:19092,EXTERNAL://[::1]:9092",
        advertised_listeners="INTERNAL://b1:19092,external://[::1]:9092",
        listener_security_protocol_map="Internal:plaintext,EXTERNAL:PLAINTEXT",
        inter_broker_listener_name="internal",
    )
    assert cfg.listeners == (EndPoint("INTERNAL", "", 19092), EndPoint("EXTERNAL", "::1", 9092))
    assert cfg.inter_broker_listener_name == "INTERNAL"


def test_advertised_listeners_default_to_listeners():
    cfg = two(advertised_listeners="", listeners="INTERNAL://127.0.0.1:19092,EXTERNAL://localhost:9092")
    assert cfg.advertised_listeners == cfg.listeners


def test_advertised_listeners_may_be_a_subset_and_share_ports():
    cfg = two(advertised_listeners="INTERNAL://h:9000,EXTERNAL://h2:9000")
    assert [e.port for e in cfg.advertised_listeners] == [9000, 9000]
    cfg = two(advertised_listeners="INTERNAL://broker1:19092")
    assert [e.listener_name for e in cfg.advertised_listeners] == ["INTERNAL"]


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        # malformed entries
        (
            {"listeners": "127.0.0.1:9092"},
            r"Invalid value '127.0.0.1:9092' in configuration listeners: expected NAME://host:port",
        ),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, r"in configuration listeners: expected NAME://host:port"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:http"},
            r"in configuration listeners: expected NAME://host:port",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:70000"},
            r"in configuration listeners: expected NAME://host:port",
        ),
        ({"listeners": "://127.0.0.1:9092"}, r"in configuration listeners: expected NAME://host:port"),
        ({"listeners": " , "}, r"listeners must hold at least one NAME://host:port"),
        (
            {"advertised_listeners": "PLAINTEXT://h"},
            r"in configuration advertised.listeners: expected NAME://host:port",
        ),
        # unique names and ports
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"},
            r"listeners: each listener must have a different name; PLAINTEXT repeats",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092",
                "listener_security_protocol_map": "PLAINTEXT:PLAINTEXT,SSL:PLAINTEXT",
            },
            r"listeners: each listener must have a different port; 9092 repeats",
        ),
        (
            {"advertised_listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"},
            r"advertised.listeners: each listener must have a different name; PLAINTEXT repeats",
        ),
        # advertised names must be listener names; no 0.0.0.0
        (
            {"advertised_listeners": "EXTERNAL://h:9092"},
            r"advertised.listeners listener name EXTERNAL is not a listener defined in listeners \(the listener names are PLAINTEXT\)",
        ),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092"},
            r"advertised.listeners cannot use the nonroutable meta-address 0.0.0.0",
        ),
        (
            {"advertised_listeners": "PLAINTEXT://0.0.0.0:9092"},
            r"advertised.listeners cannot use the nonroutable meta-address 0.0.0.0",
        ),
        # the protocol map
        (
            {"listeners": "INTERNAL://127.0.0.1:9092"},
            r"listeners: no security protocol defined for listener INTERNAL: add INTERNAL:PLAINTEXT to listener.security.protocol.map",
        ),
        (
            {"listeners": "SSL://127.0.0.1:9093", "inter_broker_listener_name": "SSL"},
            r"listeners: listener SSL uses security protocol SSL; only PLAINTEXT is supported",
        ),
        (
            {"listeners": "INTERNAL://127.0.0.1:9093", "listener_security_protocol_map": "INTERNAL:SASL_SSL"},
            r"listener INTERNAL uses security protocol SASL_SSL; only PLAINTEXT is supported",
        ),
        (
            {"listener_security_protocol_map": "PLAINTEXT"},
            r"Invalid value 'PLAINTEXT' in configuration listener.security.protocol.map: expected NAME:PROTOCOL",
        ),
        (
            {"listener_security_protocol_map": "PLAINTEXT:TLS"},
            r"listener.security.protocol.map: unknown security protocol TLS",
        ),
        (
            {"listener_security_protocol_map": "PLAINTEXT:PLAINTEXT,plaintext:PLAINTEXT"},
            r"listener.security.protocol.map maps listener PLAINTEXT twice",
        ),
        # inter.broker.listener.name
        (
            {
                "listeners": "INTERNAL://127.0.0.1:9092",
                "listener_security_protocol_map": "INTERNAL:PLAINTEXT",
            },
            r"inter.broker.listener.name must be set when no listener is named PLAINTEXT \(the listener names are INTERNAL\)",
        ),
        (
            {"inter_broker_listener_name": "INTERNAL"},
            r"inter.broker.listener.name must be a listener name defined in advertised.listeners: INTERNAL is not one of PLAINTEXT",
        ),
    ],
)
def test_bad_listener_configs_are_refused_with_a_message_naming_the_key(keys, match):
    with pytest.raises(ConfigError, match=match):
        config(**keys)


def test_inter_broker_listener_must_be_advertised():
    with pytest.raises(ConfigError, match="INTERNAL is not one of EXTERNAL"):
        two(advertised_listeners="EXTERNAL://127.0.0.1:9092")


def test_a_listener_named_kafka_speaks_kafkas_protocol_and_needs_no_security_map_entry():
    cfg = config(listeners="PLAINTEXT://127.0.0.1:9092,KAFKA://127.0.0.1:9192")
    assert cfg.listener_wire_protocols == {"PLAINTEXT": "FLOODMARK", "KAFKA": "KAFKA"}
    assert [e.security_protocol for e in cfg.listeners] == ["PLAINTEXT", "PLAINTEXT"]


def test_the_wire_protocol_map_names_any_listener_and_the_rest_speak_floodmark():
    cfg = two(listener_wire_protocol_map="external:kafka")
    assert cfg.listener_wire_protocols == {"INTERNAL": "FLOODMARK", "EXTERNAL": "KAFKA"}


@pytest.mark.parametrize(
    ("wire_map", "match"),
    [
        ("EXTERNAL:THRIFT", r"EXTERNAL:THRIFT.*listener.wire.protocol.map.*FLOODMARK, KAFKA"),
        ("EXTERNAL", r"expected NAME:WIRE"),
        ("EXTERNAL:KAFKA,external:FLOODMARK", r"maps listener EXTERNAL twice"),
        ("INTERNAL:KAFKA", r"inter-broker listener INTERNAL must speak FLOODMARK"),
    ],
)
def test_bad_wire_protocol_maps_are_refused(wire_map, match):
    with pytest.raises(ConfigError, match=match):
        two(listener_wire_protocol_map=wire_map)


def test_registration_is_brokeridznode_v4_with_the_legacy_fields_of_the_plaintext_listener():
    endpoints = [EndPoint("INTERNAL", "broker1", 19092), EndPoint("EXTERNAL", "127.0.0.1", 9092)]
    obj = json.loads(encode_broker_registration(endpoints, 5))
    assert obj == {
        "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"},
        "endpoints": ["INTERNAL://broker1:19092", "EXTERNAL://127.0.0.1:9092"],
        "jmx_port": -1,
        "host": None,
        "timestamp": "5",
        "port": -1,
        "version": 4,
    }
    info = decode_broker_registration(encode_broker_registration(endpoints, 5), 1, 77)
    assert (info.host, info.port, info.epoch) == (None, -1, 77)
    assert info.endpoint_for("INTERNAL") == endpoints[0] and info.endpoint_for("NOPE") is None
    plain = json.loads(encode_broker_registration([EndPoint("PLAINTEXT", "h", 1), endpoints[0]], 5))
    assert (plain["host"], plain["port"]) == ("h", 1)


def test_a_version_1_registration_still_decodes_as_one_plaintext_endpoint():
    v1 = b'{"version":1,"host":"h","port":9092,"timestamp":"1","endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1}'
    info = decode_broker_registration(v1, 2)
    assert info.endpoints == (EndPoint("PLAINTEXT", "h", 9092),)
    assert BrokerInfo(2, "h", 9092) == info  # host/port alone build the same PLAINTEXT endpoint


def test_the_wire_shape_carries_every_endpoint_and_old_senders_still_decode():
    info = BrokerInfo(
        3, None, -1, endpoints=(EndPoint("INTERNAL", "b3", 19092), EndPoint("EXTERNAL", "x", 9094))
    )
    wire = info.wire("INTERNAL")
    assert (wire["host"], wire["port"]) == ("b3", 19092)
    assert BrokerInfo.from_wire(wire) == info
    assert (info.wire("MISSING")["host"], info.wire("MISSING")["port"]) == ("", -1)
    old = {"id": 3, "host": "h", "port": 1, "rack": None}
    assert BrokerInfo.from_wire(old).endpoints == (EndPoint("PLAINTEXT", "h", 1),)
