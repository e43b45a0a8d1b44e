"""Malformed Kafka-protocol frames for fuzzing a KAFKA listener (docs/design.md "Two wire
protocols"), all drawn from one seeded ``random.Random`` so that a failure replays from its seed.

:func:`bad_frames` gives :class:`BadFrame` s of each kind of :data:`KINDS`: lying length
prefixes, unknown API keys, versions out of range (served APIs and not, ApiVersions included),
truncated strings and arrays, negative lengths, tagged fields that lie about their size (request
header v2 and body) or that no schema declares, trailing bytes, bit flips of valid requests,
frames cut short by EOF and incremental fetches. The valid requests they start from are written
by kafka-python (tests/kafka_oracle.py), not by the broker's codec. Each frame says what a broker
must do with it: answer it under its correlation id (``ANSWER``, with what the answer must say),
close the connection on it (``CLOSE``: the last frame of its connection), or either (``EITHER``:
a flipped bit may leave a valid request or spoil one).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.index import load_response_schema
from kio.schema.index import api_key_map

from tests.kafka_oracle import (
    API_VERSIONS,
    FETCH,
    HEADER,
    INT16,
    INT32,
    LENGTH,
    LIST_OFFSETS,
    METADATA,
    NO_SESSION,
    PRODUCE,
    RECORDS,
    TEMPLATE_APIS,
    UNSUPPORTED,
    VERSIONS_V0,
    Built,
    Served,
    build,
    fetch_request,
    frame,
    is_flexible,
    kio_versions,
    kp_knows,
    uvarint,
    written,
)

ANSWER, CLOSE, EITHER = "answer", "close", "either"


@dataclass(frozen=True, slots=True)
class BadFrame:
    """``data`` is written as it is (length prefix included); ``eof``: then the client's write side
    is shut, so it must be the last frame on its connection (as every ``CLOSE`` frame is)."""

    kind: str
    data: bytes
    expect: str
    check: str | None = None
    eof: bool = False

    @property
    def header(self) -> tuple[int, int, int]:
        """``(api_key, api_version, correlation_id)`` of the payload (what an answer addresses)."""
        return HEADER.unpack_from(self.data, 4)


# -- the frame source -----------------------------------------------------------------------------


class FrameSource:
    """Builds the frames of each kind from one seeded ``random.Random``; ``served`` is the
    broker's advertised ``{api_key: (min, max)}`` (its ApiVersions answer)."""

    def __init__(self, rng: random.Random, served: Served, topic: str, max_frame: int) -> None:
        self.rng = rng
        self.served = dict(served)
        self.topic = topic
        self.max_frame = max_frame
        self._cid = rng.randrange(1, 1 << 20)
        #: Template API -> the versions both the broker serves and kafka-python writes.
        self.template_versions = {
            key: [v for v in range(served[key][0], served[key][1] + 1) if kp_knows(key, v)]
            for key in TEMPLATE_APIS
            if key in served
        }
        self.unadvertised = [
            (key, v)
            for key in served
            if key != API_VERSIONS
            for v in kio_versions(key)
            if not self._serves(key, v)
        ]
        self.unserved = sorted(k for k in api_key_map if k not in served)

    def _serves(self, api_key: int, version: int) -> bool:
        low, high = self.served.get(api_key, (0, -1))
        return low <= version <= high

    def cid(self) -> int:
        self._cid += 1
        return self._cid

    def marker(self, prefix: str = "m") -> str:
        letters = "abcdefghijklmnopqrstuvwxyz"
        return prefix + "".join(self.rng.choice(letters) for _ in range(self.rng.randint(4, 40)))

    def client_id(self) -> str | None:
        return self.rng.choice([None, "", "flood", f"flood-client-{self.rng.randrange(1000)}"])

    def pick(
        self,
        apis: tuple[int, ...] = TEMPLATE_APIS,
        flexible: bool | None = None,
        versions: range | None = None,
    ) -> tuple[int, int]:
        """A template API and a version of it the broker serves (flexible only, or not, or any)."""
        choices = [
            (key, v)
            for key in apis
            for v in self.template_versions.get(key, [])
            if (flexible is None or is_flexible(key, v) == flexible) and (versions is None or v in versions)
        ]
        return self.rng.choice(choices)

    def valid(self) -> Built:
        """A valid request of a template API, naming the flood's topic."""
        api_key, version = self.pick()
        return build(api_key, version, self.cid(), [self.topic], self.client_id())

    def header(self, api_key: int, version: int) -> bytes:
        """A request header v1 (no tagged fields) with a fresh correlation id and no client id."""
        return HEADER.pack(api_key, version, self.cid()) + INT16.pack(-1)

    def junk(self, low: int = 0, high: int = 64) -> bytes:
        return self.rng.randbytes(self.rng.randint(low, high))


# -- the kinds ------------------------------------------------------------------------------------


def bytes_flipped(src: FrameSource) -> BadFrame:
    """1-3 bits flipped anywhere in a valid request but its correlation id and protected bytes."""
    built = src.valid()
    payload = bytearray(built.payload)
    spots = [i for i in range(len(payload)) if not 4 <= i < 8 and i not in built.protected]
    for _ in range(src.rng.randint(1, 3)):
        payload[src.rng.choice(spots)] ^= 1 << src.rng.randrange(8)
    return BadFrame("bytes_flipped", frame(bytes(payload)), EITHER)


def length_short(src: FrameSource) -> BadFrame:
    """A length prefix smaller than the request that follows (the rest follows it)."""
    payload = src.valid().payload
    return BadFrame(
        "length_short", LENGTH.pack(len(payload) - src.rng.randint(1, len(payload) - 1)) + payload, CLOSE
    )


def length_long_eof(src: FrameSource) -> BadFrame:
    """A length prefix larger than the request that follows, then EOF."""
    payload = src.valid().payload
    size = min(src.max_frame, len(payload) + src.rng.randint(1, 4096))
    return BadFrame("length_long_eof", LENGTH.pack(size) + payload, CLOSE, eof=True)


def length_zero(src: FrameSource) -> BadFrame:
    return BadFrame("length_zero", LENGTH.pack(0) + src.junk(0, 16), CLOSE)


def length_tiny(src: FrameSource) -> BadFrame:
    """1-7 bytes: shorter than a request header's fixed fields."""
    size = src.rng.randint(1, 7)
    return BadFrame("length_tiny", LENGTH.pack(size) + src.rng.randbytes(size) + src.junk(0, 16), CLOSE)


def length_negative(src: FrameSource) -> BadFrame:
    """A negative int32 length (over any limit once read unsigned)."""
    size = src.rng.choice([-1, -(2**31), src.rng.randint(-(2**31), -1)])
    return BadFrame("length_negative", INT32.pack(size) + src.junk(0, 32), CLOSE)


def length_oversize(src: FrameSource) -> BadFrame:
    """Over ``socket.request.max.bytes``: closed before any of the body is buffered."""
    size = src.rng.choice([src.max_frame + 1, src.rng.randint(src.max_frame + 1, 2**31 - 1)])
    return BadFrame("length_oversize", LENGTH.pack(size) + src.junk(0, 32), CLOSE)


def unknown_api_key(src: FrameSource) -> BadFrame:
    """An API key no Kafka version defines (kio's table ends below 100)."""
    key = src.rng.choice([src.rng.randint(100, 2**15 - 1), src.rng.randint(-(2**15), -1)])
    assert key not in api_key_map
    version = src.rng.randint(-(2**15), 2**15 - 1)
    return BadFrame("unknown_api_key", frame(src.header(key, version) + src.junk()), CLOSE)


def version_unknown(src: FrameSource) -> BadFrame:
    """A served API (not ApiVersions) at a version Kafka's schemas do not define."""
    key = src.rng.choice([k for k in src.served if k != API_VERSIONS])
    known = kio_versions(key)
    version = src.rng.choice(
        [src.rng.randint(known[-1] + 1, 2**15 - 1), src.rng.randint(-(2**15), -1), 99]
        + [v for v in range(known[0]) if v >= 0]
    )
    return BadFrame("version_unknown", frame(src.header(key, version) + src.junk()), CLOSE)


def version_unadvertised(src: FrameSource) -> BadFrame:
    """A served API at a version Kafka defines but the broker does not advertise: answered
    UNSUPPORTED_VERSION in that version's response when it has a top-level error code, else
    closed (an empty Produce or Metadata answer would read as success)."""
    key, version = src.rng.choice(src.unadvertised)
    data = frame(src.header(key, version) + src.junk())
    fields = {f.name for f in dataclasses.fields(load_response_schema(key, version))}
    if "error_code" in fields:
        return BadFrame("version_unadvertised", data, ANSWER, UNSUPPORTED)
    return BadFrame("version_unadvertised", data, CLOSE)


def unserved_api(src: FrameSource) -> BadFrame:
    """An API the broker does not serve (SASL, ACLs, transactions, KRaft...): a version Kafka
    defines is answered UNSUPPORTED_VERSION in its own shape, any other closes."""
    key = src.rng.choice(src.unserved)
    known = kio_versions(key)
    if src.rng.random() < 0.8:
        version = src.rng.choice(known)
        return BadFrame("unserved_api", frame(src.header(key, version) + src.junk()), ANSWER, UNSUPPORTED)
    version = src.rng.choice([known[-1] + 1, src.rng.randint(known[-1] + 1, 2**15 - 1), -1])
    return BadFrame("unserved_api", frame(src.header(key, version) + src.junk()), CLOSE)


def api_versions_unsupported(src: FrameSource) -> BadFrame:
    """ApiVersions at a version the broker does not serve (v99 among them): answered at v0."""
    low, high = src.served[API_VERSIONS]
    version = src.rng.choice(
        [99, high + 1, src.rng.randint(high + 1, 2**15 - 1), src.rng.randint(-(2**15), low - 1)]
    )
    return BadFrame(
        "api_versions_unsupported", frame(src.header(API_VERSIONS, version) + src.junk()), ANSWER, VERSIONS_V0
    )


def string_truncated(src: FrameSource) -> BadFrame:
    """A string cut short by the end of the frame: a compact string of a flexible body (a topic
    name, ApiVersions' client software name) or the header's client id."""
    marker = src.marker("s")
    if src.rng.random() < 0.25:
        api_key, version = src.pick()
        payload = build(api_key, version, src.cid(), [src.topic], marker).payload
    else:
        api_key, version = src.pick((METADATA, PRODUCE, LIST_OFFSETS, API_VERSIONS), flexible=True)
        payload = build(api_key, version, src.cid(), [marker], src.client_id()).payload
    at = payload.index(marker.encode())
    return BadFrame("string_truncated", frame(payload[: at + src.rng.randrange(len(marker))]), CLOSE)


def array_truncated(src: FrameSource) -> BadFrame:
    """A topics array whose last elements are cut off by the end of the frame."""
    names = [src.marker("a") for _ in range(src.rng.randint(2, 4))]
    api_key, version = src.pick((METADATA, PRODUCE, FETCH, LIST_OFFSETS))
    payload = build(api_key, version, src.cid(), names, src.client_id()).payload
    first, last = payload.index(names[0].encode()), payload.index(names[-1].encode()) + len(names[-1])
    return BadFrame("array_truncated", frame(payload[: src.rng.randrange(first, last)]), CLOSE)


def array_count_inflated(src: FrameSource) -> BadFrame:
    """A topics array that claims far more elements than the frame holds."""
    names = [src.topic] * src.rng.randint(1, 3)
    api_key, version = src.pick((METADATA, PRODUCE, FETCH, LIST_OFFSETS))
    built = build(api_key, version, src.cid(), names, src.client_id())
    at, payload = built.array_at, built.payload
    claimed = src.rng.randint(len(names) + 50, 2**31 - 2)
    if built.flexible:
        assert payload[at : at + 1] == uvarint(len(names) + 1), built
        payload = payload[:at] + uvarint(claimed + 1) + payload[at + 1 :]
    else:
        assert INT32.unpack_from(payload, at)[0] == len(names), built
        payload = payload[:at] + INT32.pack(claimed) + payload[at + 4 :]
    return BadFrame("array_count_inflated", frame(payload), CLOSE)


def negative_length(src: FrameSource) -> BadFrame:
    """A negative length other than null's -1: the client id's, a topics array's, a topic
    name's, a transactional id's or Produce's records' (non-flexible versions: int16/int32)."""
    where = src.rng.choice(["client_id", "array", "name", "records", "transactional_id"])
    apis = {"records": (PRODUCE,), "transactional_id": (PRODUCE,)}.get(
        where, (METADATA, PRODUCE, FETCH, LIST_OFFSETS)
    )
    api_key, version = src.pick(apis, flexible=False)
    built = build(api_key, version, src.cid(), [src.topic], "flood")
    payload = bytearray(built.payload)
    short, long = src.rng.randint(-(2**15), -2), src.rng.randint(-(2**31), -2)
    if where == "client_id":
        INT16.pack_into(payload, 8, short)
    elif where == "array":
        INT32.pack_into(payload, built.array_at, long)
    elif where == "name":
        assert INT16.unpack_from(payload, built.array_at + 4)[0] == len(src.topic), built
        INT16.pack_into(payload, built.array_at + 4, short)
    elif where == "records":
        at = payload.index(RECORDS) - 4
        assert INT32.unpack_from(payload, at)[0] == len(RECORDS), built
        INT32.pack_into(payload, at, long)
    else:
        assert INT16.unpack_from(payload, built.header_len)[0] == -1, built
        INT16.pack_into(payload, built.header_len, short)
    return BadFrame("negative_length", frame(bytes(payload)), CLOSE)


def header_tags_lie(src: FrameSource) -> BadFrame:
    """Request header v2 tagged fields: one longer than the request, more than any header has,
    or one shorter than the bytes it is followed by (the rest, read as the body, is no varint)."""
    variant = src.rng.choice(["too_long", "too_many", "too_short"])
    apis = (METADATA, API_VERSIONS, PRODUCE) if variant == "too_short" else TEMPLATE_APIS
    api_key, version = src.pick(apis, flexible=True)
    built = build(api_key, version, src.cid(), [src.topic], src.client_id())
    head, body = built.payload[: built.header_len - 1], built.payload[built.header_len :]
    assert built.payload[built.header_len - 1] == 0, built
    tag = uvarint(src.rng.randint(0, 1 << 20))
    if variant == "too_long":
        tags = uvarint(1) + tag + uvarint(len(body) + src.rng.randint(1, 1000))
    elif variant == "too_many":
        tags = uvarint(src.rng.randint(65, 1 << 28))
    else:
        size = src.rng.randint(0, 8)
        tags = uvarint(1) + tag + uvarint(size) + src.rng.randbytes(size) + b"\xff" * 6
    return BadFrame("header_tags_lie", frame(head + tags + body), CLOSE)


def body_tags_lie(src: FrameSource) -> BadFrame:
    """The body's tagged fields (KIP-482): one longer than the bytes left (closed), or one shorter
    than the bytes that follow it (an unknown field skipped and bytes after the body, which are
    ignored as Kafka ignores them: answered)."""
    api_key, version = src.pick(flexible=True)
    payload = build(api_key, version, src.cid(), [src.topic], src.client_id()).payload
    assert payload[-1] == 0, (api_key, version)
    data = src.junk(1, 32)
    too_long = src.rng.random() < 0.5
    size = len(data) + src.rng.randint(1, 1000) if too_long else src.rng.randrange(len(data))
    tags = uvarint(1) + uvarint(src.rng.randint(0, 1 << 20)) + uvarint(size) + data
    return BadFrame("body_tags_lie", frame(payload[:-1] + tags), CLOSE if too_long else ANSWER)


def _tags(src: FrameSource) -> bytes:
    """A tagged-field section of 1-3 well-formed fields with tags no schema declares."""
    tags = sorted(src.rng.sample(range(1000, 1 << 20), src.rng.randint(1, 3)))
    fields = [uvarint(t) + uvarint(len(d)) + d for t in tags for d in [src.junk(0, 24)]]
    return uvarint(len(fields)) + b"".join(fields)


def body_tags_unknown(src: FrameSource) -> BadFrame:
    """Well-formed tagged fields no schema declares, in the body or in a Metadata topic: skipped
    (KIP-482), the request answered."""
    if src.rng.random() < 0.5:
        _, version = src.pick((METADATA,), flexible=True)
        name = src.marker("t")
        payload = build(METADATA, version, src.cid(), [name], src.client_id()).payload
        at = payload.index(name.encode()) + len(name)  # the topic's (empty) tagged fields
        assert payload[at] == 0, version
    else:
        api_key, version = src.pick(flexible=True)
        payload = build(api_key, version, src.cid(), [src.topic], src.client_id()).payload
        at = len(payload) - 1
    return BadFrame("body_tags_unknown", frame(payload[:at] + _tags(src) + payload[at + 1 :]), ANSWER)


def trailing_bytes(src: FrameSource) -> BadFrame:
    """A valid request with bytes after its body, inside its frame: ignored, as Kafka ignores
    them (librdkafka 2.x sends Metadata v12 with some)."""
    return BadFrame("trailing_bytes", frame(src.valid().payload + src.junk(1, 64)), ANSWER)


def truncated_eof(src: FrameSource) -> BadFrame:
    """A valid request's frame cut anywhere (the length prefix included), then EOF."""
    data = frame(src.valid().payload)
    return BadFrame("truncated_eof", data[: src.rng.randint(1, len(data) - 1)], CLOSE, eof=True)


def fetch_incremental(src: FrameSource) -> BadFrame:
    """A fetch that continues a session (KIP-227 epoch > 0, or a bad negative one): the broker
    keeps none, so FETCH_SESSION_ID_NOT_FOUND."""
    _, version = src.pick((FETCH,), versions=range(7, 100))
    epoch = src.rng.choice([1, src.rng.randint(1, 2**31 - 1), src.rng.randint(-(2**31), -2)])
    request = fetch_request(version, [src.topic], (src.rng.randint(1, 2**31 - 1), epoch))
    built = written(request, FETCH, version, src.cid(), src.client_id())
    return BadFrame("fetch_incremental", frame(built.payload), ANSWER, NO_SESSION)


KINDS: dict[str, Callable[[FrameSource], BadFrame]] = {
    fn.__name__: fn
    for fn in (
        bytes_flipped,
        length_short,
        length_long_eof,
        length_zero,
        length_tiny,
        length_negative,
        length_oversize,
        unknown_api_key,
        version_unknown,
        version_unadvertised,
        unserved_api,
        api_versions_unsupported,
        string_truncated,
        array_truncated,
        array_count_inflated,
        negative_length,
        header_tags_lie,
        body_tags_lie,
        body_tags_unknown,
        trailing_bytes,
        truncated_eof,
        fetch_incremental,
    )
}


def bad_frames(src: FrameSource, counts: Mapping[str, int]) -> list[BadFrame]:
    """``counts[kind]`` frames of each kind, shuffled (all from ``src.rng``)."""
    frames = [KINDS[kind](src) for kind, count in counts.items() for _ in range(count)]
    src.rng.shuffle(frames)
    return frames
