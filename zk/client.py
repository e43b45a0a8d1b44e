"""Kafka's reads and writes of the cluster's znodes (Kafka's KafkaZkClient), used by the
controller, the brokers, the local runner and the benchmarks alike: broker registration
(checkedEphemeralCreate), the controller's fenced multi-ops, the leader's conditional ISR write
(checkLeaderAndIsrZkData), notifications, topic config changes (AdminZkClient.changeTopicConfig)
and the /config/changes notifications, producer-id blocks and the top-level paths.
docs/design.md "The ZooKeeper client layer" says how each settles a write resent after a drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from client.types import TopicPartition
from zk.bridge import CheckOp, SetDataOp, ZkBridge, ZkOp
from zk.data import (
    PRODUCER_ID_BLOCK_SIZE,
    BrokerInfo,
    EndPoint,
    FileBudget,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ProducerIdBlock,
    ReplicaAssignment,
    decode_broker_registration,
    decode_controller,
    decode_full_topic_assignment,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic_assignment,
    decode_topic_config,
    decode_topic_id,
    encode_broker_registration,
    encode_config_change,
    encode_full_topic_assignment,
    encode_isr_change_notification,
    encode_log_dir_event,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic_config,
)
from zk.paths import (
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    ISR_CHANGE_PREFIX,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    LOG_DIR_EVENT_PREFIX,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK_PATH,
    broker_id_path,
    config_broker_path,
    config_change_path,
    config_topic_path,
    partition_state_path,
    topic_path,
)

log = logging.getLogger(__name__)


class ControllerMovedError(Exception):
    """A fenced write found /controller_epoch at another version: another controller won since."""


async def fenced_multi(zk: ZkBridge, epoch_zk_version: int, ops: Sequence[ZkOp]) -> list:
    """Commit ``ops`` only if /controller_epoch is still at ``epoch_zk_version``.

    Returns the results of ``ops`` (without the check). Raises ControllerMovedError when the
    check fails; any other failure is raised as :meth:`ZkBridge.multi` raises it, with
    ``op_index`` counted within ``ops``.
    """
    try:
        results = await zk.multi([CheckOp(CONTROLLER_EPOCH_PATH, epoch_zk_version), *ops])
    except (BadVersionError, NoNodeError) as exc:
        if getattr(exc, "op_index", None) == 0:
            raise ControllerMovedError(
                f"/controller_epoch is no longer at version {epoch_zk_version}: another controller was elected"
            ) from None
        exc.op_index -= 1
        raise
    except Exception as exc:
        if getattr(exc, "op_index", None) is not None:
            exc.op_index -= 1
        raise
    return results[1:]


async def get_broker(zk: ZkBridge, broker_id: int) -> BrokerInfo | None:
    got = await zk.get(broker_id_path(broker_id))
    if got is None:
        return None
    data, stat = got
    return decode_broker_registration(data, broker_id, stat.czxid)


async def get_partition_state(zk: ZkBridge, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
    got = await zk.get(partition_state_path(tp.topic, tp.partition))
    if got is None:
        return None
    data, stat = got
    return decode_partition_state(data, stat.version)


async def get_topic_assignment(zk: ZkBridge, topic: str) -> dict[int, list[int]] | None:
    got = await zk.get(topic_path(topic))
    return None if got is None else decode_topic_assignment(got[0])


async def get_full_topic_assignment(zk: ZkBridge, topic: str) -> dict[int, ReplicaAssignment] | None:
    """Each partition's replicas with the adding and removing replicas of a move in progress
    (Kafka's KafkaZkClient.getFullReplicaAssignmentForTopics); None: no such topic."""
    got = await zk.get(topic_path(topic))
    return None if got is None else decode_full_topic_assignment(got[0])


async def get_topic_id(zk: ZkBridge, topic: str) -> str | None:
    """The topic's id (KIP-516) from /brokers/topics/<topic>; None: no such topic, or no id yet."""
    got = await zk.get(topic_path(topic))
    return None if got is None else decode_topic_id(got[0])


async def set_topic_id(
    zk: ZkBridge, topic: str, data: bytes, version: int, epoch_zk_version: int, topic_id: str
) -> None:
    """Kafka's ``KafkaZkClient.setTopicIds`` for one topic: rewrite the topic znode ``data`` (read
    at ``version``) as version 3 with ``topic_id``, fenced by the controller epoch and, unlike
    Kafka's MatchAnyVersion, conditional on ``version``: a partition added or a reassignment
    written since the read is never overwritten (BadVersionError: read again)."""
    encoded = encode_full_topic_assignment(decode_full_topic_assignment(data), topic_id)  # KIP-455 kept
    await fenced_multi(zk, epoch_zk_version, [SetDataOp(topic_path(topic), encoded, version)])


#: The version of an entity config znode that does not exist (an expected version for
#: :func:`change_topic_config` and :func:`change_broker_config`: create it, only if still absent).
ABSENT = -1


class ConfigChanged(Exception):
    """An entity config znode changed after the caller read it (a conditional write refused)."""


async def get_topic_config(zk: ZkBridge, topic: str) -> dict[str, str]:
    return (await get_topic_config_versioned(zk, topic))[0]


async def get_topic_config_versioned(zk: ZkBridge, topic: str) -> tuple[dict[str, str], int]:
    """The topic's overrides and their znode's version (:data:`ABSENT` when there is none)."""
    return await _get_entity_config(zk, config_topic_path(topic))


async def set_topic_config(
    zk: ZkBridge, topic: str, config: dict[str, str], version: int | None = None
) -> None:
    """Write /config/topics/<t> {"version":1,"config":{...}} whatever it held, creating it when
    absent (Kafka's KafkaZkClient.setOrCreateEntityConfigs); with ``version``, only if the znode
    is still at that version (:func:`_write_if_unchanged`)."""
    await _write_entity_config(zk, config_topic_path(topic), encode_topic_config(config), version)


async def get_broker_config(zk: ZkBridge, entity: str) -> dict[str, str]:
    """/config/brokers/<id> or /config/brokers/<default> (KIP-226's dynamic broker configs)."""
    return (await get_broker_config_versioned(zk, entity))[0]


async def get_broker_config_versioned(zk: ZkBridge, entity: str) -> tuple[dict[str, str], int]:
    return await _get_entity_config(zk, config_broker_path(entity))


async def change_broker_config(
    zk: ZkBridge, entity: str, config: dict[str, str], version: int | None = None
) -> None:
    """Replace a broker entity's dynamic configs and tell the brokers (Kafka's
    AdminZkClient.changeBrokerConfig: the znode, then ``brokers/<entity>`` in /config/changes);
    with ``version``, only if the znode is still at that version."""
    await _write_entity_config(zk, config_broker_path(entity), encode_topic_config(config), version)
    await create_config_change_notification(zk, f"brokers/{entity}")


async def _get_entity_config(zk: ZkBridge, path: str) -> tuple[dict[str, str], int]:
    got = await zk.get(path)
    return ({}, ABSENT) if got is None else (decode_topic_config(got[0]), got[1].version)


async def _write_entity_config(zk: ZkBridge, path: str, data: bytes, version: int | None) -> None:
    if version is None:
        await _set_or_create(zk, path, data)
    else:
        await _write_if_unchanged(zk, path, data, version)


async def _write_if_unchanged(zk: ZkBridge, path: str, data: bytes, version: int) -> None:
    """Set ``path`` if it is still at ``version``, or create it if it is still :data:`ABSENT`;
    else :class:`ConfigChanged`, for the caller to read it again (docs/design.md "Incremental
    changes without lost updates"). A write the bridge resent after a drop that had landed the
    first time also ends here (BadVersion, NodeExists): the caller re-reads, finds its own
    change, and writes it again, which changes nothing."""
    try:
        if version == ABSENT:
            await zk.create(path, data, makepath=True)
        else:
            await zk.set(path, data, version)
    except (BadVersionError, NoNodeError, NodeExistsError) as exc:
        raise ConfigChanged(f"{path} changed since it was read ({type(exc).__name__})") from None


async def _set_or_create(zk: ZkBridge, path: str, data: bytes) -> None:
    for _ in range(3):
        try:
            await zk.set(path, data)
            return
        except NoNodeError:
            pass
        try:
            await zk.create(path, data, makepath=True)
            return
        except NodeExistsError:
            continue  # created meanwhile (or our resent create landed): set it
    raise RuntimeError(f"cannot write {path}: it keeps appearing and disappearing")


async def create_config_change_notification(zk: ZkBridge, entity_path: str) -> str:
    """A persistent sequential /config/changes/config_change_<seq> naming ``entity_path`` (e.g.
    ``topics/foo``) for every broker's config change listener (Kafka's
    KafkaZkClient.createConfigChangeNotification)."""
    data = encode_config_change(entity_path)
    path = config_change_path(CONFIG_CHANGE_PREFIX)
    try:
        return await zk.create(path, data, sequence=True)
    except NoNodeError:
        await zk.ensure_path(CONFIG_CHANGES_PATH)
        return await zk.create(path, data, sequence=True)


async def change_topic_config(
    zk: ZkBridge, topic: str, config: dict[str, str], version: int | None = None
) -> None:
    """Replace the topic's overrides and tell the brokers (Kafka's AdminZkClient.changeTopicConfig:
    the config znode first, then the notification, so a broker that reads the notification reads
    the new config). Validation is the caller's. With ``version``, only if the znode is still at
    that version (else :class:`ConfigChanged`)."""
    await set_topic_config(zk, topic, config, version)
    await create_config_change_notification(zk, f"topics/{topic}")


async def get_config_change_notifications(
    zk: ZkBridge, watch: Callable[[WatchedEvent], None] | None = None
) -> list[str]:
    """The names under /config/changes in sequence order, registering ``watch`` on the children
    (the path is created first when absent: a watch on a missing node's children is not set)."""
    children = await zk.get_children(CONFIG_CHANGES_PATH, watch=watch)
    if children is None:
        await zk.ensure_path(CONFIG_CHANGES_PATH)
        children = await zk.get_children(CONFIG_CHANGES_PATH, watch=watch)
    return sorted(c for c in children or [] if c.startswith(CONFIG_CHANGE_PREFIX))


async def get_config_change(zk: ZkBridge, name: str) -> tuple[bytes, int] | None:
    """A notification's data and creation time (ms), or None when it is gone."""
    got = await zk.get(config_change_path(name))
    return None if got is None else (got[0], got[1].ctime)


async def get_config_change_ctime(zk: ZkBridge, name: str) -> int | None:
    stat = await zk.exists(config_change_path(name))
    return None if stat is None else stat.ctime


async def delete_config_change(zk: ZkBridge, name: str) -> None:
    """Delete one notification; one already gone (another broker purged it) is no error."""
    with contextlib.suppress(NoNodeError):
        await zk.delete(config_change_path(name))


async def get_controller_id(zk: ZkBridge) -> int:
    """The active controller's broker id, or -1 when there is none."""
    got = await zk.get(CONTROLLER_PATH)
    if got is None:
        return -1
    try:
        return decode_controller(got[0])
    except (ValueError, KeyError):
        log.error("cannot parse %s: %r", CONTROLLER_PATH, got[0])
        return -1


async def register_broker(
    zk: ZkBridge,
    broker_id: int,
    endpoints: Sequence[EndPoint],
    time_ms: int,
    timeout: float | None = None,
    file_budget: FileBudget | None = None,
) -> int:
    """Create the ephemeral /brokers/ids/<id> holding every advertised ``endpoints`` (KIP-103)
    and the broker's ``file_budget``, and return its czxid (the broker epoch).

    If the znode exists and belongs to this session, that is success. If it belongs to an older
    session of the same broker (a quick restart), wait for ZooKeeper to expire that session, at
    most ``timeout`` seconds (default: 1.5 x the session timeout); another live broker with our
    id is still there after that and the NodeExistsError is raised.
    """
    path = broker_id_path(broker_id)
    data = encode_broker_registration(endpoints, time_ms, file_budget=file_budget)
    await zk.ensure_path(BROKER_IDS_PATH)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout if timeout is not None else 1.5 * zk.session_timeout_ms / 1000.0)
    while True:
        try:
            await zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            stat = await zk.exists(path)
            if stat is None:
                continue
            if stat.ephemeralOwner == zk.session_id:
                return stat.czxid
            if loop.time() >= deadline:
                raise
            log.warning(
                "%s exists, owned by session 0x%x (not ours, 0x%x); waiting for it to expire",
                path,
                stat.ephemeralOwner,
                zk.session_id or 0,
            )
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))
            continue
        stat = await zk.exists(path)
        return stat.czxid if stat is not None else -1


async def update_leader_and_isr(
    zk: ZkBridge, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
) -> LeaderAndIsr | None:
    """The partition leader's ISR change (Kafka's ReplicationUtils.updateLeaderAndIsr;
    docs/design.md "ISR management"):
    write the state znode conditional on ``leader_and_isr.zk_version``. Returns the written state
    with its new zkVersion, or None when the znode moved on (BADVERSION) or is gone: the caller
    must keep its in-memory ISR unchanged and wait for the controller's LeaderAndIsr.

    On BADVERSION the znode is read (Kafka's checkLeaderAndIsrZkData): when it holds exactly this
    state, the write is ours, one that landed although its answer was lost and is now re-sent,
    and it counts as written with the znode's version. Any other state, even from the same
    leader epoch, is someone else's and the write failed. ConnectionLoss and other ZooKeeper
    errors are raised: the outcome is unknown, and the caller re-sends the identical write."""
    path = partition_state_path(tp.topic, tp.partition)
    data = encode_partition_state(LeaderIsrAndControllerEpoch(leader_and_isr, controller_epoch))
    try:
        stat = await zk.set(path, data, leader_and_isr.zk_version)
    except BadVersionError:
        return await resolve_leader_and_isr_write(zk, tp, leader_and_isr, controller_epoch)
    except NoNodeError:
        return None
    return leader_and_isr.with_zk_version(stat.version)


async def resolve_leader_and_isr_write(
    zk: ZkBridge, tp: TopicPartition, written: LeaderAndIsr, controller_epoch: int
) -> LeaderAndIsr | None:
    """Settle a state-znode write whose outcome is unknown: the bridge re-sent it after a lost
    answer and the resend met BADVERSION (a conditional set) or NODEEXISTS (a create), which is
    also what a write that lost a race meets. Read the znode: when it holds exactly ``written``
    with ``controller_epoch`` (:func:`holds_leader_and_isr`), the first send landed, and the
    write is returned with the znode's zkVersion for the caller to carry on as if answered
    (Kafka's checkLeaderAndIsrZkData). None: someone else's state, or no znode; the write failed.
    Used by the leader's ISR write and by every controller state write alike."""
    current = await get_partition_state(zk, tp)
    if current is not None and holds_leader_and_isr(current, written, controller_epoch):
        return current.leader_and_isr
    return None


def holds_leader_and_isr(
    current: LeaderIsrAndControllerEpoch, written: LeaderAndIsr, controller_epoch: int
) -> bool:
    """Whether the state znode holds what a leader wrote: the same leader, leader epoch, ISR (in
    order) and controller epoch, whatever its zkVersion (Kafka's checkLeaderAndIsrZkData)."""
    held, epoch = current.leader_and_isr, current.controller_epoch
    return (held.leader, held.leader_epoch, held.isr, epoch) == (
        written.leader,
        written.leader_epoch,
        written.isr,
        controller_epoch,
    )


async def propagate_isr_change(zk: ZkBridge, partitions: Iterable[TopicPartition]) -> str:
    """Announce ISR changes to the controller: a sequential /isr_change_notification/isr_change_<seq>."""
    data = encode_isr_change_notification(partitions)
    path = f"{ISR_CHANGE_NOTIFICATION_PATH}/{ISR_CHANGE_PREFIX}"
    try:
        return await zk.create(path, data, sequence=True)
    except NoNodeError:
        await zk.ensure_path(ISR_CHANGE_NOTIFICATION_PATH)
        return await zk.create(path, data, sequence=True)


async def propagate_log_dir_event(zk: ZkBridge, broker_id: int) -> str:
    """KIP-112: tell the controller that a log dir of ``broker_id`` went offline. The controller
    answers with LeaderAndIsr for the broker's replicas and learns from the per-partition
    KAFKA_STORAGE_ERRORs which of them to take offline."""
    data = encode_log_dir_event(broker_id)
    path = f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}"
    try:
        return await zk.create(path, data, sequence=True)
    except NoNodeError:
        await zk.ensure_path(LOG_DIR_EVENT_NOTIFICATION_PATH)
        return await zk.create(path, data, sequence=True)


async def allocate_producer_id_block(
    zk: ZkBridge, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE, max_attempts: int = 100
) -> ProducerIdBlock:
    """Claim the next ``block_size`` producer ids for ``broker_id`` (Kafka's
    ZkProducerIdManager.getNewProducerIdBlock): read /latest_producer_id_block, write the block
    after it conditional on the znode version, and start over when another broker won the race.
    Blocks never overlap, so producer ids are unique cluster-wide."""
    for _ in range(max_attempts):
        got = await zk.get(PRODUCER_ID_BLOCK_PATH)
        start = 0 if got is None or not got[0] else decode_producer_id_block(got[0]).block_end + 1
        if start > 2**63 - 1 - block_size:
            raise RuntimeError("Have exhausted all producerIds.")
        block = ProducerIdBlock(broker_id, start, start + block_size - 1)
        try:
            if got is None:
                await zk.create(PRODUCER_ID_BLOCK_PATH, encode_producer_id_block(block), makepath=True)
            else:
                await zk.set(PRODUCER_ID_BLOCK_PATH, encode_producer_id_block(block), got[1].version)
        except (NodeExistsError, BadVersionError):
            # Lost the race, or a resent write whose first try landed: claim the next block. A
            # landed block is never handed out then (1000 ids skipped), but adopting it by its
            # data, as Kafka's checkProducerIdBlockZkData does, would hand one block out twice
            # when claims of one broker run concurrently (docs/design.md "The ZooKeeper client layer").
            continue
        log.info("broker %d claimed producer id block %d..%d", broker_id, block.block_start, block.block_end)
        return block
    raise RuntimeError(f"could not claim a producer id block in {max_attempts} attempts: too much contention")


async def create_persistent_paths(zk: ZkBridge) -> None:
    """The top-level persistent paths (Kafka's createTopLevelPaths); harmless when they exist."""
    await asyncio.gather(*(zk.ensure_path(p) for p in PERSISTENT_PATHS))


async def get_or_create_cluster_id(zk: ZkBridge, candidate: str | None = None) -> str:
    """The cluster id (Kafka's getOrGenerateClusterId): the first broker writes a new one, every
    later broker (and a loser of the race) reads it."""
    existing = await zk.get(CLUSTER_ID_PATH)
    if existing is None:
        data = json.dumps({"version": "1", "id": candidate or uuid.uuid4().hex[:22]}).encode()
        # another broker may win the race (or our resent create landed): read what is there
        with contextlib.suppress(NodeExistsError):
            await zk.create(CLUSTER_ID_PATH, data, makepath=True)
        existing = await zk.get(CLUSTER_ID_PATH)
    return json.loads(existing[0])["id"]


async def get_live_broker_ids(zk: ZkBridge) -> list[int]:
    """The registered broker ids, sorted."""
    return sorted(int(child) for child in (await zk.get_children(BROKER_IDS_PATH) or []) if child.isdigit())


async def topic_exists(zk: ZkBridge, topic: str) -> bool:
    return await zk.exists(topic_path(topic)) is not None
