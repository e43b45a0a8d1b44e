"""The verification report's PNG timeline (``R/timeline.png``): throughput, latency and errors over
time, with the injected faults marked.

Input is already aggregated (the job buckets the ledger in Spark, so a ten-million-line ledger
becomes a few hundred points): acknowledged writes and latency percentiles per time bucket, error
counts per bucket and error name, and the events of ``events.jsonl``. Faults are red lines with a
shaded span until their heal (the open fault with the heal's ``detail["id"]``, else the one with
its ``detail["broker"]``, else the oldest open one), heals green lines, observed leadership
changes grey dotted lines. matplotlib runs on the Agg backend: no display is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger.format import Event


@dataclass(frozen=True)
class Bucket:
    start_ms: int
    acks: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass(frozen=True)
class ErrorBucket:
    start_ms: int
    error: str
    count: int


def fault_spans(events: Sequence[Event]) -> list[tuple[int, int | None, Event]]:
    """``(fault start, heal time or None, fault)`` for every fault, healed by the matching heal."""
    spans: list[tuple[int, int | None, Event]] = []
    open_faults: list[Event] = []
    for event in sorted(events, key=lambda e: e.time_ms):
        if event.type == "fault":
            open_faults.append(event)
        elif event.type == "heal" and open_faults:
            match = None
            for key in ("id", "broker"):
                wanted = event.detail.get(key)
                if match is None and wanted is not None:
                    match = next((f for f in open_faults if f.detail.get(key) == wanted), None)
            match = match or open_faults[0]
            open_faults.remove(match)
            spans.append((match.time_ms, event.time_ms, match))
    spans.extend((f.time_ms, None, f) for f in open_faults)
    return sorted(spans, key=lambda s: s[0])


def _label(event: Event) -> str:
    detail = event.detail
    for key in ("action", "kind", "fault", "name"):
        if key in detail:
            target = str(detail.get("broker", detail.get("target", "")))
            if target.startswith(f"{detail[key]} "):  # "consumer c1-0" of a consumer fault
                return target
            return f"{detail[key]} {target}".strip()
    return event.type


def plot_timeline(
    path: Path,
    buckets: Sequence[Bucket],
    errors: Sequence[ErrorBucket],
    events: Sequence[Event],
    bucket_ms: int,
    title: str = "floodmark chaos run",
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [b.start_ms for b in buckets] + [e.start_ms for e in errors] + [e.time_ms for e in events]
    origin = min(times) if times else 0
    end = max(times) + bucket_ms if times else bucket_ms

    def x(ms: float) -> float:
        return (ms - origin) / 1000.0

    per_s = 1000.0 / bucket_ms
    fig, (ax_tp, ax_lat, ax_err) = plt.subplots(3, 1, figsize=(12, 8), sharex=True)
    fig.suptitle(title)
    if buckets:
        xs = [x(b.start_ms) for b in buckets]
        marker = "." if len(buckets) < 30 else None  # a line of one point draws nothing
        ax_tp.plot(
            xs,
            [b.acks * per_s for b in buckets],
            color="tab:blue",
            lw=1.2,
            drawstyle="steps-post",
            marker=marker,
        )
        for attr, label, color in (
            ("p50_ms", "p50", "tab:green"),
            ("p99_ms", "p99", "tab:orange"),
            ("max_ms", "max", "tab:red"),
        ):
            points = [
                (xv, getattr(b, attr))
                for xv, b in zip(xs, buckets, strict=True)
                if getattr(b, attr) is not None
            ]
            if points:
                ax_lat.plot(
                    *zip(*points, strict=True),
                    label=label,
                    color=color,
                    lw=1,
                    drawstyle="steps-post",
                    marker=marker,
                )
        ax_lat.legend(loc="upper right", fontsize=8)
        if any(b.max_ms for b in buckets):
            ax_lat.set_yscale("log")
    else:
        ax_tp.text(
            0.5,
            0.5,
            "no acknowledged writes in the ledger",
            ha="center",
            va="center",
            transform=ax_tp.transAxes,
        )
    ax_tp.set_ylabel("acks / s")
    ax_lat.set_ylabel("ack latency (ms)")
    names = sorted({e.error for e in errors})
    if names:
        starts = sorted({e.start_ms for e in errors})
        counts = {(e.start_ms, e.error): e.count for e in errors}
        bottom = [0.0] * len(starts)
        for name in names:
            heights = [counts.get((s, name), 0) * per_s for s in starts]
            ax_err.bar(
                [x(s) for s in starts],
                heights,
                width=bucket_ms / 1000.0,
                bottom=bottom,
                align="edge",
                label=name,
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax_err.legend(loc="upper right", fontsize=8)
    ax_err.set_ylabel("errors / s")
    ax_err.set_xlabel("seconds since start")
    for start, heal, fault in fault_spans(events):
        for ax in (ax_tp, ax_lat, ax_err):
            ax.axvline(x(start), color="red", lw=1)
            ax.axvspan(x(start), x(heal if heal is not None else end), color="red", alpha=0.08)
        ax_tp.annotate(
            _label(fault),
            (x(start), 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="red",
            rotation=90,
            va="top",
            ha="right",
        )
    for event in events:
        if event.type == "heal":
            for ax in (ax_tp, ax_lat, ax_err):
                ax.axvline(x(event.time_ms), color="green", lw=1)
        elif event.type == "leader_change":
            for ax in (ax_tp, ax_lat, ax_err):
                ax.axvline(x(event.time_ms), color="grey", lw=0.8, ls=":")
    ax_err.set_xlim(0, x(end))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
