"""``floodmark-broker --config FILE [--override key=value ...]`` (Kafka's ``kafka.Kafka`` main;
docs/operations.md "The broker process" and "Broker configuration").

Reads a Kafka-style properties file, applies overrides, refuses unknown keys and bad values
by name, and runs one broker on uvloop. SIGTERM shuts down with a controlled shutdown first
(leaderships move away, when ``controlled.shutdown.enable``); SIGINT shuts down cleanly
without it (``floodmark cluster down`` stops every broker at once, when there is nowhere to
move leadership to). Before anything opens a file, the soft RLIMIT_NOFILE is raised to the hard
limit (broker/file_budget.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys

import uvloop

from broker.config import BrokerConfig, ConfigError, parse_overrides
from broker.file_budget import raise_open_files_limit
from broker.server import BrokerServer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="floodmark-broker", description="Run one floodmark broker.")
    parser.add_argument("--config", required=True, help="a properties file with Kafka's broker settings")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override one setting"
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def run(config: BrokerConfig) -> None:
    server = BrokerServer(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: (received.append(s), stop.set()))
    await server.startup()
    await stop.wait()
    await server.shutdown(controlled=received[0] == signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        config = BrokerConfig.from_file(args.config, parse_overrides(args.override))
    except ConfigError as exc:
        print(f"floodmark-broker: configuration error: {exc}", file=sys.stderr)
        return 2
    raise_open_files_limit(resource)  # the file budget (broker/file_budget.py) is taken under it
    uvloop.run(run(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
