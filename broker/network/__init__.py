"""The broker's network layer: the Reactor pipeline of Kafka's SocketServer
(docs/design.md "Broker").

Acceptor -> Processors -> RequestChannel -> request handlers -> the injected API handler, and back.
"""

from broker.network.handlers import ApiHandler, RequestHandlerPool
from broker.network.metrics import NetworkMetrics
from broker.network.request_channel import Request, RequestChannel, Response
from broker.network.socket_server import Listener, NetworkConfig, SocketServer

__all__ = [
    "ApiHandler",
    "Listener",
    "NetworkConfig",
    "NetworkMetrics",
    "Request",
    "RequestChannel",
    "RequestHandlerPool",
    "Response",
    "SocketServer",
]
