"""Shared fixtures: uvloop for every async test, a real ZooKeeper server (never a fake), and one
SparkSession for every verification of a test session (the verification tests' and the chaos
runs').

The ZooKeeper fixture starts the Debian package's jars (see devcluster/zookeeper.py); when they
are missing it fails with the install hint instead of skipping: `make test` installs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from devcluster.ports import free_port
from devcluster.zookeeper import ZooKeeperProcess


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """One ZooKeeper server for the whole session; tests isolate themselves with a chroot."""
    server = ZooKeeperProcess(free_port(), tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess, request: pytest.FixtureRequest) -> str:
    """A connect string with a chroot unique to this test, so tests never see each other's znodes."""
    from kazoo.client import KazooClient

    chroot = "/t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:80]
    client = KazooClient(zookeeper.connect_string)
    client.start(10)
    try:
        if client.exists(chroot):
            client.delete(chroot, recursive=True)
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return zookeeper.connect_string + chroot


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One SparkSession for every verification in this test session (SPEC 8), built with the
    MACHINE-NOTES settings. The data of a test is small, so the session is what the job itself
    picks for a small input: the fast-start JVM, no whole-stage code generation (compiling it
    costs more than running the plan), no adaptive re-planning, one shuffle partition. A chaos
    run verifies in it too (``cli.chaos.run_chaos(..., spark=spark)``) instead of starting a JVM
    of its own. A job starting its own session is tested where the CLI runs in a process of its
    own: the compose cluster's ``floodmark chaos run`` (tests/compose) and ``make demo`` (an
    in-process CliRunner finds this session active and uses it)."""
    from verify.session import SMALL_INPUT_CONF, build_session

    session = build_session(
        "local[2]",
        "floodmark-verify-tests",
        shuffle_partitions=1,
        driver_memory="2g",
        fast_start=True,
        extra_conf=SMALL_INPUT_CONF,
    )
    yield session
    session.stop()
