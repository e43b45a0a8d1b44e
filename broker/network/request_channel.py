"""The RequestChannel: where processors hand requests to handlers and get responses back
(Kafka's ``kafka.network.RequestChannel``; docs/design.md "Broker").

It holds one bounded request queue shared by every processor (``queued.max.requests``) and one
unbounded response queue per processor. A connection has at most one request in flight (it is
muted meanwhile), so the response queues are bounded by the number of connections.

Backpressure: when the request queue is full, :meth:`RequestChannel.send_request` parks the
request in a FIFO of blocked admissions and returns False; the processor pauses reading that
connection. Each time a handler takes a request off the queue, the oldest blocked request is
admitted and its callback resumes reading. New requests never overtake blocked ones.

:class:`Request` is what handlers see; :meth:`Request.respond`, :meth:`Request.no_response` and
:meth:`Request.close_connection` put a :class:`Response` on its processor's response queue, so a
request parked in a purgatory can be answered later from any task on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.network.wire_codec import MSGPACK_CODEC, WireCodec
from client.protocol.api import ApiKey
from client.protocol.framing import RequestHeader

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Response:
    """What a processor writes back: ``payload`` is a whole response frame, or None when
    nothing is sent (acks=0); ``close`` asks the processor to close the connection."""

    request: Request
    payload: bytes | None
    close: bool = False


@dataclass(eq=False)
class Request:
    """A validated request from one connection, as the API layer sees it."""

    header: RequestHeader
    api_key: ApiKey
    body: dict
    connection_id: str
    client_address: str
    processor_id: int
    received_ms: float
    #: The listener (KIP-103) whose acceptor took the connection: Metadata answers with it.
    listener_name: str = "PLAINTEXT"
    #: The listener's wire codec (broker/network/wire_codec.py) and what it kept of the request.
    codec: WireCodec = MSGPACK_CODEC
    codec_context: Any = field(default=None, repr=False)
    _channel: RequestChannel | None = field(default=None, repr=False)
    _responded: bool = field(default=False, init=False, repr=False)

    @property
    def responded(self) -> bool:
        return self._responded

    def respond(self, body: dict) -> None:
        """Queue the response. A second answer is ignored (and logged); answering after the
        connection closed is a silent no-op. Raises if ``body`` cannot be encoded, and then
        the request still counts as unanswered."""
        if self._already_answered("respond"):
            return
        payload = self.codec.encode_response(self.header, self.api_key, body, self.codec_context)
        self._complete(Response(self, payload))

    def no_response(self) -> None:
        """Send nothing (acks=0 produce) but unmute the connection."""
        if not self._already_answered("no_response"):
            self._complete(Response(self, None))

    def close_connection(self) -> None:
        """Close the connection once every earlier response has been written."""
        if not self._already_answered("close_connection"):
            self._complete(Response(self, None, close=True))

    def _already_answered(self, action: str) -> bool:
        if self._responded:
            log.warning(
                "%s called on %s request (correlation id %d) from %s after it was answered; ignored",
                action,
                self.api_key.name,
                self.header.correlation_id,
                self.connection_id,
            )
        return self._responded

    def _complete(self, response: Response) -> None:
        self._responded = True
        if self._channel is not None:
            self._channel.send_response(response)


class RequestChannel:
    """One bounded request queue, one response queue per processor."""

    def __init__(self, queued_max_requests: int, num_processors: int) -> None:
        if queued_max_requests < 1:
            raise ValueError("queued_max_requests must be at least 1")
        self.queued_max_requests = queued_max_requests
        self._requests: asyncio.Queue[Request] = asyncio.Queue(queued_max_requests)
        self._blocked: deque[tuple[Request, Callable[[], None]]] = deque()
        self._responses: list[asyncio.Queue[Response]] = [asyncio.Queue() for _ in range(num_processors)]
        self._closed = False

    # -- requests -------------------------------------------------------------------------------
    @property
    def request_queue_size(self) -> int:
        return self._requests.qsize()

    @property
    def blocked_count(self) -> int:
        """Requests waiting for room in the queue (each one has paused its connection)."""
        return len(self._blocked)

    def send_request(self, request: Request, on_admitted: Callable[[], None]) -> bool:
        """Enqueue ``request``; True if it went straight in. Otherwise it waits, FIFO, for room,
        and ``on_admitted`` is called (synchronously, from the handler that made room) once it
        is in the queue."""
        if not self._blocked and not self._requests.full():
            self._requests.put_nowait(request)
            return True
        self._blocked.append((request, on_admitted))
        return False

    def withdraw(self, request: Request) -> None:
        """Forget a blocked request whose connection has closed."""
        for i, (blocked, _) in enumerate(self._blocked):
            if blocked is request:
                del self._blocked[i]
                return

    async def receive_request(self) -> Request:
        request = await self._requests.get()
        while self._blocked and not self._requests.full():
            admitted, on_admitted = self._blocked.popleft()
            self._requests.put_nowait(admitted)
            on_admitted()
        return request

    # -- responses ------------------------------------------------------------------------------
    def response_queue(self, processor_id: int) -> asyncio.Queue[Response]:
        return self._responses[processor_id]

    def send_response(self, response: Response) -> None:
        if not self._closed:
            self._responses[response.request.processor_id].put_nowait(response)

    def close(self) -> None:
        """Drop everything; later responses are ignored (the server is stopping)."""
        self._closed = True
        self._blocked.clear()
        for queue in self._responses:
            while not queue.empty():
                queue.get_nowait()
