"""A consumer group's state as its coordinator holds it (Kafka's GroupMetadata and MemberMetadata;
seed 004; docs/design.md "Consumer groups").

Pure state, no I/O and no clock of its own: the states Empty, PreparingRebalance,
CompletingRebalance, Stable and Dead with Kafka's table of legal previous states; the members in
the order they joined (the group leader is the first, seed 004's ``members.keys.headOption``);
the members that were handed an id but have not joined with it yet (KIP-394); the members of
the current generation that have not sent SyncGroup yet (Kafka's pendingSyncMembers,
KAFKA-12890); the protocol the members vote for; and the committed offsets.
:mod:`broker.coordinator.group_coordinator` drives it; every transition goes through
:meth:`GroupMetadata.transition_to`, which refuses an illegal one loudly (a bug, not a client
error).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from client.types import TopicPartition


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: Kafka's GroupState.validPreviousStates.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalStateTransition(RuntimeError):
    """A transition Kafka's table does not allow: a coordinator bug."""


@dataclass
class MemberMetadata:
    """One member (Kafka's MemberMetadata). ``awaiting_join`` / ``awaiting_sync`` are the answers
    still owed to its JoinGroup / SyncGroup (Kafka's awaitingJoinCallback, awaitingSyncCallback)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Callable[[dict], None] | None = None
    awaiting_sync: Callable[[dict], None] | None = None
    latest_heartbeat_ms: int = 0
    is_new: bool = False
    #: bumped by every heartbeat: a scheduled expiration checks it is still the latest one
    heartbeat_token: int = 0

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of its own protocols that every member supports (Kafka's MemberMetadata.vote)."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(frozen=True)
class CommittedOffset:
    """Kafka's OffsetAndMetadata: what OffsetCommit stores and OffsetFetch returns."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None
    #: where the commit's record sits in ``__consumer_offsets``: of two commits of one partition
    #: whose writes complete out of order, the later record wins (Kafka's CommitRecordMetadata)
    record_offset: int = -1


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    #: ids handed out with MEMBER_ID_REQUIRED whose JoinGroup has not come back yet (KIP-394)
    pending_members: set[str] = field(default_factory=set)
    #: members of this generation whose SyncGroup has not arrived yet (Kafka's pendingSyncMembers,
    #: KAFKA-12890): every member when a join completes; the coordinator's DelayedSync expels
    #: whoever is still here at the rebalance timeout
    pending_sync_members: set[str] = field(default_factory=set)
    #: static members (KIP-345): group.instance.id -> its current member id
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    #: the latest commit staged per partition while its write is in flight (Kafka's pendingOffsetCommits)
    pending_offset_commits: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    #: set by :class:`~broker.coordinator.group_coordinator.GroupCoordinator`: the rebalance
    #: being awaited (an initial delayed join, or a delayed join); None when none is
    rebalance_token: int = 0
    new_member_added: bool = False

    # -- state -----------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"group {self.group_id} should be in {sorted(s.value for s in VALID_PREVIOUS_STATES[state])} "
                f"before moving to {state.value}, but is {self.state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms

    # -- members ---------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        instance = member.group_instance_id if member is not None else None
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync_members.discard(member_id)
        return member

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """KIP-345: a request naming a static instance whose current member id is another one."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def has_all_members_joined(self) -> bool:
        return not self.not_yet_rejoined() and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def current_member_metadata(self) -> list[dict]:
        """The members and their metadata for the chosen protocol, as the leader's JoinGroup
        answer lists them."""
        assert self.protocol_name is not None
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(self.protocol_name),
            }
            for m in self.members.values()
        ]

    # -- protocols -------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        """Kafka's GroupMetadata.supportsProtocols: an empty group takes any non-empty type and
        protocol list; otherwise the type must match and one protocol be common to all."""
        names = set(protocols)
        if self.is_(GroupState.EMPTY) and not self.members:
            return bool(protocol_type) and bool(names)
        if not self.members:  # everyone left mid-rebalance: any protocol is "common to all" of none
            return protocol_type == self.protocol_type and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Every member votes for its first protocol that all support; most votes wins, ties going
        to the leader's preference (Kafka leaves ties to a hash map's order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol is supported by every member")
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(candidates)
        return max(votes, key=lambda name: (votes[name], -order.index(name) if name in order else 0))

    def init_next_generation(self, now_ms: int) -> None:
        """Kafka's initNextGeneration: a new generation, and CompletingRebalance (Empty without
        members); nobody is pending sync until the coordinator says so."""
        self.generation_id += 1
        self.pending_sync_members.clear()
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # -- offsets ---------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits)

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        """Stage a commit being written (Kafka's prepareOffsetCommit): the latest staged per
        partition."""
        self.pending_offset_commits.update(offsets)

    def complete_offset_commit(
        self,
        staged: Mapping[TopicPartition, CommittedOffset],
        placed: Mapping[TopicPartition, CommittedOffset],
        succeeded: bool,
    ) -> None:
        """A commit's write finished (Kafka's onOffsetCommitAppend / failedOffsetCommit): a
        success is kept while its partition has a commit pending, unless a commit whose record
        lies later in the log is already kept; the partition stops being pending when this was
        its latest staged commit. A partition whose topic was deleted meanwhile is not pending
        (Kafka's removeOffsets), so a late write of it keeps nothing, and a later commit of the
        re-created topic, still pending, is not consumed by it."""
        for tp, committed in staged.items():
            if succeeded and tp in self.pending_offset_commits:
                self.load_offset(tp, placed[tp])
            if self.pending_offset_commits.get(tp) is committed:
                del self.pending_offset_commits[tp]

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Kafka's removeOffsets: forget the committed offsets of ``partitions`` and any commit of
        them still being written (its completion then keeps nothing). Returns those removed."""
        removed = []
        for tp in partitions:
            self.pending_offset_commits.pop(tp, None)
            if self.offsets.pop(tp, None) is not None:
                removed.append(tp)
        return removed

    def load_offset(self, tp: TopicPartition, committed: CommittedOffset) -> None:
        current = self.offsets.get(tp)
        if current is None or current.record_offset <= committed.record_offset:
            self.offsets[tp] = committed

    def summary_members(self) -> list[MemberMetadata]:
        return list(self.members.values())
