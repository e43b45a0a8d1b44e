"""The request handler pool (Kafka's ``KafkaRequestHandlerPool``; docs/design.md "Broker").

``num.io.threads`` tasks take requests off the RequestChannel and await the injected API handler
(Kafka's KafkaApis). The API handler may return before answering: a request parked in a purgatory
is answered later with :meth:`Request.respond`. An exception from the API handler is logged with
the API name and answered with UNKNOWN_SERVER_ERROR; it never kills a handler task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.network.metrics import NetworkMetrics
from broker.network.request_channel import Request, RequestChannel
from client.protocol.api import error_body
from client.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

ApiHandler = Callable[[Request], Awaitable[None]]


class RequestHandlerPool:
    """``num_handlers`` tasks feeding requests to ``api_handler``."""

    def __init__(
        self,
        channel: RequestChannel,
        api_handler: ApiHandler,
        num_handlers: int,
        metrics: NetworkMetrics | None = None,
    ) -> None:
        if num_handlers < 1:
            raise ValueError("num_handlers must be at least 1")
        self.channel = channel
        self.api_handler = api_handler
        self.num_handlers = num_handlers
        self.metrics = metrics
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(), name=f"request-handler-{i}") for i in range(self.num_handlers)
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _run(self) -> None:
        while True:
            request = await self.channel.receive_request()
            await self.handle(request)

    async def handle(self, request: Request) -> None:
        try:
            await self.api_handler(request)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being stopped
            self._failed(request, "cancelled")  # something the API handler awaited was cancelled
        except Exception as exc:
            self._failed(request, f"{exc.__class__.__name__}: {exc}"[:500], exc)

    def _failed(self, request: Request, reason: str, exc: BaseException | None = None) -> None:
        log.error(
            "error handling %s request (correlation id %d) from %s: %s",
            request.api_key.name,
            request.header.correlation_id,
            request.client_address,
            reason,
            exc_info=exc,
        )
        if self.metrics is not None:
            self.metrics.on_error("handler_exception")
        if not request.responded:
            request.respond(
                error_body(ErrorCode.UNKNOWN_SERVER_ERROR, f"{request.api_key.name} failed: {reason}")
            )
