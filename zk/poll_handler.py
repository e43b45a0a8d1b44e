"""kazoo's threading handler with a select that needs no file descriptor (docs/design.md "The
ZooKeeper client layer"; issue 25: under file pressure the ZooKeeper session must never fail).

kazoo's connection thread waits on its socket through ``handler.select``, which builds a new
``selectors.DefaultSelector`` for every call: on Linux an epoll instance, a file descriptor,
opened and closed a few times a second. A broker out of descriptors (EMFILE, the chaos fault
``fd-pressure``) then fails that call, kazoo drops a healthy connection ("Connection dropped:
socket connection error: Too many open files"), cannot open a socket to reconnect, and the
session expires: the broker loses its registration although ZooKeeper and the network are fine.
Kafka's ZooKeeper client (Java NIO) keeps one selector for the connection's life.

:class:`PollThreadingHandler` gives kazoo's ``selector_select`` a ``PollSelector`` instead: poll(2)
takes the descriptors to watch as an array and allocates none, so an established session only
needs the descriptors it already holds; only a reconnection needs a new one (its socket).
"""

from __future__ import annotations

import selectors
from types import SimpleNamespace
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select

#: What ``selector_select`` reads from its ``selectors_module``, with poll(2) as the selector.
POLL_SELECTORS = SimpleNamespace(
    DefaultSelector=selectors.PollSelector,
    EVENT_READ=selectors.EVENT_READ,
    EVENT_WRITE=selectors.EVENT_WRITE,
)


class PollThreadingHandler(SequentialThreadingHandler):
    """kazoo's default handler, whose ``select`` polls instead of opening an epoll descriptor."""

    name = "poll_threading"

    def select(self, *args: Any, **kwargs: Any) -> Any:
        return selector_select(*args, selectors_module=POLL_SELECTORS, **kwargs)
