import asyncio

import uvloop


async def test_async_tests_run_on_uvloop():
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


def test_zookeeper_fixture_is_real(zk_connect):
    from kazoo.client import KazooClient

    client = KazooClient(zk_connect)
    client.start(10)
    client.create("/probe", b"x")
    assert client.get("/probe")[0] == b"x"
    client.stop()
