"""Replica fetchers: followers pull from leaders (KIP-101, KIP-279;
docs/guarantees.md "No acknowledged write lost, no divergence").

One :class:`ReplicaFetcher` per source broker (Kafka's ReplicaFetcherThread over
AbstractFetcherThread) fetches every partition this broker follows from that leader in a single
FETCH (replica id, fetch offset = our LEO, current leader epoch, max bytes, long-poll wait).
Before a partition's first fetch from a new leader it is truncated: by the leader-epoch exchange
(OffsetsForLeaderEpoch, repeated per KIP-279) or, under the unsafe ``high-watermark`` policy, to
the local HW. As in Kafka's ``doWork`` (``maybeTruncate`` then ``maybeFetch``), each round sends
one OffsetsForLeaderEpoch for the partitions still truncating and one FETCH for the others: a
partition's truncation never holds up another's fetching, and a partition that got an error is
left out until ``replica.fetch.backoff.ms`` has passed (Kafka's PartitionFetchState delay).

Every answer is applied only to the fetch state it was asked for (Kafka compares the current
leader epoch, under ``partitionMapLock``): a LeaderAndIsr that arrives while a request is in
flight replaces the partition's :class:`FetchState`, and the old answer is dropped. LeaderAndIsr
adds and removes partitions through :class:`~broker.replica.fetcher_manager.ReplicaFetcherManager`
(Kafka's AbstractFetcherManager), which keeps one fetcher per leader and endpoint.

Issue 25's free-space floor (broker/log/disk_space.py; docs/design.md "Disk space as a budget
(issue 25)"): a partition whose log dir is below its floor is left out of the FETCH until space
returns, as a throttled one is; the leader's lag rules then take it out of the ISR, and it
catches up and rejoins once fetching again. The group coordinator's partitions are exempt, as
their leader's appends are.

KIP-73's follower throttle: while this broker's FollowerReplication rate is over its bound, a
throttled partition that is not in sync (its last answer showed a lag) is left out of the FETCH,
and the bytes fetched for throttled partitions are counted (Kafka's shouldFollowerThrottle).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.coordinator.group_metadata_manager import GROUP_METADATA_TOPIC
from broker.replica.fetch_session import FetchSessionHandler, by_topic
from broker.replica.truncation import (
    TruncationPolicy,
    truncation_by_high_watermark,
    truncation_by_leader_epoch,
)
from client.connection import BrokerConnection
from client.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.log import Log
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class LeaderConnection(Protocol):
    """What a fetcher needs of its connection to the leader (a :class:`BrokerConnection`)."""

    @property
    def is_open(self) -> bool: ...

    async def request(self, api_key: ApiKey, body: dict, timeout: float = 30.0) -> dict: ...

    def close(self) -> None: ...


#: Opens a connection to ``(host, port)`` with ``client_id``; tests pass an in-process network.
ConnectionFactory = Callable[[str, int, str], Awaitable[LeaderConnection]]


async def open_connection(host: str, port: int, client_id: str) -> LeaderConnection:
    return await BrokerConnection.open(host, port, client_id=client_id)


@dataclass
class FetchState:
    """One partition's place in its fetcher (Kafka's PartitionFetchState). A LeaderAndIsr always
    makes a new one: an answer to a request sent for an older one is stale."""

    leader_epoch: int
    truncating: bool = True  # a new leader: truncate before the first fetch
    delayed_until: float = 0.0  # loop time before which nothing is sent for it (after an error)
    lag: int = -1  # the leader's HW minus our LEO at the last answer (-1: none yet), Kafka's lag

    @property
    def in_sync(self) -> bool:
        """Kafka's FetcherLagStats.isReplicaInSync: no lag at the last answer."""
        return self.lag <= 0

    def ready(self, now: float) -> bool:
        return self.delayed_until <= now


class ReplicaFetcher:
    def __init__(
        self, replica_manager: ReplicaManager, leader: dict, connect: ConnectionFactory = open_connection
    ) -> None:
        self.rm = replica_manager
        self._open = connect
        self.config = replica_manager.config
        self.leader_id: int = leader["id"]
        self.leader_host, self.leader_port = leader["host"], leader["port"]
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.policy = TruncationPolicy(self.config["replica.truncation.policy"])
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._connection: LeaderConnection | None = None
        self.session = FetchSessionHandler()  # KIP-227: what the leader's fetch session holds
        self.name = f"ReplicaFetcher-{self.rm.broker_id}-from-{self.leader_id}"

    # -- membership ------------------------------------------------------------------------------
    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.adopt(tp, FetchState(leader_epoch))

    def adopt(self, tp: TopicPartition, state: FetchState) -> None:
        self.partitions[tp] = state
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def detach(self) -> dict[TopicPartition, FetchState]:
        """Give up every partition (to a fetcher for the leader's new endpoint)."""
        partitions, self.partitions = self.partitions, {}
        return partitions

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._connection is not None:
            self._connection.close()

    # -- the loop ---------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = self.config["replica.fetch.backoff.ms"] / 1000
        while True:
            self._wakeup.clear()  # set again by add() during any await below
            self._drop_offline()
            if not self.partitions:
                await self._wakeup.wait()
                continue
            try:
                connection = await self._connect()
                truncated = await self._maybe_truncate(connection)
                fetched = await self._fetch(connection)
                if not (truncated or fetched):
                    await self._idle(backoff)
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                    # A log dir went offline under us (truncating, or out-of-range handling): its
                    # partitions leave now, and the loop yields and backs off like any error path,
                    # so the broker's log-dir failure handling (queued on this loop) gets to run.
                    log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                    self._drop_offline()
                    await asyncio.sleep(backoff)
                    continue
                log.info("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                self._drop_connection()
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("%s: unexpected failure; retrying in %.1fs", self.name, backoff)
                self._drop_connection()
                await asyncio.sleep(backoff)

    async def _idle(self, backoff: float) -> None:
        """Nothing to send: wait for a new partition, the end of the first backoff, or at most
        the backoff (Kafka's ``partitionMapCond.await(fetchBackOffMs)``)."""
        now = asyncio.get_running_loop().time()
        timeout = min(
            [backoff, *(s.delayed_until - now for s in self.partitions.values() if not s.ready(now))]
        )
        # asyncio.timeout rather than wait_for: on 3.11 wait_for can swallow stop()'s cancellation.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.001)):
                await self._wakeup.wait()

    def _owns(self, tp: TopicPartition, state: FetchState, log_: Log | None = None) -> bool:
        """``state`` is still ``tp``'s fetch state here (and ``log_`` its log), and the replica
        manager still has ``tp`` following this leader at that epoch: no LeaderAndIsr made this
        broker its leader, moved it to another leader or epoch, or removed it since a request for
        it was sent."""
        partition = self.rm.get_partition(tp)
        return (
            self.partitions.get(tp) is state
            and (log_ is None or self.rm.get_log(tp) is log_)
            and partition is not None
            and not partition.is_leader
            and partition.leader_id == self.leader_id
            and partition.leader_epoch == state.leader_epoch
        )

    def _drop_offline(self) -> None:
        """KIP-112: a partition whose log dir went offline is fetched no more. The log says so at
        once; ``offline_partitions`` only once the broker's failure handling has run."""
        for tp in [tp for tp in self.partitions if self._offline(tp)]:
            log.warning("%s: %s-%s is on an offline log dir; no longer fetching it", self.name, *tp)
            self.partitions.pop(tp, None)

    def _offline(self, tp: TopicPartition) -> bool:
        if tp in self.rm.offline_partitions:
            return True
        log_ = self.rm.get_log(tp)
        return log_ is not None and log_.is_offline

    async def _connect(self) -> LeaderConnection:
        if self._connection is None or not self._connection.is_open:
            self.session.reset()  # a new connection starts with a full fetch
            self._connection = await self._open(
                self.leader_host, self.leader_port, f"broker-{self.rm.broker_id}-fetcher"
            )
        return self._connection

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _timeout(self) -> float:
        return (self.config["replica.socket.timeout.ms"] + self.config["replica.fetch.wait.max.ms"]) / 1000

    # -- truncation (KIP-101/279) ------------------------------------------------------------------------
    def _truncation_pending(self) -> dict[TopicPartition, FetchState]:
        """Partitions in truncation and not backing off (Kafka's PartitionFetchState.isTruncating)."""
        now = asyncio.get_running_loop().time()
        return {tp: s for tp, s in self.partitions.items() if s.truncating and s.ready(now)}

    async def _maybe_truncate(self, connection: LeaderConnection) -> bool:
        """One truncation round (Kafka's maybeTruncate); True if any partition took part. A
        partition whose truncation completes is fetched in this same round."""
        pending = self._truncation_pending()
        if not pending:
            return False
        if self.policy is TruncationPolicy.HIGH_WATERMARK:
            for tp, state in pending.items():
                log_ = self.rm.get_log(tp)
                if log_ is not None:
                    decision = truncation_by_high_watermark(log_.high_watermark, log_.log_end_offset)
                    self._apply_truncation(tp, decision.offset, "high watermark")
                state.truncating = False
            return True
        await self._truncate_by_leader_epoch(connection, pending)
        return True

    async def _truncate_by_leader_epoch(
        self, connection: LeaderConnection, pending: dict[TopicPartition, FetchState]
    ) -> None:
        asked: dict[TopicPartition, FetchState] = {}
        topics: dict[str, list[dict]] = {}
        for tp, state in pending.items():
            log_ = self.rm.get_log(tp)
            if log_ is None:
                state.truncating = False
                continue
            latest = log_.leader_epoch_cache.latest_epoch
            if latest < 0:  # an empty cache: nothing we could have diverged on beyond the HW
                self._apply_truncation(tp, min(log_.high_watermark, log_.log_end_offset), "empty epoch cache")
                state.truncating = False
                continue
            asked[tp] = state
            topics.setdefault(tp[0], []).append(
                {"partition": tp[1], "leader_epoch": latest, "current_leader_epoch": state.leader_epoch}
            )
        if not topics:
            return
        response = await connection.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            {
                "replica_id": self.rm.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
            timeout=self._timeout(),
        )
        for topic in response["topics"]:
            for answer in topic["partitions"]:
                tp = (topic["topic"], answer["partition"])
                state, log_ = asked.get(tp), self.rm.get_log(tp)
                if state is None or log_ is None or not self._owns(tp, state):
                    continue  # removed or re-added (a new leader or epoch) while the request was in flight
                if answer["error_code"] != ErrorCode.NONE:
                    self._delay(tp, answer["error_code"])
                    continue
                ours = log_.leader_epoch_cache.end_offset_for(answer["leader_epoch"], log_.log_end_offset)
                decision = truncation_by_leader_epoch(
                    answer["leader_epoch"],
                    answer["end_offset"],
                    None if ours[0] < 0 else ours,
                    log_.log_end_offset,
                    log_.high_watermark,
                )
                self._apply_truncation(
                    tp,
                    decision.offset,
                    f"leader epoch {answer['leader_epoch']} ends at {answer['end_offset']}",
                )
                state.truncating = not decision.completed

    def _apply_truncation(self, tp: TopicPartition, offset: int, why: str) -> None:
        log_ = self.rm.get_log(tp)
        if log_ is None:
            return
        if offset >= log_.log_end_offset:
            log_.truncate_to(offset)  # removes no record, only an epoch entry that starts at the LEO
            return
        log.info(
            "%s: truncating %s-%s from LEO %d to %d (%s)", self.name, *tp, log_.log_end_offset, offset, why
        )
        self.rm.state_change_log(
            {
                "event": "Truncate",
                "topic": tp[0],
                "partition": tp[1],
                "from": log_.log_end_offset,
                "to": offset,
                "reason": why,
                "policy": self.policy.value,
            }
        )
        log_.truncate_to(offset)

    def _delay(self, tp: TopicPartition, error_code: int) -> None:
        state = self.partitions.get(tp)
        if state is not None:
            state.delayed_until = (
                asyncio.get_running_loop().time() + self.config["replica.fetch.backoff.ms"] / 1000
            )
            log.info("%s: %s-%s got %s; backing off", self.name, *tp, ErrorCode(error_code).name)

    # -- fetch --------------------------------------------------------------------------------------------
    async def _fetch(self, connection: LeaderConnection) -> bool:
        wanted = self._wanted()
        if not wanted:
            return False
        entries, forgotten = self.session.build({tp: entry for tp, (_, entry) in wanted.items()})
        body = {
            "replica_id": self.rm.broker_id,
            # No long poll while other partitions have truncation rounds to go (KIP-279).
            "max_wait_ms": 0 if self._truncation_pending() else self.config["replica.fetch.wait.max.ms"],
            "min_bytes": self.config["replica.fetch.min.bytes"],
            "max_bytes": max(self.config["replica.fetch.max.bytes"], 10 * 1024 * 1024),
            "session_id": self.session.id,
            "session_epoch": self.session.epoch,
            "topics": by_topic((tp[0], dict(entry, partition=tp[1])) for tp, entry in entries.items()),
            "forgotten_topics": by_topic(forgotten),
        }
        try:
            response = await connection.request(ApiKey.FETCH, body, timeout=self._timeout())
        except BaseException:
            self.session.reset()  # the leader's session may or may not have taken the request
            raise
        if not self.session.handle_response(
            response["session_id"], response["error_code"], entries, forgotten
        ):
            log.info("%s: fetch session refused (%s); a full fetch next", self.name, response["error_code"])
            return True
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaError(response["error_code"], f"{self.name}: FETCH failed")
        for topic in response["topics"]:
            for data in topic["partitions"]:
                tp = (topic["topic"], data["partition"])
                state = wanted.get(tp, (None, None))[0]
                if state is None or self.partitions.get(tp) is not state or state.truncating:
                    continue  # removed or re-added while the fetch (or an earlier partition's handling) ran
                await self._process_partition(connection, tp, state, data)
        return True

    def _wanted(self) -> dict[TopicPartition, tuple[FetchState, dict]]:
        """The partitions to fetch now and their entries (each fetch offset is our LEO); a fetch
        session (KIP-227) sends the leader only the entries that changed."""
        now = asyncio.get_running_loop().time()
        quota = self.rm.quotas.follower
        over_quota = bool(quota.throttled) and quota.is_quota_exceeded(self.rm.time_ms())
        max_bytes = self.config["replica.fetch.max.bytes"]
        wanted = {}
        for tp, state in self.partitions.items():
            log_ = self.rm.get_log(tp)
            if state.truncating or log_ is None or not state.ready(now):
                continue
            if over_quota and not state.in_sync and quota.is_throttled(tp):
                continue  # KIP-73: held back until the follower's replication rate is under its bound
            if tp[0] != GROUP_METADATA_TOPIC and self.rm.disk_space.below_floor(log_.log_dir):
                continue  # issue 25: paused until its log dir is above its free-space floor again
            wanted[tp] = (
                state,
                {
                    "fetch_offset": log_.log_end_offset,
                    "current_leader_epoch": state.leader_epoch,
                    "log_start_offset": log_.log_start_offset,
                    "partition_max_bytes": max_bytes,
                },
            )
        return wanted

    async def _process_partition(
        self, connection: LeaderConnection, tp: TopicPartition, state: FetchState, data: dict
    ) -> None:
        code = data["error_code"]
        if code == ErrorCode.NONE:
            quota = self.rm.quotas.follower
            throttled = bool(quota.throttled) and quota.is_throttled(tp)
            if throttled:
                quota.record(len(data["records"]), self.rm.time_ms())
            try:
                self.rm.append_as_follower(tp, data["records"], data["high_watermark"])
                if throttled:  # the lag only matters to the throttle (Kafka's isReplicaInSync)
                    log_ = self.rm.get_log(tp)
                    state.lag = -1 if log_ is None else max(0, data["high_watermark"] - log_.log_end_offset)
            except KafkaError as exc:
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                    log.error("%s: cannot append to %s-%s: %s; stopping its fetch", self.name, *tp, exc)
                    self.partitions.pop(tp, None)
                    return
                log.warning("%s: cannot append to %s-%s: %s; re-truncating", self.name, *tp, exc)
                state.truncating = True
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(connection, tp, state)
        else:
            self._delay(tp, code)

    async def _handle_out_of_range(
        self, connection: LeaderConnection, tp: TopicPartition, state: FetchState
    ) -> None:
        """Our fetch offset is outside the leader's log (Kafka's handleOffsetOutOfRange).

        * We are ahead of the leader's log end: under ``leader-epoch`` truncate again by epochs;
          under ``high-watermark`` (pre-0.11) cut our log to the leader's end, which is where
          acknowledged writes get lost (docs/guarantees.md
          "No acknowledged write lost, no divergence").
        * We are behind the leader's log start (retention moved it): restart at its log start.

        Kafka does this holding ``partitionMapLock``, which LeaderAndIsr also needs; here each
        answer is acted on only if, when it arrives, the partition still follows this leader at
        the same epoch with the same log (else a new leader's log could be cut or wiped).
        """
        log_ = self.rm.get_log(tp)
        if log_ is None or not self._owns(tp, state):
            return
        leader_end = await self._leader_offset(connection, tp, state, LATEST_TIMESTAMP)
        if leader_end is None or not self._owns(tp, state, log_):
            return
        if leader_end < log_.log_end_offset:
            if self.policy is TruncationPolicy.HIGH_WATERMARK:
                self._apply_truncation(tp, max(leader_end, 0), f"leader's log ends at {leader_end}")
            else:
                state.truncating = True
            return
        leader_start = await self._leader_offset(connection, tp, state, EARLIEST_TIMESTAMP)
        if leader_start is None or not self._owns(tp, state, log_):
            return
        if log_.log_end_offset < leader_start:
            log.warning(
                "%s: %s-%s is below the leader's log start %d; restarting there", self.name, *tp, leader_start
            )
            log_.truncate_fully_and_start_at(leader_start)
        else:
            self._delay(tp, ErrorCode.OFFSET_OUT_OF_RANGE)

    async def _leader_offset(
        self, connection: LeaderConnection, tp: TopicPartition, state: FetchState, timestamp: int
    ) -> int | None:
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": self.rm.broker_id,
                "topics": [
                    {
                        "topic": tp[0],
                        "partitions": [
                            {
                                "partition": tp[1],
                                "timestamp": timestamp,
                                "current_leader_epoch": state.leader_epoch,
                            }
                        ],
                    }
                ],
            },
            timeout=self._timeout(),
        )
        answer = response["topics"][0]["partitions"][0]
        if answer["error_code"] != ErrorCode.NONE:
            if self.partitions.get(tp) is state:
                self._delay(tp, answer["error_code"])
            return None
        return answer["offset"]
