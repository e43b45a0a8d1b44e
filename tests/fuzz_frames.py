"""Malformed frames for fuzzing a broker's network layer (SPEC 5.1 "Limits", 5.2 framing).

:func:`malformed_frames` yields ``(kind, raw bytes)`` covering garbage, lengths over the limit,
truncated bodies, valid msgpack of the wrong shape, wrong types in headers and bodies, unknown API
keys, unsupported versions and huge nesting. :func:`hammer` writes them over many connections,
tolerating resets, bounded in time. Plain functions, randomness injected, so a test (or a fuzz run
against a whole broker) can replay a failing seed.

What a correct broker does with each kind (see :data:`EXPECTED`): ``"close"`` kinds have no
readable correlation id (or an oversize length) and the broker closes the connection;
``"error"`` kinds get an error response with the request's correlation id and the connection
stays usable. A ``truncated`` frame must be the last thing written on its connection, which then
closes half-way: :func:`hammer` does that. :func:`hammer` checks both reactions: every "error"
frame answered in order with its correlation id and error code, and every whole "close" frame
(:data:`MUST_CLOSE`) followed by the broker closing the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import msgpack

LENGTH = struct.Struct(">I")
#: Valid API keys to build otherwise well-formed requests around (Metadata, Produce, Fetch...).
KNOWN_API_KEYS = (0, 1, 2, 3, 4, 5, 6, 7, 19, 20)
#: Keys no broker knows (17, 21 sit in gaps of the real numbering).
UNKNOWN_API_KEYS = (17, 21, 99, 1000, -1, 2**31 - 1, -(2**31))

#: The broker's expected reaction to each kind: "close" the connection or answer with an "error".
EXPECTED: dict[str, str] = {
    "garbage": "close",
    "garbage_payload": "close",
    "empty_payload": "close",
    "oversize": "close",
    "truncated": "close",
    "wrong_shape": "close",
    "bad_header": "close",
    "lying_length": "close",
    "huge_nesting": "close",
    "wrong_body_shape": "error",
    "wrong_body_types": "error",
    "unknown_api": "error",
    "unsupported_version": "error",
    "deep_body": "error",
}
#: Kinds after which the writer must end the connection (the frame is deliberately incomplete).
ENDS_CONNECTION = frozenset({"truncated"})
#: "close" kinds written whole, so the broker can and must close on them by itself: not a
#: truncated frame (it waits for the rest), nor garbage (its length prefix may promise more bytes).
MUST_CLOSE = frozenset(k for k, v in EXPECTED.items() if v == "close") - ENDS_CONNECTION - {"garbage"}


def frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _cid(rng: random.Random) -> int:
    return rng.randrange(0, 2**31)


def _garbage(rng: random.Random, max_frame_bytes: int) -> bytes:
    # Raw bytes with no promise about the length prefix: it may be huge, zero, or short.
    return rng.randbytes(rng.randrange(1, 256))


def _garbage_payload(rng: random.Random, max_frame_bytes: int) -> bytes:
    # A valid length, then bytes that are not a msgpack request (0xc1 is never valid msgpack).
    return frame(b"\xc1" + rng.randbytes(rng.randrange(0, max(1, min(512, max_frame_bytes - 1)))))


def _empty_payload(rng: random.Random, max_frame_bytes: int) -> bytes:
    return frame(b"")


def _oversize(rng: random.Random, max_frame_bytes: int) -> bytes:
    size = rng.choice([max_frame_bytes + 1, max_frame_bytes + rng.randrange(2, 1 << 20), 2**32 - 1])
    size = min(size, 2**32 - 1)
    return LENGTH.pack(size) + rng.randbytes(rng.randrange(0, 64))  # a few body bytes, never the lot


def _truncated(rng: random.Random, max_frame_bytes: int) -> bytes:
    payload = pack([3, 0, _cid(rng), "fuzz", {"topics": None}]) + rng.randbytes(rng.randrange(0, 64))
    claimed = min(max_frame_bytes, len(payload) + rng.randrange(1, 4096))
    return LENGTH.pack(claimed) + payload[: rng.randrange(0, len(payload) + 1)]


def _wrong_shape(rng: random.Random, max_frame_bytes: int) -> bytes:
    cid = _cid(rng)
    shapes = [
        {"api_key": 3, "correlation_id": cid},
        "a request",
        cid,
        None,
        [3, 0, cid],
        [3, 0, cid, "fuzz", {}, "extra"],
        [],
        b"\x00\x01",
        3.5,
        True,
    ]
    return frame(pack(rng.choice(shapes)))


def _bad_header(rng: random.Random, max_frame_bytes: int) -> bytes:
    cid = _cid(rng)
    headers = [
        ["3", 0, cid, "fuzz", {}],
        [3, "0", cid, "fuzz", {}],
        [3, 0, str(cid), "fuzz", {}],
        [3, 0, float(cid), "fuzz", {}],
        [3, 0, 2**40, "fuzz", {}],
        [3, 0, -(2**31) - 1, "fuzz", {}],
        [3, 0, None, "fuzz", {}],
        [3, 0, True, "fuzz", {}],
        [3, 0, cid, 12, {}],
        [3, 0, cid, b"bytes-client-id", {}],
        [None, None, None, None, None],
    ]
    return frame(pack(rng.choice(headers)))


def _lying_length(rng: random.Random, max_frame_bytes: int) -> bytes:
    # msgpack containers that claim billions of items in a few bytes.
    return frame(
        rng.choice(
            [
                b"\xdd\xff\xff\xff\xff",
                b"\xdf\xff\xff\xff\xff",
                b"\xdb\xff\xff\xff\xff",
                b"\xc6\x7f\xff\xff\xff",
            ]
        )
    )


def _huge_nesting(rng: random.Random, max_frame_bytes: int) -> bytes:
    # msgpack refuses nesting past 1024; a frame over the limit is refused by length anyway.
    depth = rng.randrange(1_100, 50_000)
    opener = rng.choice([b"\x91", b"\x81\x00"])  # [[[...]]] or {0: {0: ...}}
    return frame(opener * depth + b"\xc0")


def _wrong_body_shape(rng: random.Random, max_frame_bytes: int) -> bytes:
    body = rng.choice([[], "topics", 42, None, [{"topics": None}], b"\x00"])
    return frame(pack([rng.choice((0, 1, 3, 19)), 0, _cid(rng), "fuzz", body]))


def _wrong_body_types(rng: random.Random, max_frame_bytes: int) -> bytes:
    bodies = [
        (3, {"topics": 5}),
        (3, {"topics": ["ok", 7]}),
        (3, {"topics": None, "allow_auto_topic_creation": "yes"}),
        (0, {"acks": "all", "timeout_ms": 1, "topics": []}),
        (
            0,
            {
                "acks": -1,
                "timeout_ms": 1,
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": "str"}]}],
            },
        ),
        (1, {"max_wait_ms": 1.5, "min_bytes": 1, "topics": []}),
        (1, {"max_wait_ms": 1, "min_bytes": 2**64 - 1, "topics": []}),
        (19, {"topics": [{"name": None}]}),
        (20, {"topics": "t"}),
        (7, {}),
    ]
    api_key, body = rng.choice(bodies)
    return frame(pack([api_key, 0, _cid(rng), rng.choice(["fuzz", None]), body]))


def _unknown_api(rng: random.Random, max_frame_bytes: int) -> bytes:
    return frame(pack([rng.choice(UNKNOWN_API_KEYS), 0, _cid(rng), "fuzz", {}]))


def _unsupported_version(rng: random.Random, max_frame_bytes: int) -> bytes:
    version = rng.choice([1, 2, 7, 99, -1, 2**31 - 1])
    return frame(pack([rng.choice(KNOWN_API_KEYS), version, _cid(rng), "fuzz", {"topics": None}]))


def _deep_body(rng: random.Random, max_frame_bytes: int) -> bytes:
    # Nesting msgpack accepts (under its 1024 stack), inside a body field the schema types.
    depth = rng.randrange(100, 1000)
    topics = b"\x91" * depth + b"\xc0"
    payload = b"\x95" + pack(3) + pack(0) + pack(_cid(rng)) + pack("fuzz") + b"\x81" + pack("topics") + topics
    return frame(payload)


GENERATORS: dict[str, Callable[[random.Random, int], bytes]] = {
    "garbage": _garbage,
    "garbage_payload": _garbage_payload,
    "empty_payload": _empty_payload,
    "oversize": _oversize,
    "truncated": _truncated,
    "wrong_shape": _wrong_shape,
    "bad_header": _bad_header,
    "lying_length": _lying_length,
    "huge_nesting": _huge_nesting,
    "wrong_body_shape": _wrong_body_shape,
    "wrong_body_types": _wrong_body_types,
    "unknown_api": _unknown_api,
    "unsupported_version": _unsupported_version,
    "deep_body": _deep_body,
}


def malformed_frames(rng: random.Random, count: int, max_frame_bytes: int) -> Iterator[tuple[str, bytes]]:
    """``count`` malformed frames as ``(kind, raw bytes to write)``, every kind in turn (shuffled
    within each round) so even a small count covers them all."""
    kinds = list(GENERATORS)
    produced = 0
    while produced < count:
        rng.shuffle(kinds)
        for kind in kinds[: count - produced]:
            yield kind, GENERATORS[kind](rng, max_frame_bytes)
            produced += 1


@dataclass
class HammerStats:
    frames_sent: int = 0
    connections: int = 0
    resets: int = 0  # connections the server closed or reset while we were writing or waiting
    answered: int = 0  # "error" frames answered with the right correlation id and error code
    unanswered: int = 0  # "error" frames on a clean connection that got no answer in time
    wrong_answers: int = 0  # responses out of order, with another correlation id or error code
    closed: int = 0  # connections the server closed after a MUST_CLOSE frame, as it must
    not_closed: int = 0  # connections still open ``answer_timeout`` after a MUST_CLOSE frame
    bytes_received: int = 0
    timed_out: bool = False
    elapsed: float = 0.0
    by_kind: dict[str, int] = field(default_factory=dict)


#: The error code a correct broker answers each "error" kind with (Kafka's numbers).
ERROR_CODES = {"unsupported_version": 35}  # UNSUPPORTED_VERSION; every other "error" kind: 42
INVALID_REQUEST = 42


class _FuzzConnection(asyncio.Protocol):
    """One hammer connection: writes frames, matches the answers to "error" frames."""

    def __init__(self, stats: HammerStats) -> None:
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.expected: deque[tuple[int, int]] = deque()  # (correlation id, error code), in order
        self.poisoned = False  # a "close" frame was written: later answers are not owed
        self.close_owed = False  # a MUST_CLOSE frame was written: the server owes a close
        self.lost = asyncio.get_running_loop().create_future()
        self.answers_changed = asyncio.Event()
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.stats.bytes_received += len(data)
        self._buffer += data
        while len(self._buffer) >= 4:
            (size,) = LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < 4 + size:
                break
            payload = bytes(self._buffer[4 : 4 + size])
            del self._buffer[: 4 + size]
            self._match(payload)
        self.answers_changed.set()

    def _match(self, payload: bytes) -> None:
        try:
            cid, body = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            code = body["error_code"]
        except Exception:
            self.stats.wrong_answers += 1
            return
        if self.expected and self.expected[0] == (cid, code):
            self.expected.popleft()
            self.stats.answered += 1
        else:
            self.stats.wrong_answers += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.answers_changed.set()

    def write(self, kind: str, data: bytes) -> None:
        assert self.transport is not None
        if EXPECTED.get(kind) == "error" and not self.poisoned:
            cid = msgpack.unpackb(data[4:], raw=False, strict_map_key=False)[2]
            self.expected.append((cid, ERROR_CODES.get(kind, INVALID_REQUEST)))
        elif EXPECTED.get(kind) == "close":
            self.poisoned = True
            self.close_owed = self.close_owed or kind in MUST_CLOSE
        self.transport.write(data)

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) until every owed answer arrived, then count what is missing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.expected and not self.lost.done() and loop.time() < deadline:
            self.answers_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.answers_changed.wait(), deadline - loop.time())
        self.stats.unanswered += len(self.expected)
        self.expected.clear()

    async def await_close(self, timeout: float) -> None:
        """If a MUST_CLOSE frame was written, wait (bounded) for the server to close; count it."""
        if not self.close_owed:
            return
        self.close_owed = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.lost), timeout)
        if self.lost.done():
            self.stats.closed += 1
        else:
            self.stats.not_closed += 1

    async def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.lost), 1.0)
        if self.transport is not None and not self.lost.done():
            self.transport.abort()


async def hammer(
    host: str,
    port: int,
    frames: Iterable[tuple[str, bytes]],
    connections: int = 16,
    timeout: float = 30.0,
    rng: random.Random | None = None,
    linger: float = 0.25,
    answer_timeout: float = 2.0,
) -> HammerStats:
    """Write ``frames`` over ``connections`` concurrent connections and check the answers.

    A writer keeps its connection for "error" kinds and expects, in order, an error response with
    each frame's correlation id (INVALID_REQUEST, or UNSUPPORTED_VERSION). Before a "close" kind it
    waits up to ``answer_timeout`` for what it is owed, writes the frame, waits up to
    ``answer_timeout`` for the server to close the connection (MUST_CLOSE kinds: ``closed`` or
    ``not_closed``) and closes, except that with probability ``linger`` (when ``rng`` is given) it
    keeps writing until the server closes the connection (checked when it does, or at the end).
    After a truncated frame it always ends the connection. Resets are counted, not raised. Returns once every frame is written, or after ``timeout`` seconds with ``timed_out``.
    """
    stats = HammerStats()
    source = iter(frames)
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        conn: _FuzzConnection | None = None
        try:
            for kind, data in source:
                if conn is None or conn.lost.done():
                    if conn is not None:
                        stats.resets += 1
                        await conn.settle(0)
                        await conn.await_close(0)
                    try:
                        _, conn = await loop.create_connection(lambda: _FuzzConnection(stats), host, port)
                    except OSError:
                        stats.resets += 1
                        conn = None
                        await asyncio.sleep(0.01)
                        continue
                    stats.connections += 1
                ends = kind in ENDS_CONNECTION
                lingers = not ends and rng is not None and rng.random() < linger
                if EXPECTED.get(kind) == "close" and not conn.poisoned:
                    await conn.settle(answer_timeout)
                conn.write(kind, data)
                stats.frames_sent += 1
                stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
                if ends or (EXPECTED.get(kind) == "close" and not lingers):
                    await conn.await_close(answer_timeout)
                    await conn.close()
                    conn = None
                elif conn.transport is not None and conn.transport.get_write_buffer_size() > 1 << 20:
                    await conn.settle(answer_timeout)  # a stuck peer: do not buffer without bound
        finally:
            if conn is not None:
                await conn.settle(answer_timeout)
                await conn.await_close(answer_timeout)
                await conn.close()

    started = time.monotonic()
    tasks = [asyncio.create_task(worker()) for _ in range(connections)]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    if pending:
        stats.timed_out = True
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if (exc := task.exception()) is not None:
            raise exc
    stats.elapsed = time.monotonic() - started
    return stats
