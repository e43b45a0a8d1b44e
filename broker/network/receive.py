"""Receiving frames on the broker (Kafka's ``NetworkReceive``; docs/design.md "Wire protocol").

Sans-IO: a connection feeds the bytes it reads and asks for the size of the frame at the head
(checked against ``socket.request.max.bytes`` before any body is buffered) before it takes the
frame out, so it can ask the :class:`~broker.network.memory_pool.MemoryPool` for the frame's
bytes in between. The bytes are the framing of client/protocol/framing.py (a 4-byte big-endian
length, then the payload).
"""

from __future__ import annotations

from client.protocol.framing import LENGTH, FrameTooLarge


class FrameReceive:
    """Buffered bytes of one connection, taken out one frame at a time."""

    __slots__ = ("max_frame_bytes", "_buffer")

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def frame_size(self) -> int | None:
        """The payload size of the frame at the head, None until its length is in. Raises
        FrameTooLarge for a length over the limit."""
        if len(self._buffer) < 4:
            return None
        (size,) = LENGTH.unpack_from(self._buffer, 0)
        if size > self.max_frame_bytes:
            raise FrameTooLarge(size, self.max_frame_bytes)
        return size

    def take(self, size: int) -> bytes | None:
        """The head frame's payload (of ``size`` bytes, from :meth:`frame_size`), or None while
        it is incomplete."""
        end = 4 + size
        if len(self._buffer) < end:
            return None
        with memoryview(self._buffer) as view:
            payload = bytes(view[4:end])  # one copy (a bytearray slice would make two)
        del self._buffer[:end]
        return payload
