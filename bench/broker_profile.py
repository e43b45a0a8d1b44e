"""Where a broker's CPU goes, for the benchmarks (docs/benchmarks.md "Kafka's clients against the
msgpack client (issue 24)"): sampling profiles of running broker processes, and the two wire
codecs timed alone. Nothing here touches the brokers' code or command line.

``Profiler`` attaches ``py-spy record --format raw --nonblocking --gil`` to each broker by pid
(collapsed stacks: one line per distinct stack, root first, then a sample count) and stops it
with SIGINT, when py-spy writes its file. Only the thread holding the GIL is sampled: a broker's
event loop releases it only to wait in epoll, so samples are time on a CPU (without ``--gil``,
waits that py-spy took for running inflated the count in proportion to a case's duration).
``summarize`` compares two cases per 10,000 records: the functions whose inclusive samples (the
stacks a function appears in, once per stack) and self samples (the leaf) grew most.

``codec_costs`` times each step of the KAFKA listener's codec (broker/kafka_protocol/codec.py:
kio's reader, the translation and ``validate_request``; ``validate_response``, the translation to
kio's classes and kio's writer) and of the msgpack codec on Produce requests shaped as each
client sends them, in this process, without a cluster.
"""

from __future__ import annotations

import datetime
import io
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import timeit
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kio.serial import entity_writer

from broker.kafka_protocol.codec import KafkaCodec
from broker.kafka_protocol.entities import make, request_class, request_reader
from broker.kafka_protocol.header import read_client_id
from broker.network.wire_codec import MSGPACK_CODEC
from client.protocol.api import ApiKey, validate_request, validate_response
from client.protocol.framing import encode_request
from client.protocol.records import build_batch

RATE_HZ = 400
STOP_TIMEOUT_S = 30.0
PER = 10_000  # records: samples are reported per this many records
_ROOT = f"{Path(__file__).resolve().parent.parent}{os.sep}"
_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy next to this interpreter, else on PATH; None when there is none."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Profiler:
    """py-spy on each of ``pids`` while a ``with`` block runs; one raw file per pid in ``out_dir``."""

    def __init__(self, pids: dict[int, int], out_dir: Path, name: str) -> None:
        self.files = {broker: out_dir / f"{name}-broker{broker}.txt" for broker in pids}
        self.pids = pids
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Profiler:
        exe = py_spy()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        for broker, pid in self.pids.items():
            argv = [exe, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--format", "raw"]
            argv += ["--nonblocking", "--gil", "-o", str(self.files[broker])]
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.communicate(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@dataclass
class Profile:
    """The stacks of one case over every broker, and the records the case moved."""

    records: int
    samples: int
    inclusive: Counter[str]
    leaf: Counter[str]

    def per(self, count: int) -> float:
        return count * PER / self.records if self.records else 0.0


def _short(path: str) -> str:
    if path.startswith(_ROOT):
        return path[len(_ROOT) :]
    return path.split("site-packages/", 1)[-1]


def frame_key(frame: str) -> str:
    """``function (file:line)`` as ``function (file)``, the file relative to the checkout or site-packages."""
    match = _FRAME.match(frame)
    return f"{match.group(1)} ({_short(match.group(2))})" if match else frame


def load(files: list[Path], records: int) -> Profile:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _LINE.match(line)
            if not match:
                continue
            frames = [frame_key(f) for f in match.group(1).split(";")]
            count = int(match.group(2))
            total += count
            for key in set(frames):
                inclusive[key] += count
            leaf[frames[-1]] += count
    return Profile(records, total, inclusive, leaf)


#: Frames at the root of every stack of the broker's event loop: no information.
_ROOT_FRAMES = ("<frozen runpy>", "broker/__main__.py", "uvloop/__init__.py", "asyncio/runners.py")


def _diff_rows(a: Profile, b: Profile, counts: str, top: int) -> list[str]:
    ca, cb = getattr(a, counts), getattr(b, counts)
    keys = set(ca) | set(cb)
    if counts == "inclusive":
        keys = {k for k in keys if not any(f"({root})" in k for root in _ROOT_FRAMES)}
    grown = sorted(keys, key=lambda k: b.per(cb[k]) - a.per(ca[k]), reverse=True)
    rows = []
    for key in grown[:top]:
        name = key.replace("|", "\\|")
        before, after = a.per(ca[key]), b.per(cb[key])
        rows.append(f"| `{name}` | {before:.1f} | {after:.1f} | {after - before:+.1f} |")
    return rows


def summarize(a_name: str, a: Profile, b_name: str, b: Profile, top: int = 15) -> list[str]:
    """Markdown: samples per 10,000 records of two cases, and the functions that grew most."""
    head = f"| function (file) | {a_name} | {b_name} | difference |"
    return [
        f"Broker samples per {PER:,} records (py-spy, {RATE_HZ} Hz, all brokers): {a_name} "
        f"{a.per(a.samples):.1f} ({a.samples} samples, {a.records:,} records), {b_name} "
        f"{b.per(b.samples):.1f} ({b.samples} samples, {b.records:,} records).",
        "",
        f"Inclusive samples per {PER:,} records (a function and everything it calls), largest growth first:",
        "",
        head,
        "|---|---:|---:|---:|",
        *_diff_rows(a, b, "inclusive", top),
        "",
        f"Self samples per {PER:,} records (the function's own code, the leaf of the stack), "
        "largest growth first:",
        "",
        head,
        "|---|---:|---:|---:|",
        *_diff_rows(a, b, "leaf", top),
    ]


# -- the two listeners' codecs, timed in this process --------------------------------------------


def _kafka_produce_payload(topic: str, batch: bytes, version: int = 9) -> bytes:
    """A Produce request (header v2 and body) as librdkafka sends it: one partition, one batch."""
    cls = request_class(0, version)
    module = sys.modules[cls.__module__]
    request = make(
        cls,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            make(
                module.TopicProduceData,
                name=topic,
                partition_data=(make(module.PartitionProduceData, index=0, records=batch),),
            ),
        ),
    )
    buffer = io.BytesIO()
    client_id = b"rdkafka"
    buffer.write(struct.pack(">hhih", 0, version, 7, len(client_id)) + client_id + b"\0")
    entity_writer(cls)(buffer, request)
    return buffer.getvalue()


def _produce_answer(topic: str, partitions: int) -> dict:
    """The produce handler's answer (client/protocol/api.py's PRODUCE response body)."""
    parts = [
        {"partition": p, "error_code": 0, "base_offset": 1000, "log_append_time": -1, "log_start_offset": 0}
        for p in range(partitions)
    ]
    return {"topics": [{"topic": topic, "partitions": parts}], "throttle_time_ms": 0}


def _time_us(fn: object, repeat: int) -> float:
    return min(timeit.repeat(fn, number=repeat, repeat=5)) * 1e6 / repeat  # type: ignore[arg-type]


def codec_costs(
    records_per_batch: int = 147, msgpack_batches: int = 2, repeat: int = 2000
) -> dict[str, float]:
    """Microseconds per Produce request of each step of the two codecs, on requests shaped as
    the run's clients send them: librdkafka one batch of ``records_per_batch`` 100-byte records
    (Produce v9), floodmark's client ``msgpack_batches`` such batches (two partitions)."""
    topic = "bench"
    batch = build_batch(
        [(None, b"A" * 100, 0, [])] * records_per_batch, producer_id=1, producer_epoch=0, base_sequence=0
    )
    kafka = KafkaCodec()
    payload = _kafka_produce_payload(topic, batch)
    decoded = kafka.decode(payload)
    _, body_at = read_client_id(payload, flexible=True)
    answer = _produce_answer(topic, 1)
    api = kafka.apis[ApiKey.PRODUCE]
    checked = validate_response(ApiKey.PRODUCE, answer)
    entity = api.to_response(checked, decoded.context, 9)
    body = {
        "acks": -1,
        "timeout_ms": 30000,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": p, "records": batch} for p in range(msgpack_batches)],
            }
        ],
    }
    frame = encode_request(0, 0, 7, "floodmark", body)[4:]
    own = MSGPACK_CODEC.decode(frame)
    own_answer = _produce_answer(topic, msgpack_batches)
    steps = {
        "kafka decode (all)": lambda: kafka.decode(payload),
        "kafka decode: kio reader": lambda: request_reader(0, 9)(payload, body_at),
        "kafka decode: to_body + validate_request": lambda: validate_request(
            0, 0, api.to_body(decoded.context, 9)
        ),
        "kafka encode_response (all)": lambda: kafka.encode_response(
            decoded.header, ApiKey.PRODUCE, answer, decoded.context
        ),
        "kafka encode: validate_response": lambda: validate_response(ApiKey.PRODUCE, answer),
        "kafka encode: to_response (kio entities)": lambda: api.to_response(checked, decoded.context, 9),
        "kafka encode: kio writer + header": lambda: kafka._frame(0, 9, 7, entity),
        "msgpack decode (all)": lambda: MSGPACK_CODEC.decode(frame),
        "msgpack encode_response (all)": lambda: MSGPACK_CODEC.encode_response(
            own.header, ApiKey.PRODUCE, own_answer, None
        ),
    }
    return {name: _time_us(fn, repeat) for name, fn in steps.items()}


def codec_lines(costs: dict[str, float], kafka_per_request: float, msgpack_per_request: float) -> list[str]:
    """Markdown: each codec step per request and per record at the run's records per request."""
    lines = [
        "| codec step (leader broker, per Produce request) | us per request | us per record |",
        "|---|---:|---:|",
    ]
    for name, us in costs.items():
        per = kafka_per_request if name.startswith("kafka") else msgpack_per_request
        lines.append(f"| {name} | {us:.1f} | {us / per:.3f} |")
    kafka = (costs["kafka decode (all)"] + costs["kafka encode_response (all)"]) / kafka_per_request
    own = (costs["msgpack decode (all)"] + costs["msgpack encode_response (all)"]) / msgpack_per_request
    return [
        *lines,
        "",
        f"Decode + encode per record: Kafka codec {kafka:.3f} us "
        f"({kafka_per_request:.0f} records per request), "
        f"msgpack codec {own:.3f} us ({msgpack_per_request:.0f} records per request): {kafka - own:+.3f} us.",
    ]
