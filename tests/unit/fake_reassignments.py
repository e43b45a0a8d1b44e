"""The KIP-455 reassignment APIs of tests/unit/fake_cluster.py: AlterPartitionReassignments and
ListPartitionReassignments at any node, all or nothing (the controller's checks in Kafka's
words), the moves kept in ``reassignments`` until :meth:`FakeReassignments.complete_reassignments`.
"""

from __future__ import annotations

from client.protocol.errors import ErrorCode


class FakeReassignments:
    """The reassignment APIs of FakeCluster (a mixin: the cluster owns the topics and the moves)."""

    topics: dict
    node_ids: tuple[int, ...]
    #: In progress: partition -> target replicas.
    reassignments: dict[tuple[str, int], list[int]]

    def complete_reassignments(self) -> None:
        """Every reassignment in progress done: the partitions have their target replicas."""
        for (topic, partition), target in sorted(self.reassignments.items()):
            part = self.topics[topic][partition]
            part.replicas = list(target)
            if part.leader not in target:
                self.move_leader(topic, partition, target[0])
        self.reassignments.clear()

    def _refusal(self, topic: str, partition: int, replicas: list[int]) -> tuple[int, str] | None:
        """Why the fake refuses to reassign a partition (the controller's checks, Kafka's
        wording), or None."""
        if self._partition(topic, partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        if (topic, partition) in self.reassignments:
            return ErrorCode.REASSIGNMENT_IN_PROGRESS, f"{topic}-{partition} is being reassigned already."
        if not replicas:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Empty replica list specified in partition reassignment.",
            )
        if len(set(replicas)) != len(replicas):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: {replicas}",
            )
        unknown = sorted(set(replicas) - set(self.node_ids))
        if unknown:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker id(s) {unknown} in {replicas}"
        return None

    async def _alter_partition_reassignments(self, node: int, body: dict) -> dict:
        asked = [
            (t["name"], p["partition_index"], p["replicas"]) for t in body["topics"] for p in t["partitions"]
        ]
        refusals = {(t, p): self._refusal(t, p, replicas) for t, p, replicas in asked}
        refused = [f"{t}-{p}" for (t, p), why in refusals.items() if why is not None]
        responses: dict[str, list[dict]] = {}
        for t, p, replicas in asked:
            code, message = refusals[t, p] or (0, None)
            if refused and not code:
                code, message = ErrorCode.INVALID_REQUEST, f"not written: {', '.join(refused)} refused"
            if not refused:
                self.reassignments[t, p] = list(replicas)
            entry = {"partition_index": p, "error_code": int(code), "error_message": message}
            responses.setdefault(t, []).append(entry)
        return {"error_code": 0, "responses": [{"name": t, "partitions": ps} for t, ps in responses.items()]}

    async def _list_partition_reassignments(self, node: int, body: dict) -> dict:
        wanted = (
            None
            if body["topics"] is None
            else {(t["name"], p) for t in body["topics"] for p in t["partition_indexes"]}
        )
        topics: dict[str, list[dict]] = {}
        for (t, p), target in sorted(self.reassignments.items()):
            if wanted is not None and (t, p) not in wanted:
                continue
            current = self.topics[t][p].replicas
            entry = {
                "partition_index": p,
                "replicas": target + [r for r in current if r not in target],
                "adding_replicas": [r for r in target if r not in current],
                "removing_replicas": [r for r in current if r not in target],
            }
            topics.setdefault(t, []).append(entry)
        return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
