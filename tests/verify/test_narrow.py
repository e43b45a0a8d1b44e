"""The job's narrow rows (issue 13): ``floodmark_segments`` with ``digests=binary`` must say what
the default rows say, with each value digest as the two 64-bit halves of the ledger's 128 bits,
and :func:`verify.checks.digest_hex` / :func:`verify.checks.digest_halves` must convert between
the two exactly. Also the progress counters and the slowest phase."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ledger.format import value_digest
from tests.verify import scenario as sc
from verify import checks
from verify.progress import RowCounter, Timings, rows_so_far
from verify.sources import NARROW_SEGMENTS_DDL, SEGMENTS_SOURCE


def halves(digest: str | None) -> tuple[int | None, int | None]:
    if digest is None:
        return None, None
    raw = bytes.fromhex(digest)
    return int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)


def test_narrow_rows_are_the_default_rows_with_binary_digests(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    path, pos, _, base = s.disk.batch_positions(2, sc.TOPIC, 0)[1]
    data = bytearray(path.read_bytes())
    data[pos + 70] ^= 0xFF  # inside the records: the CRC fails, the records may not decode
    path.write_bytes(bytes(data))

    def read(**options: str) -> Any:
        reader = spark.read.format(SEGMENTS_SOURCE).option("log_dirs", s.log_dirs)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    narrow = read(digests="binary")
    assert [f"{f.name} {f.dataType.simpleString()}" for f in narrow.schema.fields] == [
        item.strip() for item in NARROW_SEGMENTS_DDL.split(",")
    ]
    wide = read()
    expected = sorted(
        (*(r[c] for c in narrow.columns if not c.startswith("digest_")), *halves(r.value_digest))
        for r in wide.collect()
    )
    got = sorted(
        (*(r[c] for c in narrow.columns if not c.startswith("digest_")), r.digest_hi, r.digest_lo)
        for r in narrow.collect()
    )
    assert got == expected and len(got) == 3 * s.total
    assert any(not r.crc_valid for r in narrow.collect())
    # And back to the ledger's text, in Spark.
    texts = {r.value_digest for r in narrow.select(checks.digest_hex().alias("value_digest")).collect()}
    assert {value_digest(w.value) for w in s.disk.written} <= texts


def test_digest_halves_and_hex_are_inverse(spark: Any) -> None:
    digests = [hashlib.sha256(b"%d" % i).hexdigest()[:32] for i in range(200)]
    digests += ["f" * 32, "0" * 32, "8" + "0" * 31, "7" + "f" * 31]
    rows = (
        spark.createDataFrame(
            [(d,) for d in [*digests, "not a digest", "ABC", "g" * 32, None]], "value_digest string"
        )
        .select("value_digest", *checks.digest_halves())
        .select("value_digest", "digest_hi", "digest_lo", checks.digest_hex().alias("back"))
        .collect()
    )
    for r in rows:
        if r.value_digest in digests:
            assert (r.digest_hi, r.digest_lo) == halves(r.value_digest)
            assert r.back == r.value_digest
        elif r.value_digest is None:
            assert (r.digest_hi, r.digest_lo, r.back) == (None, None, None)
        else:
            assert (r.digest_hi, r.digest_lo) == checks.NOT_A_DIGEST


def test_row_counters_add_up_and_the_slowest_phase_is_named(tmp_path: Path) -> None:
    a, b = RowCounter(str(tmp_path), "a"), RowCounter(str(tmp_path), "b")
    a.add(65536)
    a.add(10)
    b.add(7)
    RowCounter(None, "c").add(5)  # no directory: counts in memory only
    assert rows_so_far(tmp_path) == 65553 and rows_so_far(None) == 0
    said: list[str] = []
    timings = Timings(said.append, tmp_path, interval_s=0.01)
    with timings.measure("read_segments"):
        while not said:
            pass
    with timings.measure("lost"):
        pass
    timings["total"] = 100.0
    assert timings.slowest() == ("read_segments", timings["read_segments"])
    assert "65,553 rows read" in said[0]
