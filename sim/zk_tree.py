"""ZooKeeper's DataTree and WatchManager for the simulator's in-memory ZooKeeper
(:mod:`sim.zookeeper`; docs/design.md "Simulation").

The semantics are ZooKeeper 3.8's, checked against the real server by tests/sim/test_zookeeper.py:

* every write is a transaction with its own zxid, a failed one too (ZooKeeper logs an ErrorTxn);
* a znode's stored cversion counts the children ever created (``creates``); the Stat reports
  ``2 * creates - numChildren`` (DataNode.copyStat: creates and deletes both count), and a
  sequential name takes the stored count as its 10-digit suffix, so deletes do not move it;
* the checks run in PrepRequestProcessor's order: create (NoNode parent, NodeExists,
  NoChildrenForEphemerals), delete (NoNode, BadVersion, NotEmpty), setData (NoNode, BadVersion);
* a multi applies its operations in order, each seeing the earlier ones, and either all of
  them land or none: the results are then RolledBackError before the failing operation, its
  error, RuntimeInconsistency after (kazoo's TransactionRequest.commit);
* one-shot watches per session: data watches (getData, exists, also on a missing znode), child
  watches (getChildren); a delete fires both on its path once per session, and the parent's
  child watches; triggered watches are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    ZookeeperError,
)
from kazoo.protocol.states import EventType, ZnodeStat

from zk.bridge import CheckOp, CreateOp, DeleteOp, SetDataOp, ZkOp


@dataclass
class Znode:
    data: bytes
    czxid: int
    ctime: int
    ephemeral_owner: int = 0
    mzxid: int = 0
    mtime: int = 0
    pzxid: int = 0
    version: int = 0
    #: ZooKeeper's stored cversion: how many children were ever created here
    creates: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZnodeStat:
        n = len(self.children)
        return ZnodeStat(
            czxid=self.czxid,
            mzxid=self.mzxid,
            ctime=self.ctime,
            mtime=self.mtime,
            version=self.version,
            cversion=2 * self.creates - n,
            aversion=0,
            ephemeralOwner=self.ephemeral_owner,
            dataLength=len(self.data),
            numChildren=n,
            pzxid=self.pzxid,
        )


#: (watch kind "data" or "child", path, event type): a watch trigger not yet applied
Trigger = tuple[str, str, EventType]
#: (session id, event type, path): a watch event to deliver
WatchEvent = tuple[int, EventType, str]


def split(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return (parent or "/"), name


def _check_version(node: Znode, version: int) -> None:
    if version != -1 and node.version != version:
        raise BadVersionError()


class DataTree:
    """The znodes, the ephemerals of each session and the watches of each session."""

    def __init__(self) -> None:
        self.nodes: dict[str, Znode] = {"/": Znode(b"", 0, 0)}
        self.ephemerals: dict[int, set[str]] = {}
        self.data_watches: dict[str, set[int]] = {}
        self.child_watches: dict[str, set[int]] = {}
        # /zookeeper, /zookeeper/config and /zookeeper/quota exist from the start, outside any
        # transaction (DataTree's constructor), as on the real server
        for path in ("/zookeeper", "/zookeeper/config", "/zookeeper/quota"):
            parent, name = split(path)
            self.nodes[parent].children.add(name)
            self.nodes[path] = Znode(b"", 0, 0)

    # -- reads --------------------------------------------------------------------------------
    def _node(self, path: str) -> Znode:
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError()
        return node

    def get(self, path: str, watcher: int | None) -> tuple[bytes, ZnodeStat]:
        node = self._node(path)
        if watcher is not None:
            self.data_watches.setdefault(path, set()).add(watcher)
        return node.data, node.stat()

    def exists(self, path: str, watcher: int | None) -> ZnodeStat | None:
        if watcher is not None:  # statNode registers the watch before it looks
            self.data_watches.setdefault(path, set()).add(watcher)
        node = self.nodes.get(path)
        return None if node is None else node.stat()

    def get_children(self, path: str, watcher: int | None) -> list[str]:
        node = self._node(path)
        if watcher is not None:
            self.child_watches.setdefault(path, set()).add(watcher)
        return sorted(node.children)

    # -- writes (each validates before it changes anything; ``undo`` collects the reverse) ----
    def create(
        self,
        op: CreateOp,
        owner: int,
        zxid: int,
        time_ms: int,
        undo: list[Callable[[], None]],
    ) -> tuple[str, list[Trigger]]:
        parent_path, _ = split(op.path)
        parent = self._node(parent_path)
        path = op.path + f"{parent.creates:010d}" if op.sequence else op.path
        if path in self.nodes:
            raise NodeExistsError()
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError()
        ephemeral_owner = owner if op.ephemeral else 0
        node = Znode(op.value, zxid, time_ms, ephemeral_owner, zxid, time_ms, zxid)
        saved = (parent.creates, parent.pzxid)
        name = split(path)[1]
        self.nodes[path] = node
        parent.children.add(name)
        parent.creates += 1
        parent.pzxid = zxid
        if ephemeral_owner:
            self.ephemerals.setdefault(ephemeral_owner, set()).add(path)

        def revert() -> None:
            del self.nodes[path]
            parent.children.discard(name)
            parent.creates, parent.pzxid = saved
            if ephemeral_owner:
                self.ephemerals[ephemeral_owner].discard(path)

        undo.append(revert)
        return path, [("data", path, EventType.CREATED), ("child", parent_path, EventType.CHILD)]

    def delete(self, op: DeleteOp, zxid: int, undo: list[Callable[[], None]]) -> list[Trigger]:
        node = self._node(op.path)
        _check_version(node, op.version)
        if node.children:
            raise NotEmptyError()
        parent_path, name = split(op.path)
        parent = self.nodes[parent_path]
        saved_pzxid = parent.pzxid
        del self.nodes[op.path]
        parent.children.discard(name)
        parent.pzxid = max(parent.pzxid, zxid)
        owner = node.ephemeral_owner
        if owner and owner in self.ephemerals:
            self.ephemerals[owner].discard(op.path)

        def revert() -> None:
            self.nodes[op.path] = node
            parent.children.add(name)
            parent.pzxid = saved_pzxid
            if owner:
                self.ephemerals.setdefault(owner, set()).add(op.path)

        undo.append(revert)
        return [
            ("data", op.path, EventType.DELETED),
            ("child", op.path, EventType.DELETED),
            ("child", parent_path, EventType.CHILD),
        ]

    def set_data(
        self, op: SetDataOp, zxid: int, time_ms: int, undo: list[Callable[[], None]]
    ) -> tuple[ZnodeStat, list[Trigger]]:
        node = self._node(op.path)
        _check_version(node, op.version)
        saved = (node.data, node.mzxid, node.mtime, node.version)
        node.data, node.mzxid, node.mtime, node.version = op.value, zxid, time_ms, node.version + 1

        def revert() -> None:
            node.data, node.mzxid, node.mtime, node.version = saved

        undo.append(revert)
        return node.stat(), [("data", op.path, EventType.CHANGED)]

    def check(self, op: CheckOp) -> None:
        _check_version(self._node(op.path), op.version)

    def apply(
        self, op: ZkOp, owner: int, zxid: int, time_ms: int, undo: list[Callable[[], None]]
    ) -> tuple[object, list[Trigger]]:
        """One operation: its kazoo result (a multi's form) and its watch triggers."""
        if isinstance(op, CreateOp):
            return self.create(op, owner, zxid, time_ms, undo)
        if isinstance(op, DeleteOp):
            return True, self.delete(op, zxid, undo)
        if isinstance(op, SetDataOp):
            return self.set_data(op, zxid, time_ms, undo)
        if isinstance(op, CheckOp):
            self.check(op)
            return True, []
        raise TypeError(f"not a ZooKeeper op: {op!r}")

    def multi(self, ops: Sequence[ZkOp], owner: int, zxid: int, time_ms: int) -> tuple[list, list[Trigger]]:
        """All of ``ops`` in one transaction, or none of them (the results then carry the errors)."""
        undo: list[Callable[[], None]] = []
        results: list = []
        triggers: list[Trigger] = []
        for index, op in enumerate(ops):
            try:
                result, fired = self.apply(op, owner, zxid, time_ms, undo)
            except ZookeeperError as exc:
                for revert in reversed(undo):
                    revert()
                after = [RuntimeInconsistency() for _ in ops[index + 1 :]]
                return [RolledBackError() for _ in range(index)] + [exc] + after, []
            results.append(result)
            triggers.extend(fired)
        return results, triggers

    def kill_session(self, session: int, zxid: int) -> list[Trigger]:
        """closeSession: the session's ephemeral znodes go, in one transaction."""
        triggers: list[Trigger] = []
        for path in sorted(self.ephemerals.pop(session, set()), reverse=True):
            if path in self.nodes:
                triggers.extend(self.delete(DeleteOp(path), zxid, []))
        self.remove_watches(session)
        return triggers

    # -- watches ------------------------------------------------------------------------------
    def fire(self, triggers: Iterable[Trigger]) -> list[WatchEvent]:
        """Apply the triggers of one committed transaction: each watch fires once and is gone;
        a delete reaches a session watching its path both ways with one event."""
        events: list[WatchEvent] = []
        for kind, path, event_type in triggers:
            table = self.data_watches if kind == "data" else self.child_watches
            sessions = table.pop(path, set())
            if kind == "child" and event_type == EventType.DELETED:
                sessions -= {s for s, t, p in events if p == path and t == EventType.DELETED}
            events.extend((session, event_type, path) for session in sorted(sessions))
        return events

    def remove_watches(self, session: int) -> None:
        """A closed connection takes its watches with it (DataTree.removeCnxn)."""
        for table in (self.data_watches, self.child_watches):
            for path in [p for p, sessions in table.items() if session in sessions]:
                table[path].discard(session)
                if not table[path]:
                    del table[path]
