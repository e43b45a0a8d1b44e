"""The ``floodmark`` command (docs/operations.md "The floodmark CLI"): the click group, its
subcommands, and one error policy.

Errors are one readable line on stderr and a non-zero exit, never a traceback: a KafkaError
prints as ``Error: NOT_LEADER_OR_FOLLOWER: ...`` and exits 1, Ctrl-C exits 130, a closed pipe
exits quietly. ``--debug`` turns on debug logging and lets unexpected exceptions show their
traceback. Every subcommand imports the client library (and the cluster runner) inside its
function, so ``floodmark --help`` works whatever is installed.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from cli import (
    chaos,
    cluster,
    configs,
    consume,
    demo,
    elect_leaders,
    groups,
    ledger,
    perf,
    produce,
    reassign,
    simulate,
    state_change_log,
    topics,
    verify,
    verify_replicas,
)
from cli.common import CliError

#: Failures an operator can act on; they print without an "internal error" prefix.
EXPECTED = (OSError, TimeoutError, ValueError)
SIGPIPE_EXIT = 141
SIGINT_EXIT = 130


def one_line(text: str) -> str:
    return " ".join(text.split())


class FloodmarkGroup(click.Group):
    """A group whose subcommands' exceptions become one ``Error:`` line (see module docstring)."""

    def invoke(self, ctx: click.Context) -> Any:
        from client.protocol.errors import KafkaError

        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            raise click.exceptions.Exit(SIGINT_EXIT) from None
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(SIGPIPE_EXIT) from None
        except KafkaError as exc:
            raise CliError(one_line(str(exc))) from None
        except EXPECTED as exc:
            raise CliError(one_line(str(exc) or exc.__class__.__name__)) from None
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            raise CliError(
                one_line(
                    f"internal error: {exc.__class__.__name__}: {exc} (run `floodmark --debug ...` for the traceback)"
                )
            ) from None


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def build_cli() -> click.Group:
    @click.group(
        name="floodmark", cls=FloodmarkGroup, context_settings={"help_option_names": ["-h", "--help"]}
    )
    @click.option("--debug", is_flag=True, help="Debug logging; show tracebacks of unexpected errors.")
    @click.version_option(package_name="floodmark", prog_name="floodmark")
    def cli(debug: bool) -> None:
        """floodmark: a replicated commit log with the architecture of ZooKeeper-era Kafka.

        Bootstrap servers come from --bootstrap-server, then $FLOODMARK_BOOTSTRAP, then the
        local cluster's state file ./.floodmark/cluster.json.
        """
        logging.basicConfig(
            level=logging.DEBUG if debug else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        if not debug:
            logging.getLogger("kazoo").setLevel(logging.ERROR)

    cli.add_command(cluster.cluster)
    cli.add_command(topics.topics)
    cli.add_command(configs.configs)
    cli.add_command(elect_leaders.elect_leaders)
    cli.add_command(reassign.reassign)
    cli.add_command(produce.produce)
    cli.add_command(consume.consume)
    cli.add_command(groups.groups)
    cli.add_command(perf.perf)
    cli.add_command(chaos.chaos)
    cli.add_command(verify.verify)
    cli.add_command(verify_replicas.verify_replicas_command)
    cli.add_command(ledger.ledger)
    cli.add_command(demo.demo)
    cli.add_command(simulate.simulate)
    cli.add_command(state_change_log.state_change_log)
    return cli


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``floodmark = cli.main:main``)."""
    try:
        build_cli().main(args=argv, prog_name="floodmark")
    except KeyboardInterrupt:  # outside a command, e.g. while click parses
        sys.exit(SIGINT_EXIT)


if __name__ == "__main__":
    main()
