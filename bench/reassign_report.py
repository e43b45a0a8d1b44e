"""The analysis and the Markdown report of bench/reassign_time.py (docs/benchmarks.md "Partition
reassignment: 1 GB with and without a throttle"): each fill and move as measured, the copy rate
past the token bucket's burst (a least-squares slope of the on-disk samples), and the tables."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

MB = 1024 * 1024
RECORD_BYTES = 100 * 1024


@dataclass
class Fill:
    records: int
    seconds: float
    log_bytes: int

    @property
    def mb_s(self) -> float:
        return self.records * RECORD_BYTES / MB / self.seconds


@dataclass
class Move:
    topic: str
    current: list[int]
    target: list[int]
    throttle: int | None  # bytes/s
    seconds: float = 0.0
    copied: int = 0
    isr: list[int] = field(default_factory=list)  # in metadata, when the move completed
    zk_isr: list[int] = field(default_factory=list)  # in ZooKeeper, read right after
    metadata_isr_s: float = 0.0  # from the completion until metadata showed the full ISR
    done_at: float = 0.0  # time.monotonic() of the completion
    samples: list[tuple[float, int]] = field(default_factory=list)  # (s since the request, bytes)

    @property
    def new_broker(self) -> int:
        (broker,) = set(self.target) - set(self.current)
        return broker

    def rate(self, lo: float, hi: float, after_s: float = 0.0) -> float | None:
        """Bytes/s of the copy between ``lo`` and ``hi`` bytes on disk, from ``after_s`` seconds
        after the request on: the least-squares slope of the samples (the copy advances in
        fetch-sized steps, so two end points alone would jitter). None: fewer than 3 samples or
        less than half a second."""
        window = [(t, b) for t, b in self.samples if lo <= b <= hi and t >= after_s]
        if len(window) < 3 or window[-1][0] - window[0][0] < 0.5:
            return None
        mean_t = sum(t for t, _ in window) / len(window)
        mean_b = sum(b for _, b in window) / len(window)
        spread = sum((t - mean_t) ** 2 for t, _ in window)
        return sum((t - mean_t) * (b - mean_b) for t, b in window) / spread


# -- the report ---------------------------------------------------------------------------------


def knee_s(plan: Move, burst: float) -> float | None:
    """When a throttled copy used up the bucket's burst: the first sample past half the burst
    from which the copy advanced less than twice the throttle in the next second (None: never,
    the throttle did not bind)."""
    assert plan.throttle is not None
    for i, (t, b) in enumerate(plan.samples):
        ahead = next((c for u, c in plan.samples[i:] if u >= t + 1.0), None)
        if b >= burst / 2 and ahead is not None and ahead - b < 2 * plan.throttle:
            return t
    return None


def steady(plan: Move, size: int, burst: float) -> float | None:
    """The copy rate once past the start: unthrottled, between 45 % and 95 % of the size;
    throttled, from a second after the burst ran out (:func:`knee_s`) up to 95 % of the size."""
    if plan.throttle is None:
        return plan.rate(0.45 * size, 0.95 * size)
    knee = knee_s(plan, burst)
    return None if knee is None else plan.rate(0, 0.95 * size, knee + 1.0)


def table(moves: list[Move], fills: list[Fill], window_num: int) -> list[str]:
    base = moves[0]
    lines = [
        "| move | size MB | throttle MB/s | time s | effective MB/s | steady MB/s | size / throttle s "
        "| time ÷ (size / throttle) | (size - burst) / throttle s | steady ÷ throttle | time vs unthrottled |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for plan, filled in zip(moves, fills, strict=True):
        size = filled.log_bytes
        rate = plan.copied / plan.seconds
        burst = 0.0 if plan.throttle is None else plan.throttle * window_num
        rate_ss = steady(plan, size, burst)
        cells = [
            f"{plan.topic}-0 {plan.current} -> {plan.target}",
            f"{size / MB:,.0f}",
            "none" if plan.throttle is None else f"{plan.throttle / MB:g}",
            f"{plan.seconds:.1f}",
            f"{rate / MB:.1f}",
            "—" if rate_ss is None else f"{rate_ss / MB:.1f}",
        ]
        if plan.throttle is None:
            cells += ["—", "—", "—", "—", "1.00"]
        else:
            at = size / plan.throttle
            cells += [
                f"{at:.1f}",
                f"{plan.seconds / at:.2f}",
                f"{max(size - burst, 0) / plan.throttle:.1f}",
                "—" if rate_ss is None else f"{rate_ss / plan.throttle:.3f}",
                f"{plan.seconds / base.seconds:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(
    args: argparse.Namespace,
    moves: list[Move],
    fills: list[Fill],
    facts: dict[str, str],
    machine_lines: list[str],
    settings: dict[str, str],
    brokers: int,
) -> str:
    lines = [f"### Run of {facts['date']}", "", *machine_lines]
    lines += [
        f"- waiting for a quiet machine: {facts['quiet']}",
        f"- load average (1/5/15 min) before the run {facts['before']}, after it {facts['after']}",
        f"- cluster: ZooKeeper + {brokers} brokers on loopback (`devcluster.cluster.LocalCluster`); "
        "broker settings " + ", ".join(f"`{k}={v}`" for k, v in settings.items()) + ", all else default",
        f"- whole run {facts['wall']} s; MB = 2^20 bytes; size = the leader's log on disk",
        "",
        "Fill (one producer, acks=1, 100 KiB records, `batch.size` 1 MiB, `linger.ms` 20, partition 0 of"
        " a topic on brokers [1, 2]):",
        "",
        "| topic | records | MB | s | MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for plan, filled in zip(moves, fills, strict=True):
        lines.append(
            f"| {plan.topic} | {filled.records:,} | {filled.records * RECORD_BYTES / MB:,.0f} | "
            f"{filled.seconds:.1f} | {filled.mb_s:.1f} |"
        )
    lines += [
        "",
        f"Moves (burst = throttle x {args.window_num} s; steady = the copy rate on disk past the burst):",
        "",
    ]
    lines += table(moves, fills, args.window_num)
    for m in (m for m in moves if m.throttle is not None):
        burst = m.throttle * args.window_num
        knee = knee_s(m, burst)
        at = next((b for t, b in m.samples if t == knee), 0)
        lines.append(
            f"\n{m.topic}-0, burst {burst / MB:,.0f} MB: "
            + (
                "the copy never slowed to the throttle"
                if knee is None
                else f"the copy slowed to the throttle within a second of {knee:.1f} s after the "
                f"request ({at / MB:,.0f} MB copied by then)"
            )
        )
    lines += ["", "The ISR when the move completed, in metadata and in ZooKeeper's state znode:", ""]
    lines += [
        f"- {m.topic}-0: metadata {m.isr}, ZooKeeper {m.zk_isr}; metadata showed {m.target} "
        f"{m.metadata_isr_s:.1f} s after the completion"
        for m in moves
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------------
