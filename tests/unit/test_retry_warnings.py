"""client/producer/retry_warnings.py: one warning per partition and error per interval, with the
count of retries it stood for; a completed batch re-arms it."""

from __future__ import annotations

from client.producer.retry_warnings import RetryWarnings
from client.protocol.errors import ErrorCode

NER = ErrorCode.NOT_ENOUGH_REPLICAS


def test_a_run_of_retries_is_one_line_per_interval_with_the_count_it_stood_for() -> None:
    warnings = RetryWarnings(interval_ms=1000)
    first = warnings.on_retry(0, "t", 0, NER, 9, 120_000)
    assert first == (
        "Got error produce response on topic-partition t-0, retrying (9 attempts left, "
        "120 s of delivery.timeout.ms left). Error: NOT_ENOUGH_REPLICAS"
    )
    assert [warnings.on_retry(ms, "t", 0, NER, 8, 119_000) for ms in (100, 500, 999)] == [None] * 3
    later = warnings.on_retry(1000, "t", 0, NER, 5, 119_000)
    assert later is not None and later.endswith("(3 more retries of this error since the last warning)")


def test_partitions_and_error_codes_are_warned_apart_and_a_success_rearms() -> None:
    warnings = RetryWarnings(interval_ms=1000)
    assert warnings.on_retry(0, "t", 0, NER, 9, 1000) is not None
    assert warnings.on_retry(1, "t", 1, NER, 9, 1000) is not None
    assert warnings.on_retry(2, "t", 0, ErrorCode.REQUEST_TIMED_OUT, 9, 1000) is not None
    assert warnings.on_retry(3, "t", 0, NER, 9, 1000) is None
    warnings.clear("t", 0)
    assert warnings.on_retry(4, "t", 0, NER, 9, 1000) is not None
    assert warnings.on_retry(5, "t", 1, NER, 9, 1000) is None  # t-1 was not cleared
