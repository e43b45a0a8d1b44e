"""``python -m sim.trace_hashes``: run schedules and print ``<seed> <trace hash>``, one line each
(sim/trace_diff.py runs it in fresh interpreters under different ``PYTHONHASHSEED`` values).

It reads a pickled ``(seeds, ScheduleConfig)`` from stdin; ``--dump-dir DIR`` also writes each
seed's trace dump to ``DIR/<seed>.trace``; ``--heap-shift N`` first allocates N objects of drawn
sizes and keeps them, so every later object lies at other addresses than in a process without
it: an order taken from ``id()`` (a set of tasks or of other objects hashed by identity) then
differs between the two. The brokers' logs are off, as in a sweep's workers.
"""

from __future__ import annotations

import argparse
import logging
import pickle
import random
import sys
from pathlib import Path

from sim.sweep import ScheduleConfig, run_schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.trace_hashes")
    parser.add_argument("--dump-dir", type=Path, default=None)
    parser.add_argument("--heap-shift", type=int, default=0)
    args = parser.parse_args(argv)
    ballast = shift_heap(args.heap_shift)
    seeds, config = pickle.loads(sys.stdin.buffer.read())
    assert isinstance(config, ScheduleConfig)
    logging.disable(logging.CRITICAL)
    for seed in seeds:
        if args.dump_dir is None:
            result = run_schedule(seed, config)
        else:
            with (args.dump_dir / f"{seed}.trace").open("w") as dump:
                result = run_schedule(seed, config, trace_dump=dump)
        print(seed, result.trace_hash, flush=True)
    del ballast
    return 0


def shift_heap(count: int) -> list[object]:
    """``count`` live objects of drawn kinds and sizes: what follows is allocated elsewhere."""
    rng = random.Random(count)
    return [
        bytearray(rng.randrange(1, 512)) if rng.random() < 0.5 else [None] * rng.randrange(1, 64)
        for _ in range(count)
    ]


if __name__ == "__main__":
    sys.exit(main())
