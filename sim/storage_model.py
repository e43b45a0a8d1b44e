"""The page-cache model and the faults of one simulated broker's disks (docs/design.md
"Simulation"): :class:`Disk`, driven by the interposed os calls of :mod:`sim.storage`.

Kafka's durability rests on fsync: ``LogSegment.flush``, and checkpoints written to a temp
file, fsynced, renamed and their directory fsynced (``Utils.atomicMoveWithFallback``). A
:class:`Disk` tracks, for the files under its roots, what an fsync made durable, so that
:meth:`Disk.power_loss` keeps only that; and it fails the calls a test or the seed picks with
ENOSPC or EIO, which the log reports to KIP-112's ``LogDirFailureChannel``.

**The model is lazy**, so an ordinary run pays little. Each file remembers its *durable length*
(its size at its last fsync) and, only once a change reaches below that length (a truncation,
an ``O_TRUNC`` open, a write into the middle) or the file leaves the tree (unlink, a rename over
it), a copy of its durable bytes; an append costs nothing, an fsync one ``fstat``. Each directory
remembers its entries as of its last fsync. A power loss rewrites each root to that durable
tree: every file back to its durable bytes, every entry created, renamed or removed since its
directory's last fsync undone (a file whose name was never made durable disappears, one whose
removal was not made durable comes back). Real fsyncs of modelled files are skipped: the model
is the disk.

**Faults**: a full disk (:meth:`Disk.fill`) accepts ``room`` more bytes (the write that crosses
it is short, as write(2) is), then every write and every creation of a file or directory fails
with ENOSPC until :meth:`Disk.free`; a placed fault (:meth:`Disk.fail`) fails the next ``count``
calls of one kind (``open``; ``write``: write, pwrite, ftruncate; ``fsync``; ``metadata``:
rename, unlink, mkdir, rmdir), optionally only on paths containing a string, with EIO or any
errno; ``error_rate`` fails each modelled call with EIO with that probability, drawn from the
disk's own seeded stream (drawn only when above 0). A faulted call does nothing before it
raises. After a power loss the disk is off until :meth:`Disk.power_on` (its broker's next
start): whatever the dead process's cancelled tasks still try to write fails with EIO.

**Free space** (:meth:`Disk.statvfs`, the broker's injected ``statvfs``: the free-space floor of
``log.dir.min.free.bytes`` and DescribeLogDirs read it): a filesystem of
:data:`CAPACITY_BYTES` with ``usable_bytes`` usable (half of it unless a test or a fault sets
it), never the host's own free space, which other processes change while a schedule runs, or
EIO while ``statvfs_fails`` is set (the ``disk-floor`` fault's broken measurement). A
full disk (:meth:`Disk.fill`) does not change it: its writes fail with ENOSPC, KIP-112's path,
as a disk filled behind the measurement's back does.
"""

from __future__ import annotations

import errno as errno_codes
import logging
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Op = Literal["open", "write", "fsync", "metadata"]
#: The size of every simulated broker's filesystem (:meth:`Disk.statvfs`).
CAPACITY_BYTES = 64 << 30
BLOCK_BYTES = 4096
OPS: tuple[Op, ...] = ("open", "write", "fsync", "metadata")


@dataclass(frozen=True)
class SimStatvfs:
    """The fields of ``os.statvfs_result`` the broker reads."""

    f_frsize: int
    f_blocks: int
    f_bavail: int


class File:
    """A regular file's inode: what of it survives a power loss."""

    __slots__ = ("durable_len", "saved", "linked")

    def __init__(self, durable_len: int = 0) -> None:
        self.durable_len = durable_len  # its size at its last fsync
        self.saved: bytes | None = None  # its durable bytes, once the live file no longer holds them
        self.linked = True  # reachable from the live tree


class Dir:
    """A directory's inode: its live entries and its entries as of its last fsync."""

    __slots__ = ("entries", "durable")

    def __init__(self) -> None:
        self.entries: dict[str, File | Dir] = {}
        self.durable: dict[str, File | Dir] = {}


@dataclass
class PlacedFault:
    """Fail the next ``remaining`` calls of kind ``op`` (None: any kind; ``remaining`` None: every
    one until healed) on paths containing ``path_contains`` (None: any path) with ``error``."""

    op: Op | None
    error: int = errno_codes.EIO
    remaining: int | None = 1
    path_contains: str | None = None

    def matches(self, op: Op, path: str) -> bool:
        return (self.op is None or self.op == op) and (
            self.path_contains is None or self.path_contains in path
        )


@dataclass(frozen=True)
class PowerLoss:
    """What a power loss changed on a disk (paths relative to the disk's roots' parent)."""

    rolled_back: tuple[str, ...]  # files whose bytes went back to other (durable) bytes
    vanished: tuple[str, ...]  # files and dirs whose entry was never made durable
    restored: tuple[str, ...]  # entries removed or renamed away without a directory fsync
    bytes_lost: int  # live bytes minus durable bytes over every file


@dataclass
class OpenFile:
    """A descriptor open on a modelled file or directory."""

    disk: Disk
    node: File | Dir
    path: str
    append: bool


class Disk:
    """One broker's disks: the page-cache model of the files under its roots, and its faults."""

    def __init__(
        self,
        owner: str,
        roots: list[Path],
        rng: random.Random,
        real: dict[str, Any] | None = None,
        fds: dict[int, OpenFile] | None = None,
    ) -> None:
        """``real``: the real os functions while interposed (filled by :class:`sim.storage.SimStorage`);
        ``fds``: the open descriptors of every disk, shared with it."""
        self.owner = owner
        self.roots = [os.path.abspath(r) for r in roots]
        self._rng = rng
        self._real = real if real is not None else {}
        self._fds = fds if fds is not None else {}
        self._top: dict[str, Dir] = {}
        for root in self.roots:
            os.makedirs(root, exist_ok=True)
            self._top[root] = self._adopt(root)
        #: None: not full; else the bytes the disk still accepts
        self.room: int | None = None
        self.placed: list[PlacedFault] = []
        #: probability that a modelled call fails with EIO (drawn only when above 0)
        self.error_rate = 0.0
        #: powered off by a power loss: mutating calls fail until :meth:`power_on`
        self.powered = True
        #: what :meth:`statvfs` reports usable (the free-space floor's measurement)
        self.usable_bytes = CAPACITY_BYTES // 2
        #: :meth:`statvfs` fails with EIO (a filesystem whose measurement breaks)
        self.statvfs_fails = False
        #: > 0 while the simulator's own checks read (:meth:`sim.world.World.observing`): their
        #: calls meet no fault and use none up, so the checks never steer the run
        self.observers = 0
        #: every fault raised, in order: "<op> <path>: <errno name>"
        self.raised: list[str] = []

    # -- the fault API ---------------------------------------------------------------------------
    def fill(self, room: int = 0) -> None:
        """The disk is full once ``room`` more bytes are written (see the module doc)."""
        self.room = max(0, room)

    def free(self) -> None:
        self.room = None

    def fail(
        self,
        op: Op | None = None,
        *,
        error: int = errno_codes.EIO,
        count: int | None = 1,
        path_contains: str | None = None,
    ) -> PlacedFault:
        """Fail the next ``count`` calls of kind ``op`` (None: every one until :meth:`heal`)."""
        if op is not None and op not in OPS:
            raise ValueError(f"unknown op {op!r}, expected one of {OPS}")
        fault = PlacedFault(op, error, count, path_contains)
        self.placed.append(fault)
        return fault

    def heal(self) -> None:
        """Free the disk and drop every placed fault (the error rate stays)."""
        self.free()
        self.placed.clear()

    def power_on(self) -> None:
        self.powered = True

    def statvfs(self, path: str) -> SimStatvfs:
        """What ``os.statvfs`` answers for a path of this disk (see the module doc)."""
        if self.statvfs_fails:
            raise OSError(errno_codes.EIO, "statvfs failed (simulated)", path)
        return SimStatvfs(BLOCK_BYTES, CAPACITY_BYTES // BLOCK_BYTES, self.usable_bytes // BLOCK_BYTES)

    def _check(self, op: Op, path: str, *, allocates: bool = False, mutates: bool = True) -> None:
        """Raise the fault this call meets, if any, before it does anything."""
        if self.observers:
            return
        error = None
        if mutates and not self.powered:
            error = errno_codes.EIO
        elif allocates and self.room == 0:
            error = errno_codes.ENOSPC
        else:
            for fault in self.placed:
                if fault.matches(op, path):
                    error = fault.error
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self.placed.remove(fault)
                    break
            else:
                if self.error_rate > 0 and self._rng.random() < self.error_rate:
                    error = errno_codes.EIO
        if error is not None:
            self.raised.append(f"{op} {path}: {errno_codes.errorcode.get(error, error)}")
            log.info("sim storage %s: %s %s fails with %s", self.owner, op, path, os.strerror(error))
            raise OSError(error, os.strerror(error), path)

    # -- the tree --------------------------------------------------------------------------------
    def owns(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    def _adopt(self, path: str) -> Dir:
        """A directory already on disk, all of it durable (a run starts from a synced disk)."""
        node = Dir()
        for name in sorted(os.listdir(path)):
            child = os.path.join(path, name)
            if os.path.isdir(child) and not os.path.islink(child):
                node.entries[name] = self._adopt(child)
            else:
                node.entries[name] = File(os.path.getsize(child))
        node.durable = dict(node.entries)
        return node

    def _locate(self, path: str) -> tuple[Dir | None, str, File | Dir | None]:
        """(parent dir node, name, node) of ``path`` in the live tree; a root has no parent."""
        for root, top in self._top.items():
            if path == root:
                return None, "", top
            if path.startswith(root + os.sep):
                parts = path[len(root) + 1 :].split(os.sep)
                parent: File | Dir | None = top
                for part in parts[:-1]:
                    parent = parent.entries.get(part) if isinstance(parent, Dir) else None
                if not isinstance(parent, Dir):
                    return None, parts[-1], None
                return parent, parts[-1], parent.entries.get(parts[-1])
        raise AssertionError(f"{path} is not under {self.roots}")

    def _os(self, name: str) -> Any:
        """The real ``os.<name>`` (the interposed one is the real one while not installed)."""
        return self._real.get(name) or getattr(os, name)

    def _read(self, path: str, length: int) -> bytes:
        fd = self._os("open")(path, os.O_RDONLY)
        try:
            return os.pread(fd, length, 0) if length else b""
        finally:
            self._os("close")(fd)

    def keep_durable(self, node: File, fd: int | None = None, path: str | None = None) -> None:
        """Keep the durable bytes aside: the live file is about to stop holding them."""
        if node.saved is not None or node.durable_len == 0 or not node.linked:
            return
        if fd is not None:
            node.saved = os.pread(fd, node.durable_len, 0)
        else:
            node.saved = self._read(path or "", node.durable_len)

    # -- the modelled calls (the real call runs in between the fault check and the bookkeeping) --
    def open(self, path: str, flags: int, mode: int) -> int:
        parent, name, node = self._locate(path)
        creating = node is None and bool(flags & os.O_CREAT)
        writing = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        self._check("open", path, allocates=creating, mutates=writing)
        if isinstance(node, File) and flags & os.O_TRUNC:
            self.keep_durable(node, path=path)
        fd = self._os("open")(path, flags, mode)
        if node is None:  # created
            if parent is None:
                self._os("close")(fd)
                raise AssertionError(f"sim storage: {path} opened, its directory is not in the model")
            node = parent.entries[name] = File()
        self._fds[fd] = OpenFile(self, node, path, bool(flags & os.O_APPEND))
        return fd

    def write(self, entry: OpenFile, fd: int, data: Any, offset: int | None) -> int:
        self._check("write", entry.path, allocates=True)
        node = entry.node
        assert isinstance(node, File)
        if node.saved is None and node.durable_len:
            position = offset if offset is not None else None
            if position is None and not entry.append:
                position = os.lseek(fd, 0, os.SEEK_CUR)
            if position is not None and position < node.durable_len:
                self.keep_durable(node, fd=fd)
        if self.room is not None:
            data = memoryview(data).cast("B")[: self.room]  # a short write: what fits
        written = self._os("write")(fd, data) if offset is None else self._os("pwrite")(fd, data, offset)
        if self.room is not None:
            self.room -= written
        return written

    def ftruncate(self, entry: OpenFile, fd: int, length: int) -> None:
        self._check("write", entry.path)
        node = entry.node
        if isinstance(node, File) and length < node.durable_len:
            self.keep_durable(node, fd=fd)
        self._os("ftruncate")(fd, length)

    def fsync(self, entry: OpenFile, fd: int) -> None:
        self._check("fsync", entry.path)
        node = entry.node
        if isinstance(node, Dir):
            node.durable = dict(node.entries)
            return
        node.durable_len = os.fstat(fd).st_size
        node.saved = None if node.linked else os.pread(fd, node.durable_len, 0)

    def rename(self, real: str, src: str, dst: str) -> None:
        self._check("metadata", dst, allocates=False)
        src_parent, src_name, node = self._locate(src)
        dst_parent, dst_name, replaced = self._locate(dst)
        replaced = replaced if isinstance(replaced, File) and replaced is not node else None
        if replaced is not None:
            self.keep_durable(replaced, path=dst)  # its name goes; a durable entry may bring it back
        self._os(real)(src, dst)
        if src_parent is None or dst_parent is None or node is None:
            raise AssertionError(f"sim storage: rename {src} -> {dst} outside the model")
        if replaced is not None:
            replaced.linked = False
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = node

    def remove(self, real: str, path: str) -> None:
        self._check("metadata", path)
        parent, name, node = self._locate(path)
        if parent is None or node is None:  # a root, or absent: the real call decides
            self._os(real)(path)
            return
        if isinstance(node, File):
            self.keep_durable(node, path=path)  # its name goes; a durable entry may bring it back
        self._os(real)(path)
        if isinstance(node, File):
            node.linked = False
        del parent.entries[name]

    def mkdir(self, path: str, mode: int) -> None:
        parent, name, node = self._locate(path)
        if parent is None or node is not None:  # a root, or FileExistsError / ENOENT from the real call
            self._os("mkdir")(path, mode)
            return
        self._check("metadata", path, allocates=True)
        self._os("mkdir")(path, mode)
        parent.entries[name] = Dir()

    # -- the power loss --------------------------------------------------------------------------
    def power_loss(self) -> PowerLoss:
        """Rewrite every root to its durable tree (see the module doc); the disk stays off until
        :meth:`power_on` (the next start of its broker)."""
        live = {id(node): path for root, top in self._top.items() for path, node in _walk(top, root)}
        base = os.path.dirname(os.path.commonpath(self.roots)) if self.roots else ""
        live_files = {
            path: self._read(path, os.path.getsize(path)) for path in live.values() if os.path.isfile(path)
        }
        durable: dict[str, bytes | None] = {}  # path -> bytes (file) or None (dir)
        for root, top in self._top.items():
            for path, node in _walk(top, root, durable=True):
                if isinstance(node, Dir):
                    durable[path] = None
                elif node.saved is not None:
                    durable[path] = node.saved
                elif node.durable_len == 0:
                    durable[path] = b""
                else:
                    durable[path] = self._read(live[id(node)], node.durable_len)
        for root in self.roots:
            self._wipe(root)
        for path, content in durable.items():  # parents come before their children
            if content is None:
                self._os("mkdir")(path, 0o755)
                continue
            fd = self._os("open")(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(content)
                while view:
                    view = view[self._os("write")(fd, view) :]
            finally:
                self._os("close")(fd)
        for fd in [fd for fd, entry in self._fds.items() if self.owns(entry.path)]:
            del self._fds[fd]  # the dead process's descriptors: closed by the kernel with it
        self._top = {root: self._adopt(root) for root in self.roots}
        self.powered = False
        rel = lambda path: os.path.relpath(path, base)  # noqa: E731
        files = {p: c for p, c in durable.items() if c is not None}
        report = PowerLoss(
            rolled_back=tuple(rel(p) for p, c in files.items() if p in live_files and c != live_files[p]),
            vanished=tuple(rel(p) for p in sorted(set(live.values()) - set(durable))),
            restored=tuple(rel(p) for p in sorted(set(durable) - set(live.values()))),
            bytes_lost=sum(map(len, live_files.values())) - sum(map(len, files.values())),
        )
        log.info("sim storage %s: power loss: %s", self.owner, report)
        return report

    def _wipe(self, root: str) -> None:
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                self._wipe(path)
                self._os("rmdir")(path)
            else:
                self._os("unlink")(path)


def _walk(node: Dir, path: str, durable: bool = False) -> Iterator[tuple[str, File | Dir]]:
    """(path, node) below ``node``, parents before children, by name."""
    entries = node.durable if durable else node.entries
    for name in sorted(entries):
        child, child_path = entries[name], os.path.join(path, name)
        yield child_path, child
        if isinstance(child, Dir):
            yield from _walk(child, child_path, durable)
