"""docs/operations.md cannot drift from the code: its generated reference sections come from here.

Three sections of docs/operations.md sit between ``<!-- BEGIN generated: NAME -->`` and
``<!-- END generated: NAME -->`` markers and are produced by this module from the code:

- ``cli``: every ``floodmark`` command and option, walked from the click tree
  (``cli.main.build_cli``), with the same option text ``--help`` prints;
- ``broker-config``: every key of ``broker.config.BROKER_PROPERTIES`` with its type, default,
  valid values and meaning (:data:`MEANINGS`, else the property's own ``doc``);
- ``topic-config``: every topic-level override of ``broker.config.TOPIC_TO_BROKER``;
- ``kafka-apis``: every API the Kafka listener serves, with the versions ApiVersions advertises
  (``broker.kafka_protocol.kafka_apis.build_kafka_apis``).

The tests regenerate each section and compare it with the doc's exactly, so any change the
generator would make (a new key, flag, default, help text or meaning) fails the suite until the
docs are regenerated; they also check that every config key appears with its current type and
default, and every command with all of its options, to name what is missing::

    .venv/bin/python tests/unit/test_docs_config.py --write     # rewrite the generated sections
    .venv/bin/python tests/unit/test_docs_config.py             # print them

Everything outside the markers is hand-written and kept as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from broker.config import BROKER_PROPERTIES, TOPIC_ONLY_PROPERTIES, TOPIC_TO_BROKER
from broker.config_prop import INT_MAX, LONG_MAX, Prop
from broker.dynamic_broker_config import DYNAMIC_BROKER_CONFIGS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
SECTIONS = ("cli", "broker-config", "topic-config", "kafka-apis")
REGENERATE = ".venv/bin/python tests/unit/test_docs_config.py --write"

#: What each broker property means, in Kafka's words where Kafka has the key. A key missing here
#: falls back to the Prop's ``doc``; the test insists that every row has a meaning.
MEANINGS: dict[str, str] = {
    "broker.id": "This broker's id: unique in the cluster, the name of its `/brokers/ids/<id>` znode. Required.",
    "listeners": "Where the broker listens (KIP-103): comma-separated `NAME://host:port`, one acceptor each, e.g. `INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092`. Names and ports must be unique (port 0, an ephemeral port, may repeat); an empty host binds every interface. Each name must be mapped in `listener.security.protocol.map`.",
    "advertised.listeners": "The `NAME://host:port` list registered in `/brokers/ids/<id>`: clients get, in Metadata, each broker's address on the listener they connected to; other brokers and the controller use `inter.broker.listener.name`'s. Empty means `listeners`. Every name must be a listener's; `0.0.0.0` is refused (as Kafka: advertise a routable address); port 0 is advertised as the port bound for that listener, an empty host as this machine's fully qualified name.",
    "listener.security.protocol.map": "`NAME:PROTOCOL` pairs: each listener's security protocol (Kafka's default maps each protocol name to itself). Only PLAINTEXT is implemented: a listener mapped to SSL, SASL_PLAINTEXT or SASL_SSL is refused at start-up.",
    "inter.broker.listener.name": "The listener the brokers use among themselves: the controller's requests to brokers, the replica fetchers, controlled shutdown. Empty means the listener named PLAINTEXT; it must be set when no listener has that name, and be one of `advertised.listeners`.",
    "listener.wire.protocol.map": "`NAME:WIRE` pairs: the wire protocol each listener speaks, `FLOODMARK` (floodmark's msgpack framing; every listener not named) or `KAFKA` (Kafka's binary protocol, so kcat, librdkafka, kafka-python and aiokafka work unmodified; docs/design.md \"Two wire protocols\"). The inter-broker listener must speak FLOODMARK. The default security map has `KAFKA:PLAINTEXT`, so `listeners=PLAINTEXT://:9092,KAFKA://:9192` is enough.",
    "log.dirs": "Comma-separated directories holding the partition directories and the checkpoint files.",
    "zookeeper.connect": "ZooKeeper connect string `host:port[,host:port...][/chroot]`. Required.",
    "zookeeper.session.timeout.ms": "ZooKeeper session timeout. A crashed broker's `/brokers/ids/<id>` (and `/controller`) disappears only when its session expires, so this bounds failure detection (ZooKeeper rounds it to its tick: 2 to 20 ticks).",
    "zookeeper.connection.timeout.ms": "How long start-up waits for the first ZooKeeper connection.",
    "num.network.threads": "Processors of the Reactor pipeline: connections are handed to them round-robin by the acceptor. Tasks on the broker's uvloop loop, not OS threads (docs/design.md).",
    "num.recovery.threads.per.data.dir": "Threads per log dir that open (and, after an unclean shutdown, recover) the logs at start-up, as Kafka's; the logs are adopted in directory order whatever the threads' timing. More threads overlap the recovery's fsyncs. docs/design.md \"Open files at scale (issue 25)\".",
    "num.io.threads": "Request handlers that take requests off the request channel and run the API layer (tasks on the loop).",
    "queued.max.requests": "Capacity of the request channel's bounded queue; when it is full, processors stop reading (backpressure).",
    "socket.request.max.bytes": "Largest request frame accepted; a longer frame is refused before anything is allocated.",
    "max.connections": (
        "Most connections the broker keeps at once (the inter-broker listener's are exempt when there are "
        "several listeners); one more is closed at once and counted. -1 (default): max(16, soft "
        "RLIMIT_NOFILE at start // 8)."
    ),
    "connections.max.idle.ms": (
        "Connections with no bytes either way (and no request in flight) for this long are closed, "
        "including ones stalled mid-frame."
    ),
    "default.replication.factor": "Replication factor of topics created without one (-1 in CreateTopics).",
    "num.partitions": "Partition count of topics created without one.",
    "min.insync.replicas": "With acks=all, a produce is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than this, bounded by the replication factor (Kafka 3.7's effective min ISR). While the ISR is smaller, the high watermark does not move (KAFKA-15583): no consumer sees records appended meanwhile, whatever their acks, and a parked acks=all write waits for the ISR to come back or times out (REQUEST_TIMED_OUT). Topic-level override: `min.insync.replicas`.",
    "unclean.leader.election.enable": "Allow a replica outside the ISR to become leader when no ISR member is alive (may lose committed data; logged loudly). Off, as in Kafka 0.11+. Topic-level override of the same name.",
    "replica.lag.time.max.ms": "A follower that has not caught up to the leader's log end offset for this long is removed from the ISR.",
    "replica.fetch.wait.max.ms": "Longest time a follower's FETCH waits at the leader for `replica.fetch.min.bytes` of data.",
    "replica.fetch.min.bytes": "Bytes a follower's FETCH waits for before the leader answers (up to `replica.fetch.wait.max.ms`).",
    "replica.fetch.max.bytes": "Bytes a follower asks for per partition in one FETCH.",
    "replica.fetch.backoff.ms": "Pause before a follower fetches again after a fetch error.",
    "max.incremental.fetch.session.cache.slots": "Fetch sessions (KIP-227) this broker keeps for its "
    "followers; 0 turns them off (each replica fetch then names every partition). docs/design.md "
    '"Fetch sessions (KIP-227)".',
    "replica.socket.timeout.ms": "Timeout of a follower's requests to its leader.",
    "replica.high.watermark.checkpoint.interval.ms": "How often each log dir's `replication-offset-checkpoint` (the high watermarks) is written.",
    "replica.truncation.policy": "How a follower truncates before fetching from a new leader: `leader-epoch` (KIP-101/279, safe) or `high-watermark` (Kafka's rule before KIP-101, unsafe: truncating to the high watermark can lose acknowledged data and let replicas diverge; kept to reproduce that).",
    "auto.leader.rebalance.enable": "The controller periodically moves leadership back to preferred replicas when a broker's imbalance exceeds `leader.imbalance.per.broker.percentage`.",
    "leader.imbalance.check.interval.seconds": "How often the controller checks the leader imbalance.",
    "leader.imbalance.per.broker.percentage": "Share of a broker's preferred partitions led elsewhere above which a preferred-replica election runs.",
    "delete.topic.enable": "Whether DeleteTopics (and `/admin/delete_topics`) really delete topics.",
    "controlled.shutdown.enable": "On SIGTERM, ask the controller to move this broker's leaderships away before exiting.",
    "controlled.shutdown.max.retries": "Attempts of the controlled-shutdown request before the broker shuts down anyway.",
    "controlled.shutdown.retry.backoff.ms": "Pause between controlled-shutdown attempts.",
    "controller.socket.timeout.ms": "Timeout of the controller's requests (LeaderAndIsr, UpdateMetadata, StopReplica) to brokers.",
    "controller.request.max.partitions": 'Most partition states in one LeaderAndIsr or UpdateMetadata request from the controller (floodmark\'s; Kafka sends one request per broker whatever its size): a batch for more goes as several requests, in partition order, each applied by the broker on its own, so no frame of 10,000 partitions is encoded, sent or applied in one step. About 200 bytes of msgpack per partition. docs/design.md "The controller at scale (issue 25)".',
    "event.loop.stall.monitor.interval.ms": "How often the broker's event-loop stall monitor sleeps and measures how late it woke (floodmark's): the longest and a histogram are `floodmark_event_loop_stall_max_seconds` and `floodmark_event_loop_stall_seconds` in `/metrics`, and a stall of a second or more is logged as a warning. 0 turns the monitor off. docs/design.md \"The controller at scale (issue 25)\".",
    "auto.create.topics.enable": "Create a missing topic (with `num.partitions` and `default.replication.factor`) when a Metadata request allows it, as a producer's does (Kafka's default is true); the AdminClient's and floodmark's consumer's never do.",
    "request.timeout.ms": "Timeout of requests this broker sends as a client (e.g. controlled shutdown to the controller).",
    "log.segment.bytes": "A segment rolls when it would grow past this size. Topic-level: `segment.bytes`.",
    "log.roll.ms": "A segment rolls when its first record is older than this. Topic-level: `segment.ms`.",
    "log.roll.hours": "`log.roll.ms` in hours; used only when `log.roll.ms` is not set.",
    "log.retention.ms": "Segments whose newest record is older than this are deleted (-1: keep forever). Topic-level: `retention.ms`.",
    "log.retention.hours": "`log.retention.ms` in hours; used only when `log.retention.ms` is not set.",
    "log.retention.bytes": "Oldest segments are deleted while a partition is larger than this (-1: no limit). Topic-level: `retention.bytes`.",
    "log.retention.check.interval.ms": "How often the retention check runs.",
    "log.flush.interval.messages": "fsync a log after this many appended messages (default: never; durability comes from replication). Topic-level: `flush.messages`.",
    "log.flush.interval.ms": "fsync a log when its unflushed data is older than this. Topic-level: `flush.ms`.",
    "log.flush.scheduler.interval.ms": "How often the flusher checks `log.flush.interval.ms`.",
    "log.flush.offset.checkpoint.interval.ms": "How often `recovery-point-offset-checkpoint` is written.",
    "log.flush.start.offset.checkpoint.interval.ms": "How often `log-start-offset-checkpoint` is written.",
    "log.index.interval.bytes": "Bytes of log between two entries of the sparse offset and time indexes. Topic-level: `index.interval.bytes`.",
    "log.segment.open.files.max": "Most segment `.log` files the broker holds open at once, the active segments' included: a broker-wide LRU opens them on demand and closes the least recently used (floodmark's; Kafka keeps one descriptor per segment). Index files hold no descriptor. -1: everything the open-file limit leaves after its reserve (a quarter, at least 64); a larger value is capped there. docs/design.md \"Open files at scale (issue 25)\".",
    "log.dir.min.free.bytes": "The free-space floor of each log dir (issue 25; Redpanda's `storage_min_free_bytes`, where Kafka halts on ENOSPC): below it, a leader refuses appends to the partitions the dir holds with NOT_ENOUGH_REPLICAS (retriable, nothing written; the `__consumer_offsets` partitions excepted) and a follower stops fetching them (the lag rules take it out of the ISR); both resume by themselves once at least the floor plus a tenth (at least 1 MiB) is usable again. Measured with statvfs at most every second, plus the bytes appended since. -1 (default): 1% of the dir's filesystem, at most 1 GiB, and none on a filesystem under 1.6 GiB (where that is under 16 MiB); 0: no floor (ENOSPC takes the dir offline, KIP-112). Changed at run time, every dir is measured against the new floor at once. docs/design.md \"Disk space as a budget (issue 25)\".",
    "max.broker.partitions": "Most partition replicas one broker may hold (KIP-578; Kafka's default, Int.MaxValue, is no limit). Published in `/brokers/ids/<id>`: CreateTopics, CreatePartitions and partition reassignments that would take a broker past it are refused with POLICY_VIOLATION, naming the broker.",
    "log.index.size.max.bytes": "Largest size of a segment's offset or time index; a full index rolls the segment. Topic-level: `segment.index.bytes`.",
    "message.max.bytes": "Largest record batch the broker accepts (MESSAGE_TOO_LARGE above it). Topic-level: `max.message.bytes`.",
    "log.cleanup.policy": 'What happens to old segments: `delete` (retention by time and size), `compact` (the log cleaner keeps the last record of each key, docs/design.md "Log compaction"), or both (`compact,delete`, either order). A `compact`-only log gets no time or size retention. Topic-level: `cleanup.policy`.',
    "metrics.port": "Port of the Prometheus `/metrics` endpoint (see Metrics below); -1 disables it, 0 picks a free port.",
    "state.change.log.file": "Path of this broker's state-change.log; empty means `state-change.log` next to the first log dir (`<log dir>/../state-change.log`).",
}

TOPIC_MEANINGS: dict[str, str] = {
    "segment.bytes": "Segment size before a roll.",
    "segment.ms": "Segment age before a roll.",
    "segment.index.bytes": "Largest offset/time index per segment.",
    "retention.ms": "Time retention (-1: forever).",
    "retention.bytes": "Size retention per partition (-1: none).",
    "flush.messages": "fsync after this many messages.",
    "flush.ms": "fsync after this long.",
    "index.interval.bytes": "Bytes between index entries.",
    "max.message.bytes": "Largest record batch accepted.",
    "min.insync.replicas": "Smallest ISR for acks=all writes.",
    "unclean.leader.election.enable": "Allow an out-of-ISR leader for this topic.",
    "cleanup.policy": "`delete`, `compact` or `compact,delete`.",
    "delete.retention.ms": "How long a tombstone stays in the cleaned part of a compacted log.",
    "min.cleanable.dirty.ratio": "Dirty share above which a compacted log is cleaned.",
    "min.compaction.lag.ms": "Least time a record stays uncompacted.",
    "max.compaction.lag.ms": "Most time a record stays uncompacted (KIP-354).",
}


# -- formatting ------------------------------------------------------------------------------------


def fmt_default(prop: Prop) -> str:
    """The default as the docs show it (a code span; Long/Integer.MAX_VALUE named)."""
    value = prop.default
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, list):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    if value == sys.float_info.max:
        return f"`{text}` (Double.MAX_VALUE)"
    if value == LONG_MAX and not isinstance(value, bool):
        return f"`{text}` (Long.MAX_VALUE)"
    if value == INT_MAX and not isinstance(value, bool):
        return f"`{text}` (Integer.MAX_VALUE)"
    return f"`{text}`" if text else '`""` (empty)'


def fmt_valid(prop: Prop) -> str:
    if prop.choices:
        return " \\| ".join(f"`{c}`" for c in prop.choices)
    if prop.kind in ("int", "double") and (prop.low is not None or prop.high is not None):
        low = "" if prop.low is None else f"{prop.low} ≤ "
        high = "" if prop.high is None else f" ≤ {prop.high}"
        return f"{low}x{high}"
    if prop.kind == "bool":
        return "`true` \\| `false`"
    if prop.kind == "list":
        return "comma-separated"
    return "any"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def meaning(prop: Prop) -> str:
    return MEANINGS.get(prop.name) or prop.doc


#: What a dynamic broker config's row says after its meaning (KIP-226, broker/dynamic_broker_config.py).
DYNAMIC_NOTE = (
    " **Dynamic** (KIP-226): also set per broker or cluster-wide at run time, no restart "
    "(`floodmark configs --alter --entity-type brokers`, Kafka's AlterConfigs)."
)


def broker_config_section() -> str:
    rows = ["| key | type | default | valid values | meaning |", "|---|---|---|---|---|"]
    for prop in BROKER_PROPERTIES.values():
        text = meaning(prop) + (DYNAMIC_NOTE if prop.name in DYNAMIC_BROKER_CONFIGS else "")
        rows.append(
            f"| `{prop.name}` | {prop.kind} | {fmt_default(prop)} | {fmt_valid(prop)} | {_cell(text)} |"
        )
    return "\n".join(rows)


def topic_config_section() -> str:
    rows = ["| topic key | default from broker key | type | meaning |", "|---|---|---|---|"]
    for topic_key, broker_key in TOPIC_TO_BROKER.items():
        prop = BROKER_PROPERTIES[broker_key]
        rows.append(
            f"| `{topic_key}` | `{broker_key}` | {prop.kind} | {_cell(TOPIC_MEANINGS.get(topic_key, ''))} |"
        )
    for topic_key, prop in TOPIC_ONLY_PROPERTIES.items():
        rows.append(f"| `{topic_key}` | (none: default empty) | {prop.kind} | {_cell(prop.doc)} |")
    return "\n".join(rows)


def walk(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """(path, command, context) for ``command`` and every subcommand below it, depth first."""
    ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name), ctx)


def cli_tree() -> list[tuple[tuple[str, ...], click.Command, click.Context]]:
    from cli.main import build_cli

    return list(walk(build_cli(), ("floodmark",), None))


def options_of(command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    """(option text, help) exactly as ``--help`` prints them."""
    out = []
    for param in command.get_params(ctx):
        if "--help" in param.opts:  # every command has -h/--help; the docs say so once
            continue
        record = param.get_help_record(ctx)
        if record is None or not record[0].strip():
            continue
        opt, text = record
        if isinstance(param, click.Argument) and not text:
            text = "Positional argument" + (" (required)." if param.required else ".")
        out.append((opt, text))
    return out


def arguments_of(command: click.Command) -> list[str]:
    return [
        p.human_readable_name for p in command.params if isinstance(p, click.Argument) and p.metavar != ""
    ]


def cli_section() -> str:
    parts: list[str] = []
    for path, command, ctx in cli_tree():
        name = " ".join(path)
        level = "###" if len(path) <= 2 else "####"
        help_text = " ".join(
            line.strip() for line in (command.help or "").strip().splitlines() if line.strip()
        )
        parts += [f"{level} `{name}`", "", help_text, "", "```", ctx.get_usage(), "```", ""]
        if isinstance(command, click.Group):
            subs = [
                s for s in command.list_commands(ctx) if not (command.get_command(ctx, s) or command).hidden
            ]
            parts += ["Subcommands: " + ", ".join(f"`{name} {s}`" for s in sorted(subs)), ""]
        options = options_of(command, ctx)
        if options:
            parts += ["| option | meaning |", "|---|---|"]
            parts += [f"| `{_cell(opt)}` | {_cell(text)} |" for opt, text in options]
            parts.append("")
    return "\n".join(parts).rstrip()


def kafka_apis_section() -> str:
    from broker.kafka_protocol.kafka_apis import build_kafka_apis

    rows = ["| API | key | versions |", "|---|---|---|"]
    for api in sorted(build_kafka_apis().values(), key=lambda a: a.key):
        name = "".join(word.capitalize() for word in api.key.name.split("_"))
        rows.append(f"| `{name}` | {int(api.key)} | {api.min_version}-{api.max_version} |")
    return "\n".join(rows)


def generated() -> dict[str, str]:
    return {
        "cli": cli_section(),
        "broker-config": broker_config_section(),
        "topic-config": topic_config_section(),
        "kafka-apis": kafka_apis_section(),
    }


def markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- BEGIN generated: {name} (by tests/unit/test_docs_config.py --write; do not edit by hand) -->",
        f"<!-- END generated: {name} -->",
    )


def write(path: Path = DOC) -> None:
    text = path.read_text()
    for name, content in generated().items():
        begin, end = markers(name)
        if begin not in text or end not in text:
            raise SystemExit(f"{path} lacks the markers of the {name!r} section:\n{begin}\n{end}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{content}\n{end}{tail}"
    path.write_text(text)


# -- the tests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doc() -> str:
    assert DOC.exists(), f"{DOC} is missing; run {REGENERATE}"
    return DOC.read_text()


def section(doc: str, name: str) -> str:
    begin, end = markers(name)
    assert begin in doc and end in doc, f"docs/operations.md lacks the {name!r} markers; run {REGENERATE}"
    return doc.split(begin, 1)[1].split(end, 1)[0]


def table_rows(text: str) -> dict[str, list[str]]:
    """First-column code span -> the row's cells, for every markdown table row in ``text``."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", match.group(2))]
    return rows


def test_every_broker_key_is_documented_with_its_type_and_default(doc: str) -> None:
    rows = table_rows(section(doc, "broker-config"))
    missing = [key for key in BROKER_PROPERTIES if key not in rows]
    assert not missing, f"broker keys missing from docs/operations.md: {missing}; run {REGENERATE}"
    for key, prop in BROKER_PROPERTIES.items():
        kind, default = rows[key][0], rows[key][1]
        assert (kind, default) == (prop.kind, fmt_default(prop)), (
            f"{key}: docs say type {kind}, default {default}; broker/config.py says {prop.kind}, "
            f"{fmt_default(prop)}; run {REGENERATE}"
        )
        assert rows[key][-1], f"{key} has no meaning in docs/operations.md: add it to MEANINGS"
    stale = sorted(set(rows) - set(BROKER_PROPERTIES))
    assert not stale, f"docs/operations.md documents keys broker/config.py no longer has: {stale}"


def test_every_broker_key_has_a_meaning() -> None:
    assert [key for key, prop in BROKER_PROPERTIES.items() if not meaning(prop)] == []


PRODUCT_PACKAGES = ("broker", "controller", "zk", "client", "cli", "devcluster", "chaos", "verify", "sim")
NOT_READ = re.compile(r"no (broker )?code reads it|is not read|accepted for compatibility", re.I)


def _product_source() -> tuple[str, str]:
    """(every product module but broker/config.py, broker/config.py with its declarations cut)."""
    texts = [
        path.read_text()
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "broker" / "config.py"
    ]
    config = (ROOT / "broker" / "config.py").read_text()
    return "\n".join(texts), config


def test_every_documented_broker_key_is_read_by_the_code_and_every_key_read_is_documented() -> None:
    """docs/operations.md once said ``auto.create.topics.enable`` was read by no broker code while
    broker/apis.py read it. A key counts as read when product code names it (``cfg["key"]``), uses
    its snake-case name (a typed config field), or reads it as a topic config's broker default;
    a meaning may not say a read key is unread, and every ``["a.b.c"]`` lookup names a known key."""
    source, config = _product_source()
    topic_defaults = set(TOPIC_TO_BROKER.values())
    unread = [
        key
        for key in BROKER_PROPERTIES
        if f'"{key}"' not in source
        and f'self["{key}"]' not in config
        and re.search(rf"\b{key.replace('.', '_')}\b", source) is None
        and key not in topic_defaults
    ]
    assert unread == [], f"documented broker keys that no product code reads: {unread}"
    wrongly_unread = [key for key, prop in BROKER_PROPERTIES.items() if NOT_READ.search(meaning(prop))]
    assert wrongly_unread == [], f"meanings that say a key is not read, yet it is: {wrongly_unread}"
    looked_up = set(re.findall(r'(?:config|cfg|self)\["([a-z0-9]+(?:\.[a-z0-9]+)+)"\]', source + config))
    known = set(BROKER_PROPERTIES) | set(TOPIC_TO_BROKER) | set(TOPIC_ONLY_PROPERTIES)
    assert sorted(looked_up - known) == [], "config keys read by the code but not documented"


def test_every_topic_override_is_documented(doc: str) -> None:
    rows = table_rows(section(doc, "topic-config"))
    for topic_key, broker_key in TOPIC_TO_BROKER.items():
        assert topic_key in rows, (
            f"topic config {topic_key} missing from docs/operations.md; run {REGENERATE}"
        )
        assert rows[topic_key][0] == f"`{broker_key}`", f"{topic_key}: default from {broker_key}"
    for topic_key in TOPIC_ONLY_PROPERTIES:
        assert topic_key in rows, (
            f"topic config {topic_key} missing from docs/operations.md; run {REGENERATE}"
        )


def test_every_cli_command_and_option_is_documented(doc: str) -> None:
    cli = section(doc, "cli")
    headings = [m.start() for m in re.finditer(r"^#{3,4} `floodmark", cli, re.M)] + [len(cli)]
    blocks = {}
    for start, stop in zip(headings, headings[1:], strict=False):
        block = cli[start:stop]
        blocks[re.match(r"#+ `([^`]+)`", block).group(1)] = block
    for path, command, ctx in cli_tree():
        name = " ".join(path)
        assert name in blocks, f"`{name}` is not documented in docs/operations.md; run {REGENERATE}"
        for opt, _ in options_of(command, ctx):
            flags = re.findall(r"(?<![\w-])(--?[\w-]+)", opt)
            for flag in flags:
                assert flag in blocks[name], f"`{name}` option {flag} is not documented; run {REGENERATE}"
        for argument in arguments_of(command):
            assert argument in blocks[name], (
                f"`{name}` argument {argument} is not documented; run {REGENERATE}"
            )


def stale_sections(doc: str) -> list[str]:
    """The generated sections whose text in ``doc`` differs from a fresh generation."""
    return [name for name, content in generated().items() if section(doc, name) != f"\n{content}\n"]


def test_every_generated_section_is_exactly_what_the_generator_writes(doc: str) -> None:
    stale = stale_sections(doc)
    assert not stale, f"docs/operations.md's generated sections {stale} are stale; run {REGENERATE}"


def test_a_stale_meaning_or_help_text_is_caught(doc: str) -> None:
    """What the name checks cannot see: a row whose key, type and default still match."""
    key = "replica.lag.time.max.ms"
    row = next(line for line in section(doc, "broker-config").splitlines() if line.startswith(f"| `{key}`"))
    assert stale_sections(doc.replace(row, row.replace("removed from the ISR", "dropped"))) == [
        "broker-config"
    ]
    help_text = "Show the version and exit."
    assert stale_sections(doc.replace(help_text, "Print the version.")) == ["cli"]


def test_generated_sections_fit_in_their_markers() -> None:
    for name, content in generated().items():
        begin, end = markers(name)
        assert begin not in content and end not in content, name


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_line_links_every_section(doc: str) -> None:
    """docs/operations.md's Contents once listed 9 of its 22 sections."""
    contents = doc[doc.index("Contents: ") : doc.index("\n\n", doc.index("Contents: "))]
    linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
    sections = [github_anchor(h) for h in re.findall(r"^## (.+)$", doc, re.M)]
    assert [a for a in sections if a not in linked] == []
    assert sorted(linked - set(sections)) == []


def _main(argv: list[str]) -> int:
    if argv == ["--write"]:
        write()
        print(f"rewrote the generated sections of {DOC}")
        return 0
    if argv:
        print(__doc__)
        return 2
    for name, content in generated().items():
        begin, end = markers(name)
        print(f"{begin}\n{content}\n{end}\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
