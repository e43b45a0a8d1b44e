"""Receiving frames on the broker (Kafka's ``NetworkReceive``; docs/design.md "Wire protocol").

Sans-IO: a connection feeds the bytes it reads and asks for the size of the frame at the head
(checked against ``socket.request.max.bytes`` before any body is buffered) before it takes the
frame out, so it can ask the :class:`~broker.network.memory_pool.MemoryPool` for the frame's
bytes in between. The bytes are the framing of client/protocol/framing.py (a 4-byte big-endian
length, then the payload).
"""

from __future__ import annotations

from client.protocol.framing import FrameDecoder


class FrameReceive(FrameDecoder):
    """Buffered bytes of one connection, taken out one frame at a time: the client's
    :class:`~client.protocol.framing.FrameDecoder`, whose :meth:`frame_size` and :meth:`take`
    the processor calls apart, asking the memory pool for the frame's bytes in between."""
