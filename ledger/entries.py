"""What a ledger holds, whatever its form (docs/operations.md "Chaos runs and verification"):
the file names, the entries as the readers return them, and the value digest in its two forms.

A value digest is the first 128 bits of the SHA-256 of the value: as text, 32 lowercase hex
characters (:func:`value_digest`, the JSON-lines ledger's ``value_digest``); as numbers, two
signed 64-bit integers (:func:`digest_halves`: ``digest_hi`` from hex characters 1-16,
``digest_lo`` from 17-32, big-endian, two's complement), the columnar ledger's columns and the
form in which the verification job's data sources hand over the log's digests. No Spark here.
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The JSON-lines ledger (the original form): one JSON object per line.
LEDGER_FILE = "ledger.jsonl"
#: The columnar ledger: a directory of Parquet chunks (:mod:`ledger.columnar`).
LEDGER_DIR = "ledger"
EVENTS_FILE = "events.jsonl"
FORMATS = ("parquet", "jsonl")
DIGEST_HEX_CHARS = 32
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
EVENT_TYPES = ("fault", "heal", "heal_failed", "leader_change")
#: The halves of digest text that is no digest (the job's ``verify.checks.NOT_A_DIGEST``).
NOT_A_DIGEST = (-(2**63), -(2**63) + 1)

_HALVES = struct.Struct(">qq")
_U64 = (1 << 64) - 1


def value_digest(value: bytes | bytearray | memoryview | None) -> str | None:
    """The first 32 hex characters of the SHA-256 of ``value`` (None for a null value)."""
    if value is None:
        return None
    return hashlib.sha256(value).hexdigest()[:DIGEST_HEX_CHARS]


def value_halves(value: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(digest_hi, digest_lo)`` of a (non-null) value, straight from the SHA-256 bytes."""
    return _HALVES.unpack_from(hashlib.sha256(value).digest())


def digest_halves(digest: str) -> tuple[int, int]:
    """``(digest_hi, digest_lo)`` of 32 hex characters (either case); :data:`NOT_A_DIGEST` for
    text that is not, as the job reads such text in a JSON-lines ledger."""
    try:
        if len(digest) != DIGEST_HEX_CHARS:
            raise ValueError(digest)
        return _HALVES.unpack(bytes.fromhex(digest))
    except (TypeError, ValueError):
        return NOT_A_DIGEST


def digest_hex(hi: int | None, lo: int | None) -> str | None:
    """The 32 lowercase hex characters of a digest's halves (the inverse of :func:`digest_halves`)."""
    if hi is None or lo is None:
        return None
    return f"{hi & _U64:016x}{lo & _U64:016x}"


def key_text(key: bytes | bytearray | str | None) -> str | None:
    """A record key as ledger text: UTF-8, with ``\\xNN`` escapes for undecodable bytes."""
    if key is None or isinstance(key, str):
        return key
    return bytes(key).decode("utf-8", "backslashreplace")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def format_ms(ms: int) -> str:
    """A wall-clock time in ms as UTC ISO-8601 text, with the number (for notes)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000))
    return f"{stamp}.{ms % 1000:03d}Z (time_ms {ms})"


class LedgerFormatError(ValueError):
    """A report dir whose ledger cannot be read or written as asked."""


def ledger_form(report_dir: Path | str) -> str | None:
    """``"parquet"`` when ``R/ledger/`` exists, ``"jsonl"`` when ``R/ledger.jsonl`` does, None when
    neither does; both at once is an error (which one is the run's?)."""
    report_dir = Path(report_dir)
    columnar, lines = (report_dir / LEDGER_DIR).is_dir(), (report_dir / LEDGER_FILE).exists()
    if columnar and lines:
        raise LedgerFormatError(
            f"{report_dir} holds the ledger in both forms ({LEDGER_DIR}/ and {LEDGER_FILE}); "
            f"move one of them out of the report dir (after `floodmark ledger convert`, keep the one "
            "you converted to, or pass --out to write the conversion elsewhere)"
        )
    return "parquet" if columnar else "jsonl" if lines else None


# -- what the readers return ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    topic: str
    partition: int
    offset: int
    key: str | None
    value_digest: str | None
    producer_id: int
    sequence: int
    time_ms: int
    latency_ms: float


@dataclass(frozen=True)
class WriteError:
    """A write the client saw fail. ``value_digest`` (when the writer gave the value) lets the
    verification job tell a failed write that landed in the log from one that did not."""

    topic: str
    partition: int
    error: str
    time_ms: int
    value_digest: str | None = None


@dataclass(frozen=True)
class Event:
    type: str
    time_ms: int
    detail: dict[str, Any] = field(default_factory=dict)
