"""Topic administration through ZooKeeper, usable from any broker (Kafka's AdminZkClient;
docs/architecture.md "ZooKeeper layout" lists the znodes it writes).

Creating a topic is writing its znodes; the controller's watch on /brokers/topics does the rest
(leaders, ISRs, LeaderAndIsr). Here:

* :func:`validate_topic_name`: Kafka's ``Topic.validate``;
* :func:`validate_assignment`: a replica assignment must be 0..n-1, the same replica count for
  every partition, no broker twice in one partition, only known brokers;
* :func:`create_topic`: /config/topics/<t> and /brokers/topics/<t> in one multi-op, so a topic
  never exists without its config and a failed create never overwrites another topic's config;
* :func:`delete_topic`: marks the topic under /admin/delete_topics, for the controller;
* :func:`add_partitions`: appends partitions to an existing topic (a partition count only grows:
  Kafka never removes partitions), refused while a partition of that topic is being reassigned
  (Kafka 3.7's ZkAdminManager.createPartitions);
* :func:`check_file_budget`: both (and reassignments) refuse, with POLICY_VIOLATION as Kafka's
  partition limits do and before anything is written, new replicas that would take a broker past
  the budget it published in /brokers/ids/<id>: its ``max.broker.partitions`` (KIP-578), or the
  replicas its open-file limit holds when replicas cost descriptors (an older broker; docs/design.md
  "Open files at scale (issue 25)"). Its count is the replicas assigned in /brokers/topics: two
  creations racing each other can both pass it; the broker then hosts them (its open files are
  bounded by its segment file cache, not by its replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.topic_id import random_uuid
from controller import placement
from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.client import get_broker, get_topic_assignment
from zk.data import (
    FileBudget,
    decode_full_topic_assignment,
    decode_topic_id,
    encode_topic_assignment,
    encode_topic_config,
)
from zk.paths import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    DELETE_TOPICS_PATH,
    config_topic_path,
    delete_topic_path,
    topic_path,
)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate, with its messages. Raises KafkaError(INVALID_TOPIC_EXCEPTION)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL.fullmatch(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


def has_collision(a: str, b: str) -> bool:
    """'.' and '_' map to the same metric names in Kafka, so topics differing only there collide."""
    return a.replace(".", "_") == b.replace(".", "_")


def validate_assignment(
    assignment: dict[int, Sequence[int]],
    live_broker_ids: Collection[int] | None = None,
    first_partition: int = 0,
    replication_factor: int | None = None,
) -> None:
    """Raises KafkaError(INVALID_REPLICA_ASSIGNMENT) for an assignment Kafka would refuse."""
    if not assignment:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partitions should be a consecutive {first_partition}-based integer sequence, got {sorted(assignment)}",
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas"
        )
    if 0 in sizes:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor is not None and sizes != {replication_factor}:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Inconsistent replication factor between partitions, partition 0 has {replication_factor}",
        )
    for partition, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica assignment found: partition {partition} -> {list(replicas)}",
            )
    if live_broker_ids is not None:
        unknown = sorted({b for replicas in assignment.values() for b in replicas} - set(live_broker_ids))
        if unknown:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
            )


def file_budget_violations(
    budgets: Mapping[int, FileBudget], hosted: Mapping[int, int], new: Mapping[int, int]
) -> list[str]:
    """Why adding ``new`` replicas (per broker) to the ``hosted`` ones would take a broker past
    its published budget; empty when none would. Brokers without a budget are not checked."""
    problems = []
    for broker, added in sorted(new.items()):
        budget = budgets.get(broker)
        total = hosted.get(broker, 0) + added
        if budget is None or added <= 0 or total <= budget.max_replicas:
            continue
        by_files = budget.max_replicas_by_files
        if by_files is None or budget.max_partitions <= by_files:
            limit = f"max.broker.partitions={budget.max_partitions}"
        else:
            limit = (
                f"file budget of {by_files} replicas (open-file limit {budget.open_files_limit}, "
                f"reserve {budget.reserve}, segment files {budget.segment_files}, "
                f"{budget.files_per_replica} files per replica)"
            )
        problems.append(
            f"broker {broker} would hold {total} replicas ({hosted.get(broker, 0)} assigned + "
            f"{added} new), past its {limit}"
        )
    return problems


async def check_file_budget(zk: ZkBridge, new_assignment: Mapping[int, Sequence[int]]) -> None:
    """Refuse ``new_assignment`` with POLICY_VIOLATION when it would take a registered broker past
    its published budget (``max.broker.partitions``, or an older broker's files), counting every
    replica assigned in /brokers/topics (topics being deleted too: their logs are still there)."""
    new = Counter(b for replicas in new_assignment.values() for b in replicas)
    brokers = await asyncio.gather(*(get_broker(zk, b) for b in sorted(new)))
    budgets = {info.id: info.file_budget for info in brokers if info is not None and info.file_budget}
    if not budgets:
        return
    assignments = await asyncio.gather(*(get_topic_assignment(zk, t) for t in await all_topics(zk)))
    hosted = Counter(b for a in assignments if a for replicas in a.values() for b in replicas if b in budgets)
    problems = file_budget_violations(budgets, hosted, new)
    if problems:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "; ".join(problems))


async def live_broker_ids(zk: ZkBridge) -> list[int]:
    children = await zk.get_children(BROKER_IDS_PATH) or []
    return sorted(int(c) for c in children)


async def all_topics(zk: ZkBridge) -> list[str]:
    return sorted(await zk.get_children(BROKER_TOPICS_PATH) or [])


async def create_topic(
    zk: ZkBridge,
    topic: str,
    assignment: dict[int, list[int]],
    configs: dict[str, str] | None = None,
    topic_id: str | None = None,
) -> str:
    """Write /config/topics/<t> {"version":1,"config":{...}} and /brokers/topics/<t> atomically,
    the latter with the new topic's id (KIP-516: Kafka's ``createTopicWithAssignment`` writes a
    random ``Uuid`` at creation; ``topic_id`` None draws one). Returns the id.

    Raises KafkaError: INVALID_TOPIC_EXCEPTION (bad name, collision), TOPIC_ALREADY_EXISTS
    (present, or marked for deletion), INVALID_REPLICA_ASSIGNMENT. Broker liveness is the
    caller's to check (pass the ids to :func:`validate_assignment`), as Kafka's admin path does.
    """
    validate_topic_name(topic)
    validate_assignment(assignment)
    await zk.ensure_path(BROKER_TOPICS_PATH)
    await zk.ensure_path(CONFIG_TOPICS_PATH)
    if await zk.exists(topic_path(topic)) is not None:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
    if await zk.exists(delete_topic_path(topic)) is not None:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' is marked for deletion.")
    if any(c in topic for c in "._"):
        colliding = [t for t in await all_topics(zk) if t != topic and has_collision(topic, t)]
        if colliding:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{topic}' collides with existing topics: {', '.join(colliding)}",
            )
    await check_file_budget(zk, assignment)
    topic_id = topic_id or random_uuid()
    config_data = encode_topic_config(configs or {})
    for _ in range(3):
        stale_config = await zk.exists(config_topic_path(topic))
        config_op = (
            CreateOp(config_topic_path(topic), config_data)
            if stale_config is None
            else SetDataOp(config_topic_path(topic), config_data, stale_config.version)
        )
        try:
            await zk.multi(
                [config_op, CreateOp(topic_path(topic), encode_topic_assignment(assignment, topic_id))]
            )
            return topic_id
        except NodeExistsError as exc:
            if getattr(exc, "op_index", None) == 1:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.") from None
        except (BadVersionError, NoNodeError):
            pass  # the config znode changed under us: look again
    raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' is being created concurrently.")


async def create_topic_with_placement(
    zk: ZkBridge,
    topic: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str] | None,
    rng: random.Random,
) -> dict[int, list[int]]:
    """Place replicas on the live brokers (AdminUtils.assignReplicasToBrokers), then
    :func:`create_topic`. Returns the assignment."""
    validate_topic_name(topic)
    assignment = placement.assign_replicas(await live_broker_ids(zk), num_partitions, replication_factor, rng)
    await create_topic(zk, topic, assignment, configs, random_uuid(rng.randbytes))
    return assignment


async def delete_topic(zk: ZkBridge, topic: str) -> None:
    """Mark a topic for deletion; the controller (delete.topic.enable) does the work."""
    if await zk.exists(topic_path(topic)) is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
    await zk.ensure_path(DELETE_TOPICS_PATH)
    with contextlib.suppress(NodeExistsError):  # already marked: deleting twice is deleting once
        await zk.create(delete_topic_path(topic))


async def add_partitions(
    zk: ZkBridge,
    topic: str,
    new_total: int,
    rng: random.Random,
    assignment_of_new: Sequence[Sequence[int]] | None = None,
    validate_only: bool = False,
) -> dict[int, list[int]]:
    """Grow a topic to ``new_total`` partitions (Kafka's AdminZkClient.addPartitions behind
    CreatePartitions, KIP-195; a count never shrinks). The new partitions are placed continuing the
    existing layout unless ``assignment_of_new`` gives their replica lists, in partition order.
    Everything is checked before anything is written; ``validate_only`` writes nothing. Returns
    the new partitions' assignment."""
    got = await zk.get(topic_path(topic))
    if got is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
    if await zk.exists(delete_topic_path(topic)):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{topic}' is marked for deletion.")
    data, stat = got
    full = decode_full_topic_assignment(data)
    if any(a.is_being_reassigned for a in full.values()):
        # Kafka 3.7's ZkAdminManager.createPartitions: refused only while a partition of this
        # topic is being reassigned (its topic znode names adding or removing replicas), which
        # would race the controller's writes of the same znode; moves of other topics, and
        # requests the controller has not started, do not stop it (the write below is
        # conditional on the version read: a move started since makes it fail)
        raise KafkaError(
            ErrorCode.REASSIGNMENT_IN_PROGRESS,
            f"A partition reassignment is in progress for the topic '{topic}'.",
        )
    existing = {p: list(a.replicas) for p, a in full.items()}
    if new_total < len(existing):
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {len(existing)} partitions, which is higher than the requested {new_total}.",
        )
    if new_total == len(existing):
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {len(existing)} partitions.")
    brokers = await live_broker_ids(zk)
    rf = len(existing[0])
    added = new_total - len(existing)
    if assignment_of_new is None:
        start = placement.start_index_for_new_partitions(brokers, existing[0])
        new = placement.assign_replicas(
            brokers, added, rf, rng, fixed_start_index=start, start_partition_id=len(existing)
        )
    else:
        if len(assignment_of_new) != added:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {added} but {len(assignment_of_new)} "
                "assignments provided.",
            )
        new = {len(existing) + i: list(replicas) for i, replicas in enumerate(assignment_of_new)}
    validate_assignment(new, brokers, first_partition=len(existing), replication_factor=rf)
    await check_file_budget(zk, new)
    if validate_only:
        return new
    try:
        merged = encode_topic_assignment({**existing, **new}, decode_topic_id(data))  # the id stays
        await zk.set(topic_path(topic), merged, stat.version)
    except BadVersionError:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Topic '{topic}' changed concurrently."
        ) from None
    return new
