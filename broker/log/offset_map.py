"""The cleaner's map of key -> last offset over a log's dirty section (Kafka's ``OffsetMap`` and
``SkimpyOffsetMap``; docs/design.md "Log compaction").

Kafka's map is a fixed array of ``log.cleaner.dedupe.buffer.size / 24`` slots (an MD5 of the key
and an offset each) filled to a load factor of 0.9. Here it is a dict bounded by the same count
of entries (:attr:`broker.log.cleaner_config.CleanerConfig.max_map_entries`). A key of up to 15
bytes is its own dict key; a longer one is stood for by its 16-byte BLAKE2b digest, as Kafka's
MD5, so an entry's size is bounded whatever the keys (the lengths differ, so a short key never
meets a digest; two long keys sharing a digest is Kafka's accepted 2^-128 risk). Python's
per-entry overhead is larger than 24 bytes, so the setting bounds the number of keys more than
the bytes. A pass whose dirty section has more keys than fit stops mapping where the map filled
and cleans up to there, as Kafka does; the next pass goes on from that offset.
"""

from __future__ import annotations

import hashlib

#: keys longer than this are mapped by their digest
MAX_RAW_KEY = 15
DIGEST_SIZE = 16


def slot(key: bytes) -> bytes:
    """What stands for ``key`` in the map."""
    return key if len(key) <= MAX_RAW_KEY else hashlib.blake2b(key, digest_size=DIGEST_SIZE).digest()


class OffsetMap:
    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"an offset map needs room for one key at least, got {max_entries}")
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        #: the last offset mapped (Kafka's latestOffset): a pass cleans below ``latest_offset + 1``
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def utilization(self) -> float:
        """The share of the map in use (Kafka's max-buffer-utilization-percent / 100)."""
        return len(self._offsets) / self.max_entries

    def clear(self, latest_offset: int = -1) -> None:
        self._offsets.clear()
        self.latest_offset = latest_offset

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset`` (offsets arrive in increasing order); False, and nothing
        mapped, when the map is full and ``key`` is new to it."""
        key = slot(key)
        if key not in self._offsets and self.is_full:
            return False
        self._offsets[key] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The last offset of ``key``, -1 when it is not mapped."""
        return self._offsets.get(slot(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        """A whole batch up to ``offset`` has been mapped (its keyless or control records too)."""
        self.latest_offset = max(self.latest_offset, offset)
