"""Topic ids (KIP-516) as Kafka prints them: Kafka's ``org.apache.kafka.common.Uuid``, 16 bytes
shown as url-safe base64 without padding (``Uuid.toString``), 22 characters. ``ZERO_UUID``
("AAAAAAAAAAAAAAAAAAAAAA") means "no id" on every wire and file, as in Kafka; ``random_uuid``
never returns a reserved id (zero, one: KRaft's metadata topic) nor one whose text starts with
``-`` (Kafka's ``Uuid.randomUuid``: such a name reads as an option on a command line).

floodmark carries topic ids as this text everywhere (ZooKeeper, the controller's msgpack requests,
``partition.metadata``); the Kafka listener sends the 16 bytes (:func:`uuid_bytes`).
docs/design.md "Topic ids (KIP-516)".
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

UUID_BYTES = 16
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
ONE_UUID = "AAAAAAAAAAAAAAAAAAAAAQ"
RESERVED = frozenset({ZERO_UUID, ONE_UUID})


def uuid_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString`` of 16 bytes (most significant first)."""
    if len(raw) != UUID_BYTES:
        raise ValueError(f"a uuid is {UUID_BYTES} bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uuid_bytes(text: str) -> bytes:
    """Kafka's ``Uuid.fromString``: the 16 bytes of ``text``; ValueError for anything else."""
    if len(text) > 24:
        raise ValueError(f"input string with prefix {text[:24]!r} is too long to be decoded as a base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"input string {text!r} is not base64") from exc
    if len(raw) != UUID_BYTES:
        raise ValueError(f"input string {text!r} decoded as {len(raw)} bytes, not {UUID_BYTES}")
    return raw


def parse_uuid(text: str) -> str:
    """``text`` checked and in its canonical form (what Uuid.fromString(text).toString() gives)."""
    return uuid_str(uuid_bytes(text))


def random_uuid(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """Kafka's ``Uuid.randomUuid``: never reserved, never starting with ``-``."""
    while True:
        text = uuid_str(random_bytes(UUID_BYTES))
        if text not in RESERVED and not text.startswith("-"):
            return text


def is_set(topic_id: str | None) -> bool:
    """The id names a topic: neither absent nor ZERO_UUID."""
    return bool(topic_id) and topic_id != ZERO_UUID
