"""The broker-wide segment file cache (issue 25 item 1; docs/design.md "Open files at scale
(issue 25)"): an LRU of segment ``.log`` descriptors bounded by ``log.segment.open.files.max``.

Each test counts the descriptors this process really holds on the test's files
(``/proc/self/fd``), not only what the cache says: the bound holds, the least recently used idle
descriptor is the one closed, a pinned one is never closed under its user, a closed handle reopens
on demand (following a rename), EMFILE closes idle descriptors and tries again, and threads sharing
one small cache read the right bytes.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from pathlib import Path

import pytest

from broker.log import file_cache as file_cache_module
from broker.log.file_cache import SegmentFile, SegmentFileCache

REAL_OPEN = os.open


def fds_under(root: Path) -> list[str]:
    """The paths of this process's descriptors that point under ``root``."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        if target.startswith(str(root)):
            out.append(target)
    return out


def files(root: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = root / f"{i:020d}.log"
        path.write_bytes(f"segment {i}".encode())
        paths.append(path)
    return paths


def read(handle: SegmentFile) -> bytes:
    with handle.pinned() as fd:
        return os.pread(fd, 100, 0)


def test_the_bound_holds_and_the_least_recently_used_idle_descriptor_is_closed(tmp_path: Path) -> None:
    cache = SegmentFileCache(2)
    a, b, c = (cache.handle(p) for p in files(tmp_path, 3))
    assert fds_under(tmp_path) == [], "a handle opens nothing until it is used"
    assert read(a) == b"segment 0" and read(b) == b"segment 1"
    read(a)  # a is now the most recently used: b goes first
    assert read(c) == b"segment 2"
    assert (a.fd >= 0, b.fd, c.fd >= 0) == (True, -1, True)
    assert sorted(fds_under(tmp_path)) == [str(a.path), str(c.path)]
    stats = cache.stats
    assert (stats.open, stats.pinned, stats.max_open, stats.opens, stats.evictions) == (2, 0, 2, 3, 1)
    assert read(b) == b"segment 1", "an evicted handle reopens on demand"
    assert a.fd == -1 and len(fds_under(tmp_path)) == 2


def test_a_pinned_descriptor_is_never_closed_under_its_user(tmp_path: Path) -> None:
    cache = SegmentFileCache(1)
    a, b = (cache.handle(p) for p in files(tmp_path, 2))
    with a.pinned() as fd_a:
        assert read(b) == b"segment 1"  # over the bound while a is pinned: b is the one closed
        assert b.fd == -1 and cache.stats.open == 1
        with b.pinned():
            assert cache.stats.open == 2 and cache.stats.pinned == 2  # two calls in flight
            assert os.pread(fd_a, 100, 0) == b"segment 0"
        assert os.pread(fd_a, 100, 0) == b"segment 0", "a pinned descriptor was closed"
    assert cache.stats.open == 1 and cache.stats.pinned == 0
    assert fds_under(tmp_path) == [str(a.path)]


def test_closing_a_pinned_handle_waits_for_the_last_unpin(tmp_path: Path) -> None:
    cache = SegmentFileCache(4)
    (a,) = (cache.handle(p) for p in files(tmp_path, 1))
    with a.pinned() as fd:
        a.close()
        assert os.pread(fd, 100, 0) == b"segment 0"
    assert fds_under(tmp_path) == [] and cache.stats.open == 0
    with pytest.raises(OSError) as closed:
        read(a)
    assert closed.value.errno == errno.EBADF


def test_appends_through_a_reopened_descriptor_land_at_the_end(tmp_path: Path) -> None:
    """Every descriptor is O_APPEND: an append after an eviction lands after the bytes written
    through the closed one (nothing is lost by closing: the page cache holds it)."""
    cache = SegmentFileCache(1)
    a, b = cache.handle(tmp_path / "a.log"), cache.handle(tmp_path / "b.log")
    a.create()
    b.create()
    for turn in range(3):
        for handle in (a, b):  # each append evicts the other handle's descriptor
            with handle.pinned() as fd:
                os.write(fd, f"{handle.path.name}{turn};".encode())
    assert (tmp_path / "a.log").read_bytes() == b"a.log0;a.log1;a.log2;"
    assert (tmp_path / "b.log").read_bytes() == b"b.log0;b.log1;b.log2;"
    assert cache.stats.opens == 8 and len(fds_under(tmp_path)) == 1  # 2 creates + 6 appends


def test_a_reopen_follows_a_rename(tmp_path: Path) -> None:
    """The log cleaner renames a segment's files while its descriptor may be open."""
    cache = SegmentFileCache(1)
    (a,) = (cache.handle(p) for p in files(tmp_path, 1))
    read(a)
    os.rename(a.path, tmp_path / "renamed.log")
    a.path = tmp_path / "renamed.log"
    assert read(a) == b"segment 0"  # the open descriptor
    cache.close_idle()
    assert read(a) == b"segment 0" and fds_under(tmp_path) == [str(tmp_path / "renamed.log")]


def test_emfile_closes_half_the_idle_descriptors_and_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under file pressure (the limit lowered at run time, sockets past their share) the cache
    gives descriptors back instead of failing the read; a second EMFILE goes to the caller."""
    cache = SegmentFileCache(10)
    handles = [cache.handle(p) for p in files(tmp_path, 6)]
    for handle in handles[:4]:
        read(handle)
    refusals = [1]

    def open_refusing(path, flags, mode=0o777):  # noqa: ANN001, ANN202
        if refusals and str(path).endswith(handles[4].path.name):
            refusals.pop()
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return REAL_OPEN(path, flags, mode)

    monkeypatch.setattr(file_cache_module.os, "open", open_refusing)
    assert read(handles[4]) == b"segment 4"
    assert [h.fd >= 0 for h in handles[:5]] == [False, False, True, True, True], "the two oldest go"
    assert cache.stats.exhaustion_evictions == 2 and len(fds_under(tmp_path)) == 3

    def always_refusing(path, flags, mode=0o777):  # noqa: ANN001, ANN202
        raise OSError(errno.EMFILE, "Too many open files", str(path))

    monkeypatch.setattr(file_cache_module.os, "open", always_refusing)
    with pytest.raises(OSError) as refused:
        read(handles[5])
    assert refused.value.errno == errno.EMFILE and cache.stats.pinned == 0


def test_threads_sharing_a_small_cache_read_the_right_bytes(tmp_path: Path) -> None:
    cache = SegmentFileCache(3)
    handles = [cache.handle(p) for p in files(tmp_path, 12)]
    errors: list[str] = []
    peak = [0]

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            i = rng.randrange(len(handles))
            got = read(handles[i])
            peak[0] = max(peak[0], cache.stats.open)
            if got != f"segment {i}".encode():
                errors.append(f"handle {i} read {got!r}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert peak[0] <= 3 + len(threads), "more open than the bound plus the calls in flight"
    assert cache.stats.open <= 3 and len(fds_under(tmp_path)) <= 3
