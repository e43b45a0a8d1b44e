import pytest

from broker.config import BrokerConfig, ConfigError, parse_properties, validate_topic_configs

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def test_defaults_are_kafkas():
    cfg = BrokerConfig(BASE)
    assert cfg["replica.lag.time.max.ms"] == 30000
    assert cfg["unclean.leader.election.enable"] is False
    assert cfg["log.index.interval.bytes"] == 4096
    assert cfg["replica.truncation.policy"] == "leader-epoch"
    assert [e.connection_string() for e in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9092"]


def test_unknown_key_named():
    with pytest.raises(ConfigError, match="log.segmnt.bytes"):
        BrokerConfig({**BASE, "log.segmnt.bytes": "1"})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("num.io.threads", "0", "num.io.threads"),
        ("num.io.threads", "lots", "num.io.threads"),
        ("unclean.leader.election.enable", "maybe", "unclean.leader.election.enable"),
        ("replica.truncation.policy", "yolo", "replica.truncation.policy"),
        ("listeners", "127.0.0.1:9092", "listeners"),
    ],
)
def test_bad_values_named(key, value, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig({**BASE, key: value})


def test_broker_id_and_zookeeper_required():
    with pytest.raises(ConfigError, match="broker.id"):
        BrokerConfig({"zookeeper.connect": "x:1"})
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        BrokerConfig({"broker.id": "1"})


def test_properties_file_format():
    text = "# comment\n! also\nbroker.id=3\nlog.dirs = /a,/b\nzookeeper.connect: h:1/chroot\n"
    cfg = BrokerConfig(parse_properties(text))
    assert cfg.broker_id == 3 and [str(d) for d in cfg.log_dirs] == ["/a", "/b"]
    assert cfg["zookeeper.connect"] == "h:1/chroot"


def test_topic_overrides_map_to_log_config():
    cfg = BrokerConfig({**BASE, "log.segment.bytes": "2048"})
    assert cfg.log_config().segment_bytes == 2048
    lc = cfg.log_config({"segment.bytes": "4096", "retention.ms": "-1"})
    assert lc.segment_bytes == 4096 and lc.retention_ms == -1
    with pytest.raises(ConfigError, match="Unknown topic config name: segment.byte"):
        validate_topic_configs({"segment.byte": "1"})
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        validate_topic_configs({"min.insync.replicas": "0"})
