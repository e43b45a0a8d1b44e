"""A fault-injecting file system layer for the log's crash and power-loss tests (test-only).

:class:`CrashFS` intercepts, for files under one root directory, the os-level calls the log
layer (broker/log) makes: ``os.open`` (creating or truncating), ``os.write``, ``os.ftruncate``,
``os.fsync``, ``os.replace``/``os.rename``, ``os.unlink``, ``os.mkdir``/``os.rmdir``, and the two
writers that bypass ``os``: ``Path.write_bytes`` (producer snapshots) and the ``open(tmp, "w")``
of :func:`broker.log.checkpoint.atomic_write_text`. Every mutating call is numbered (1, 2, ...)
and recorded in :attr:`CrashFS.calls`, so a failure names its crash point.

Two fault models:

* **process crash** at call N (``crash_at=N``): the call is left half done (a write writes half
  its bytes; a rename, unlink, truncate or fsync takes effect), then :class:`Crash` (a
  ``BaseException``, so no ``except OSError`` or ``except Exception`` in the code under test
  swallows it) propagates, and every later call raises it again without touching the disk: the
  process is dead. Leaving the ``with`` block closes every descriptor it opened (the kernel would).
  ``fault="eio"`` raises ``OSError(EIO)`` at call N instead, before the call does anything, and
  lets the process live on (the log takes its dir offline).
* **power loss** (:meth:`CrashFS.power_loss`, after the ``with`` block): only what was fsynced
  survives. The model is an inode table: a file's durable content is its content at its last
  fsync (empty if never fsynced), a directory's durable entries are its entries at its last
  fsync (a rename or unlink not followed by an fsync of the directory is undone; a file whose
  name was never made durable disappears). Real fsyncs are skipped (the model is the disk).
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import broker.log.checkpoint as checkpoint_module

_PATCHED = ("open", "write", "ftruncate", "fsync", "replace", "rename", "unlink", "mkdir", "rmdir", "close")
_REAL = {name: getattr(os, name) for name in _PATCHED}
_REAL_WRITE_BYTES = pathlib.Path.write_bytes
_ROOT_ID = 0


class Crash(BaseException):  # noqa: N818 - it is what happens, not an error
    """The process died at a system call."""


@dataclass(frozen=True)
class Call:
    n: int
    op: str
    path: str

    def __str__(self) -> str:
        return f"call #{self.n}: {self.op} {self.path}"


class _TextFile:
    """``open(path, "w")`` for atomic_write_text, writing through (patched) os calls."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, text: str) -> int:
        _write_all(self._fd, text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._fd

    def __enter__(self) -> _TextFile:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_bytes(self: Path, data: bytes) -> int:
    fd = os.open(self, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)
    return len(data)


def _checkpoint_open(file, mode: str = "r", *args, **kwargs):  # noqa: ANN001, ANN202 - open()'s shape
    if mode == "w":
        return _TextFile(file)
    return open(file, mode, *args, **kwargs)  # noqa: SIM115


class CrashFS:
    """Use as a context manager around the code under test; see the module docstring."""

    def __init__(
        self, root: Path, *, crash_at: int | None = None, fault: Literal["crash", "eio"] = "crash"
    ) -> None:
        self.root = os.path.abspath(root)
        self.crash_at = crash_at
        self.fault = fault
        self.calls: list[Call] = []
        self.crashed: Call | None = None
        self._dead = False
        self._next_id = _ROOT_ID + 1
        self._path_id: dict[str, int] = {self.root: _ROOT_ID}
        self._is_dir: dict[int, bool] = {_ROOT_ID: True}
        self._fd_file: dict[int, int] = {}
        self._fd_dir: dict[int, int] = {}
        self._fd_name: dict[int, str] = {}
        self._durable_data: dict[int, bytes] = {}
        self._durable_dir: dict[int, dict[str, int]] = {}

    # ------------------------------------------------------------------ install / uninstall

    def __enter__(self) -> CrashFS:
        self._adopt_tree()
        for name in _PATCHED:
            setattr(os, name, getattr(self, "_" + name))
        pathlib.Path.write_bytes = _write_bytes  # type: ignore[method-assign]
        checkpoint_module.open = _checkpoint_open  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        for name in _PATCHED:
            setattr(os, name, _REAL[name])
        pathlib.Path.write_bytes = _REAL_WRITE_BYTES  # type: ignore[method-assign]
        del checkpoint_module.open  # type: ignore[attr-defined]
        for fd in [*self._fd_file, *self._fd_dir]:
            _REAL["close"](fd)
        self._fd_file.clear()
        self._fd_dir.clear()
        self._dead = True  # objects of the dead process must not touch the disk again

    def _adopt_tree(self) -> None:
        """Everything already under the root is durable (the test starts from a synced disk)."""
        for dirpath, dirnames, filenames in os.walk(self.root):
            entries: dict[str, int] = {}
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                ino = entries[name] = self._new_id(path, is_dir=name in dirnames)
                if name in filenames:
                    with open(path, "rb") as f:
                        self._durable_data[ino] = f.read()
            self._durable_dir[self._path_id[dirpath]] = entries

    def _new_id(self, path: str, is_dir: bool) -> int:
        ino = self._next_id
        self._next_id += 1
        self._path_id[path] = ino
        self._is_dir[ino] = is_dir
        return ino

    # ------------------------------------------------------------------ fault points

    def _under(self, path: object, dir_fd: int | None = None) -> str | None:
        if dir_fd is not None:
            assert dir_fd not in self._fd_dir, "dir_fd-relative calls under the root are not modelled"
            return None
        p = os.path.abspath(os.fspath(path))  # type: ignore[call-overload]
        return p if p == self.root or p.startswith(self.root + os.sep) else None

    def _begin(self, op: str, path: str, to: str | None = None) -> bool:
        """Number the call; raise at once for EIO or a dead process; True: crash after it."""
        if self._dead:
            raise Crash(f"{op} {path} after the crash at {self.crashed}")
        shown = os.path.relpath(path, self.root)
        if to is not None:
            shown += " -> " + os.path.relpath(to, self.root)
        call = Call(len(self.calls) + 1, op, shown)
        self.calls.append(call)
        if call.n != self.crash_at:
            return False
        if self.fault == "eio":
            raise OSError(errno.EIO, f"injected I/O error at {call}")
        return True

    def _die(self) -> None:
        self._dead = True
        self.crashed = self.calls[-1]
        raise Crash(str(self.crashed))

    # ------------------------------------------------------------------ the intercepted calls

    def _open(self, path, flags, mode=0o777, *, dir_fd=None):  # noqa: ANN001, ANN202 - os.open's shape
        p = self._under(path, dir_fd)
        if p is None:
            return _REAL["open"](path, flags, mode, dir_fd=dir_fd)
        exists = p in self._path_id
        crash = False
        if flags & os.O_CREAT and not exists:
            crash = self._begin("create", p)
        elif flags & os.O_TRUNC and exists and os.path.getsize(p):
            crash = self._begin("truncate", p)
        fd = _REAL["open"](p, flags, mode)
        if not exists:
            self._new_id(p, is_dir=False)
        if self._is_dir[self._path_id[p]]:
            self._fd_dir[fd] = self._path_id[p]
        else:
            self._fd_file[fd] = self._path_id[p]
        self._fd_name[fd] = p
        if crash:
            self._die()
        return fd

    def _write(self, fd, data):  # noqa: ANN001, ANN202
        if fd not in self._fd_file:
            return _REAL["write"](fd, data)
        if self._begin("write", self._fd_name[fd]):
            _REAL["write"](fd, memoryview(data)[: len(data) // 2])
            self._die()
        return _REAL["write"](fd, data)

    def _ftruncate(self, fd, length):  # noqa: ANN001, ANN202
        if fd not in self._fd_file:
            return _REAL["ftruncate"](fd, length)
        crash = self._begin("truncate", self._fd_name[fd])
        _REAL["ftruncate"](fd, length)
        if crash:
            self._die()

    def _fsync(self, fd):  # noqa: ANN001, ANN202
        if fd in self._fd_file:
            crash = self._begin("fsync", self._fd_name[fd])
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                self._durable_data[self._fd_file[fd]] = f.read()
        elif fd in self._fd_dir:
            crash = self._begin("fsync-dir", self._fd_name[fd])
            self._durable_dir[self._fd_dir[fd]] = self._entries(self._fd_name[fd])
        else:
            return _REAL["fsync"](fd)
        if crash:
            self._die()

    def _entries(self, dir_path: str) -> dict[str, int]:
        return {
            os.path.basename(p): ino for p, ino in self._path_id.items() if os.path.dirname(p) == dir_path
        }

    def _rename_like(self, real: str, src, dst, src_dir_fd=None, dst_dir_fd=None):  # noqa: ANN001, ANN202
        s, d = self._under(src, src_dir_fd), self._under(dst, dst_dir_fd)
        if s is None and d is None:
            return _REAL[real](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        assert s is not None and d is not None, f"{real} across the root: {src} -> {dst}"
        crash = self._begin("rename", s, d)
        _REAL[real](s, d)
        for p in [p for p in self._path_id if p == s or p.startswith(s + os.sep)]:
            self._path_id[d + p[len(s) :]] = self._path_id.pop(p)
        if crash:
            self._die()

    def _replace(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # noqa: ANN001, ANN202
        return self._rename_like("replace", src, dst, src_dir_fd, dst_dir_fd)

    def _rename(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # noqa: ANN001, ANN202
        return self._rename_like("rename", src, dst, src_dir_fd, dst_dir_fd)

    def _remove(self, real: str, op: str, path, dir_fd) -> None:  # noqa: ANN001
        p = self._under(path, dir_fd)
        if p is None:
            return _REAL[real](path, dir_fd=dir_fd)
        crash = self._begin(op, p)
        _REAL[real](p)
        self._path_id.pop(p, None)
        if crash:
            self._die()
        return None

    def _unlink(self, path, *, dir_fd=None):  # noqa: ANN001, ANN202
        return self._remove("unlink", "unlink", path, dir_fd)

    def _rmdir(self, path, *, dir_fd=None):  # noqa: ANN001, ANN202
        return self._remove("rmdir", "rmdir", path, dir_fd)

    def _mkdir(self, path, mode=0o777, *, dir_fd=None):  # noqa: ANN001, ANN202
        p = self._under(path, dir_fd)
        if p is None or p in self._path_id:  # outside the root, or FileExistsError
            return _REAL["mkdir"](path, mode, dir_fd=dir_fd)
        crash = self._begin("mkdir", p)
        _REAL["mkdir"](p, mode)
        self._durable_dir[self._new_id(p, is_dir=True)] = {}
        if crash:
            self._die()
        return None

    def _close(self, fd):  # noqa: ANN001, ANN202
        self._fd_file.pop(fd, None)
        self._fd_dir.pop(fd, None)
        self._fd_name.pop(fd, None)
        return _REAL["close"](fd)

    # ------------------------------------------------------------------ power loss

    def power_loss(self) -> None:
        """Rewrite the root to what the model says survived (call after the ``with`` block)."""
        assert os.open is _REAL["open"], "power_loss() runs after the with block"
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        self._restore(_ROOT_ID, self.root)

    def _restore(self, dir_id: int, dir_path: str) -> None:
        for name, ino in self._durable_dir.get(dir_id, {}).items():
            path = os.path.join(dir_path, name)
            if self._is_dir[ino]:
                os.mkdir(path)
                self._restore(ino, path)
            else:
                with open(path, "wb") as f:
                    f.write(self._durable_data.get(ino, b""))
