"""The request memory pool: ``queued.max.request.bytes`` (Kafka's ``MemoryPool`` /
``SimpleMemoryPool``, KIP-72; docs/design.md "Broker").

A connection asks the pool for a frame's size as soon as the frame's 4-byte length is read, and
buffers the body only once the pool has granted it; the grant is released when the request is
answered (or the connection closes). A connection the pool cannot serve stops reading its socket
and waits, so the bytes of every request being received, queued or handled stay within the pool,
however many clients send partial frames and stall.

Unlike Kafka's pool (unbounded by default, and non-strict: any free byte admits a frame of any
size) this one is strict, with two rules that keep a few huge stalled frames from starving
everyone else:

- a frame larger than ``small_frame_bytes`` (a *large* frame) is granted only while large frames
  hold at most half the pool with it, so small requests (fetches, ordinary produce requests)
  always have the other half;
- a frame larger than what the rules allow is still granted when the pool (or, for a large frame,
  the large half) holds nothing, so a frame up to ``socket.request.max.bytes`` is never refused
  for good: memory stays under ``max(capacity, socket.request.max.bytes)``.

Waiters are served first come, first served among those that fit; a waiter that does not fit
never blocks a smaller one behind it.
"""

from __future__ import annotations

from collections.abc import Callable

#: Frames up to this size draw on the whole pool; larger ones share half of it.
SMALL_FRAME_BYTES = 1024 * 1024


class MemoryPool:
    """Grants frame buffers out of ``capacity`` bytes (None: unbounded, Kafka's ``MemoryPool.NONE``)."""

    def __init__(self, capacity: int | None, small_frame_bytes: int = SMALL_FRAME_BYTES) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("a memory pool needs a positive capacity (None for unbounded)")
        self.capacity = capacity
        self.small_frame_bytes = small_frame_bytes
        self.used = 0
        self.large_used = 0
        #: Waiting callers in arrival order: key -> (size, callback run once granted).
        self._waiters: dict[object, tuple[int, Callable[[], None]]] = {}

    @property
    def available(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.used

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        capacity = self.capacity
        if capacity is None:
            return True
        if self.used and self.used + size > capacity:
            return False
        return (
            size <= self.small_frame_bytes or not self.large_used or self.large_used + size <= capacity // 2
        )

    def try_allocate(self, size: int) -> bool:
        """Grant ``size`` bytes now if the rules allow it (and nobody who fits waits ahead)."""
        if not self._fits(size):
            return False
        self._take(size)
        return True

    def _take(self, size: int) -> None:
        self.used += size
        if size > self.small_frame_bytes:
            self.large_used += size

    def wait(self, key: object, size: int, on_granted: Callable[[], None]) -> None:
        """Queue ``key`` for ``size`` bytes; ``on_granted`` runs (from a :meth:`release`) once the
        bytes are taken for it. One wait per key."""
        self._waiters[key] = (size, on_granted)

    def withdraw(self, key: object) -> None:
        """Forget a waiter (its connection closed)."""
        self._waiters.pop(key, None)

    def release(self, size: int) -> None:
        self.used -= size
        if size > self.small_frame_bytes:
            self.large_used -= size
        if self._waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        granted = []
        for key, (size, on_granted) in self._waiters.items():
            if self._fits(size):
                self._take(size)
                granted.append((key, on_granted))
        for key, _ in granted:
            del self._waiters[key]
        for _, on_granted in granted:
            on_granted()
