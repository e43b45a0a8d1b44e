"""The simulated brokers' disks (docs/design.md "Simulation"): the real Log, segments, indexes
and checkpoints of every simulated broker run on real files whose os calls go through
:class:`SimStorage`, which gives each broker a :class:`sim.storage_model.Disk`: a page-cache
model whose power loss keeps only what was fsynced, and injected ENOSPC and EIO.

**Interposition, routed by path.** While a :class:`SimStorage` is installed, the os-level calls
broker/log makes are replaced process-wide: ``os.open``, ``write``, ``pwrite``, ``ftruncate``,
``fsync``, ``fdatasync``, ``close``, ``rename``, ``replace``, ``unlink``/``remove``, ``mkdir``,
``rmdir`` (their ``dir_fd`` forms too: ``shutil.rmtree`` uses them), and ``builtins.open`` /
``io.open`` in a writing mode (checkpoints and producer snapshots write through Python file
objects: their creation and truncation go through the model, their fsync too, their writes do
not, so their faults come at open and at fsync). A call on a path, or a descriptor, under a
registered disk's roots goes to that disk (several brokers share the process); every other call
goes straight to the real function after one dict lookup or one prefix test.

Why not an injected I/O object: the log's I/O is not funnelled through a few functions
(segment.py and index.py call ``os`` directly, checkpoint.py ``open()``, producer_snapshots.py
``Path.write_bytes``, log_manager.py ``shutil.rmtree`` and ``Path.rename``), so an injection would
change eight product modules; the interposition changes none and holds whatever the log does
next. Everything runs on the simulation loop's one thread, so the routing is deterministic (the
loop refuses a thread started under it, and the brokers' log pools run inline: sim/isolation.py;
the lock is only a guard). :meth:`SimStorage.uninstall` puts the real functions back; the
world calls it on every exit path, and only one SimStorage may be installed at a time.
"""

from __future__ import annotations

import builtins
import io
import os
import random
import threading
from pathlib import Path
from typing import Any

from sim.storage_model import Disk, File, OpenFile, PowerLoss

__all__ = ["Disk", "PowerLoss", "SimStorage"]

_OS_NAMES = (
    "open",
    "write",
    "pwrite",
    "ftruncate",
    "fsync",
    "fdatasync",
    "close",
    "rename",
    "replace",
    "unlink",
    "remove",
    "mkdir",
    "rmdir",
)
_WRITING_MODES = frozenset("wax+")


class SimStorage:
    """Every simulated broker's :class:`Disk`, and the interposition that routes calls to them."""

    def __init__(self) -> None:
        self.disks: dict[str, Disk] = {}
        self._fds: dict[int, OpenFile] = {}
        #: descriptors of ``open()`` objects (C closes them, not os.close): checked by inode on use
        self._transient: dict[int, tuple[OpenFile, int]] = {}
        self._real: dict[str, Any] = {}
        self._lock = threading.RLock()  # a guard: no thread of the code under test runs under the loop

    def add_disk(self, owner: str, roots: list[Path], rng: random.Random) -> Disk:
        """The disk holding ``roots`` (created; what they hold is taken as durable), its faults
        drawn from ``rng``."""
        if self._real:
            raise RuntimeError("add every disk before install()")
        disk = self.disks[owner] = Disk(owner, roots, rng, self._real, self._fds)
        return disk

    @property
    def installed(self) -> bool:
        return bool(self._real)

    def install(self) -> None:
        if self._real:
            raise RuntimeError("already installed")
        if isinstance(getattr(os.open, "__self__", None), SimStorage):
            raise RuntimeError("another SimStorage is installed: one simulated world at a time")
        self._real.update({name: getattr(os, name) for name in _OS_NAMES})
        self._real["builtins.open"] = builtins.open
        self._real["io.open"] = io.open
        for name in _OS_NAMES:
            setattr(os, name, getattr(self, "_" + name))
        builtins.open = io.open = self._open_file  # type: ignore[assignment]

    def uninstall(self) -> None:
        """Put the real functions back (idempotent)."""
        if not self._real:
            return
        for name in _OS_NAMES:
            setattr(os, name, self._real[name])
        builtins.open = self._real["builtins.open"]
        io.open = self._real["io.open"]
        self._real.clear()
        self._fds.clear()
        self._transient.clear()

    def __enter__(self) -> SimStorage:
        self.install()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def power_loss(self, owner: str) -> PowerLoss:
        """Cut the power of ``owner``'s machine (its process must be dead): see :meth:`Disk.power_loss`."""
        with self._lock:
            return self.disks[owner].power_loss()

    # -- routing ---------------------------------------------------------------------------------
    def _route(self, path: Any, dir_fd: int | None = None) -> tuple[Disk, str] | None:
        if dir_fd is not None:
            entry = self._fds.get(dir_fd)
            if entry is None:
                return None
            path = os.path.join(entry.path, os.fspath(path))
        if isinstance(path, int):
            return None
        text = os.fspath(path)
        if not isinstance(text, str):
            return None
        text = os.path.abspath(text)
        for disk in self.disks.values():
            if disk.owns(text):
                return disk, text
        return None

    def _disk_of(self, fd: int) -> tuple[Disk, OpenFile] | None:
        entry = self._fds.get(fd)
        return None if entry is None else (entry.disk, entry)

    # -- the interposed functions: the real ones unless routed -----------------------------------
    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        routed = self._route(path, dir_fd)
        if routed is None:
            return self._real["open"](path, flags, mode, dir_fd=dir_fd)
        with self._lock:
            return routed[0].open(routed[1], flags, mode)

    def _open_file(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        """``open()``: a writing open of a modelled path creates and truncates through the model;
        the object's own writes are not interposed (its faults come at open and at fsync)."""
        real = self._real["io.open"]
        if (
            isinstance(file, int)
            or not _WRITING_MODES.intersection(mode)
            or "opener" in kwargs
            or len(args) > 5
        ):
            return real(file, mode, *args, **kwargs)
        routed = self._route(file)
        if routed is None:
            return real(file, mode, *args, **kwargs)
        disk, path = routed

        def opener(_: str, flags: int) -> int:
            with self._lock:
                fd = disk.open(path, flags, 0o666)
                entry = self._fds.pop(fd)  # C closes it: never route this number by itself
                if "+" in mode and isinstance(entry.node, File):
                    disk.keep_durable(entry.node, fd)  # it may write anywhere
                self._transient[fd] = (entry, os.fstat(fd).st_ino)
                return fd

        return real(file, mode, *args, opener=opener, **kwargs)

    def _write(self, fd: int, data: Any) -> int:
        found = self._disk_of(fd)
        if found is None:
            return self._real["write"](fd, data)
        with self._lock:
            return found[0].write(found[1], fd, data, None)

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        found = self._disk_of(fd)
        if found is None:
            return self._real["pwrite"](fd, data, offset)
        with self._lock:
            return found[0].write(found[1], fd, data, offset)

    def _ftruncate(self, fd: int, length: int) -> None:
        found = self._disk_of(fd)
        if found is None:
            return self._real["ftruncate"](fd, length)
        with self._lock:
            return found[0].ftruncate(found[1], fd, length)

    def _fsync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        found = self._disk_of(fd)
        if found is None:
            transient = self._transient.get(fd)
            if transient is None or os.fstat(fd).st_ino != transient[1]:
                return self._real["fsync"](fd)
            found = transient[0].disk, transient[0]
        with self._lock:
            return found[0].fsync(found[1], fd)

    def _fdatasync(self, fd: Any) -> None:
        return self._fsync(fd)

    def _close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self._transient.pop(fd, None)
        return self._real["close"](fd)

    def _rename_like(
        self, real: str, src: Any, dst: Any, src_dir_fd: int | None, dst_dir_fd: int | None
    ) -> None:
        s, d = self._route(src, src_dir_fd), self._route(dst, dst_dir_fd)
        if s is None and d is None:
            return self._real[real](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        if s is None or d is None or s[0] is not d[0]:
            raise AssertionError(f"sim storage: {real} across a disk's boundary: {src} -> {dst}")
        with self._lock:
            return s[0].rename(real, s[1], d[1])

    def _rename(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        return self._rename_like("rename", src, dst, src_dir_fd, dst_dir_fd)

    def _replace(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        return self._rename_like("replace", src, dst, src_dir_fd, dst_dir_fd)

    def _remove_path(self, real: str, path: Any, dir_fd: int | None) -> None:
        routed = self._route(path, dir_fd)
        if routed is None:
            return self._real[real](path, dir_fd=dir_fd)
        with self._lock:
            return routed[0].remove(real, routed[1])

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_path("unlink", path, dir_fd)

    def _remove(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_path("remove", path, dir_fd)

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_path("rmdir", path, dir_fd)

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        routed = self._route(path, dir_fd)
        if routed is None:
            return self._real["mkdir"](path, mode, dir_fd=dir_fd)
        with self._lock:
            return routed[0].mkdir(routed[1], mode)
