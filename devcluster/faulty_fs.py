"""A fault-injecting FUSE passthrough filesystem: the ``disk-error`` fault of the local runner
(docs/operations.md, "Disk faults").

It mirrors ``BACKING_DIR`` at ``MOUNTPOINT`` (libfuse3 through ``mfusepy``, the FUSE high-level
API: every call is the same call on the backing path or file descriptor). In **error mode** each
call that would change the disk fails with an errno (EIO by default) while everything that only
reads keeps working, so the broker's very next write, fsync, fdatasync, truncate, ftruncate,
create, rename, mkdir, unlink, ... under its log dir fails the way a dying disk fails it. That
is what Kafka's log-dir failure handling (KIP-112, ``LogDirFailureChannel``) reacts to: the
dir goes offline, and a broker whose every log dir is offline halts.

Control: a small **control file** outside the mount holding one word, ``ok`` or an errno name
(``EIO``, ``ENOSPC``, ...). Every call that would change the disk first ``stat``s the file
(about a microsecond, against tens of microseconds for a FUSE round trip) and re-reads it only
when its inode, size or mtime changed; :func:`write_mode` replaces it atomically (a new inode),
so the very next call after ``write_mode`` returns sees the new mode. A missing file means
``ok``. A file rather than signals because libfuse's loop holds the main thread, where Python
runs signal handlers, and because a file is checked synchronously with the call it governs.

What a passthrough cannot imitate: a failed fsync that loses the page cache's bytes (the bytes
are already in the backing file, so they are there again after the heal).

Run it as ``python -m devcluster.faulty_fs BACKING_DIR MOUNTPOINT --control FILE`` (foreground; it
exits when unmounted: ``fusermount3 -u -z MOUNTPOINT``). libfuse changes the working directory
to ``/``, so every path here is made absolute first.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

OK = "ok"
FSNAME = "floodmark-faulty-fs"


def parse_mode(text: str) -> int:
    """``ok`` -> 0; an errno name (``EIO``, ``eio``) -> its number; anything else is an error."""
    word = text.strip()
    if word.lower() in ("", OK):
        return 0
    number = getattr(errno, word.upper(), None)
    if not isinstance(number, int) or number <= 0:
        raise ValueError(f"unknown mode {word!r}: use 'ok' or an errno name such as EIO")
    return number


def write_mode(control: Path, mode: str) -> None:
    """Switch a running filesystem to ``mode`` (``ok``, ``EIO``, ...): atomic, seen by the next call."""
    parse_mode(mode)
    tmp = control.with_name(control.name + ".tmp")
    tmp.write_text(mode.strip() + "\n")
    os.replace(tmp, control)


def read_mode(control: Path) -> str:
    try:
        return control.read_text().strip() or OK
    except FileNotFoundError:
        return OK


class ControlFile:
    """The current errno (0 = pass through), re-read only when the control file changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, int, int] | None = None
        self._errno = 0
        self._lock = threading.Lock()

    def current(self) -> int:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            with self._lock:
                try:
                    self._errno = parse_mode(self.path.read_text())
                except (OSError, ValueError) as exc:
                    log.warning("control file %s: %s; passing through", self.path, exc)
                    self._errno = 0
                self._key = key
        return self._errno


def _mfusepy() -> Any:
    try:
        import mfusepy
    except (ImportError, OSError) as exc:  # OSError: libfuse3.so.3 missing
        raise RuntimeError(
            f"the FUSE library is not usable ({exc}): install the Debian packages fuse3 and libfuse3-3 "
            "(`make setup` as root) and the PyPI package mfusepy"
        ) from None
    return mfusepy


def make_operations(backing: Path, control: ControlFile) -> Any:
    """An ``mfusepy.Operations`` passing every call through to ``backing``, faulting writes."""
    fuse = _mfusepy()
    root = str(backing.resolve())

    def full(path: str) -> str:
        return root + path if path != "/" else root

    def check() -> None:
        code = control.current()
        if code:
            raise fuse.FuseOSError(code)

    class FaultyPassthrough(fuse.Operations):
        use_ns = True

        # -- reads: always pass through ---------------------------------------------------------
        def access(self, path: str, amode: int) -> int:
            if not os.access(full(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(full(path))
            attrs = {
                key: getattr(st, key)
                for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev")
            }
            attrs |= {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}
            attrs |= {"st_blocks": st.st_blocks, "st_blksize": st.st_blksize}
            return attrs

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(full(path))]

        def readlink(self, path: str) -> str:
            return os.readlink(full(path))

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(full(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
            return {key: getattr(sv, key) for key in (*keys, "f_flag", "f_frsize", "f_namemax")}

        def open(self, path: str, flags: int) -> int:
            if flags & os.O_TRUNC:
                check()
            return os.open(full(path), flags)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def flush(self, path: str, fh: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        # -- writes: fail in error mode ---------------------------------------------------------
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            check()
            return os.pwrite(fh, data, offset)

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            check()
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            check()
            fd = os.open(full(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            check()
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(full(path), length)
            return 0

        def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
            check()
            return os.open(full(path), flags | os.O_CREAT, mode)

        def rename(self, old: str, new: str) -> int:
            check()
            os.rename(full(old), full(new))
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            check()
            os.mkdir(full(path), mode)
            return 0

        def mknod(self, path: str, mode: int, dev: int) -> int:
            check()
            os.mknod(full(path), mode, dev)
            return 0

        def unlink(self, path: str) -> int:
            check()
            os.unlink(full(path))
            return 0

        def rmdir(self, path: str) -> int:
            check()
            os.rmdir(full(path))
            return 0

        def link(self, target: str, source: str) -> int:
            check()
            os.link(full(source), full(target))
            return 0

        def symlink(self, target: str, source: str) -> int:
            check()
            os.symlink(source, full(target))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            check()
            os.chmod(full(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            check()
            os.chown(full(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            check()
            os.utime(full(path), ns=times) if times else os.utime(full(path))
            return 0

    return FaultyPassthrough()


def serve(backing: Path, mountpoint: Path, control: Path) -> None:
    """Mount and serve until unmounted (blocks; foreground, multithreaded)."""
    fuse = _mfusepy()
    backing, mountpoint, control = backing.resolve(), mountpoint.resolve(), control.resolve()
    if not backing.is_dir():
        raise RuntimeError(f"backing dir {backing} does not exist")
    operations = make_operations(backing, ControlFile(control))
    log.info("serving %s at %s (control file %s, mode %s)", backing, mountpoint, control, read_mode(control))
    fuse.FUSE(operations, str(mountpoint), foreground=True, fsname=FSNAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.faulty_fs",
        description="A passthrough FUSE filesystem that fails every write with an errno on demand.",
    )
    parser.add_argument("backing", type=Path, help="the directory whose contents are served")
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument(
        "--control", type=Path, required=True, help="file holding 'ok' or an errno name (EIO, ENOSPC)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(args.backing, args.mountpoint, args.control)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
