"""The fuzz oracle itself (tests/fuzz_frames.py): :func:`hammer` must report a broker that
neither answers "error" frames nor closes on "close" frames, or the bad-input tests that trust
its statistics (tests/integration/test_bad_input.py, test_network.py) could not fail."""

from __future__ import annotations

import asyncio
import random

from tests.fuzz_frames import EXPECTED, GENERATORS, MUST_CLOSE, hammer, malformed_frames

HOST = "127.0.0.1"


async def test_a_broker_that_swallows_every_frame_is_reported() -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(1 << 16):  # reads everything, answers nothing, never closes
            pass
        writer.close()

    server = await asyncio.start_server(swallow, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    frames = list(malformed_frames(random.Random(5), len(GENERATORS), 1 << 20))
    try:
        stats = await hammer(HOST, port, frames, connections=1, timeout=30, answer_timeout=0.05)
    finally:
        server.close()
        await server.wait_closed()
    kinds = [kind for kind, _ in frames]
    assert not stats.timed_out and stats.frames_sent == len(GENERATORS) == len(set(kinds))
    assert stats.answered == 0 and stats.unanswered == sum(EXPECTED[k] == "error" for k in kinds) > 0
    # One connection per "close" frame (no rng: no lingering); each MUST_CLOSE one stayed open.
    assert stats.closed == 0 and stats.not_closed == len(MUST_CLOSE) > 0
