"""One TCP connection to a broker: correlation ids, pipelining, per-request timeouts.

Many requests may be in flight on one connection; the broker answers them in order (a connection is
muted while its request is handled; docs/design.md "Broker"), and responses are matched to callers
by correlation id. A connection that fails fails every waiter with a retriable NETWORK_EXCEPTION and
is not reused.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

from client.protocol import api, framing
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError, ProtocolError

log = logging.getLogger(__name__)


class ConnectionClosed(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


#: How a component opens a connection: ``await connect(host, port, client_id=..., timeout=...)``.
#: :meth:`BrokerConnection.open` (real TCP) by default; the simulator passes its network's.
ConnectionFactory = Callable[..., Awaitable["BrokerConnection"]]


class BrokerConnection(asyncio.Protocol):
    """Use :meth:`open` to connect, :meth:`request` to send and await a response body."""

    def __init__(self, host: str, port: int, client_id: str, max_frame_bytes: int) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._decoder = framing.FrameDecoder(max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[ApiKey, asyncio.Future]] = {}
        self._correlation = itertools.count(1)
        self._closed_reason: str | None = None

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        client_id: str = "floodmark",
        timeout: float = 10.0,
        max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES,
    ) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: cls(host, port, client_id, max_frame_bytes), host, port),
                timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosed(
                f"cannot connect to {host}:{port}: {exc.__class__.__name__} {exc}"
            ) from None
        return protocol

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        try:
            while (payload := self._decoder.next_frame()) is not None:
                correlation_id, body = framing.decode_response(payload)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    log.warning(
                        "%s:%s sent a response for unknown correlation id %s",
                        self.host,
                        self.port,
                        correlation_id,
                    )
                    continue
                api_key, future = entry
                if not future.done():
                    future.set_result(body)
        except ProtocolError as exc:
            self._fail(f"bad response from {self.host}:{self.port}: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else ""))

    # -- API ----------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return (
            self._closed_reason is None and self._transport is not None and not self._transport.is_closing()
        )

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send(self, api_key: ApiKey, body: dict, expect_response: bool = True) -> asyncio.Future | None:
        """Write a request now; return a future for its response body (None when no response
        is expected, as for acks=0 produce)."""
        if not self.is_open:
            raise ConnectionClosed(self._closed_reason or f"connection to {self.host}:{self.port} is closed")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        future: asyncio.Future | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (api_key, future)
        self._transport.write(framing.encode_request(int(api_key), 0, correlation_id, self.client_id, body))
        return future

    async def request(self, api_key: ApiKey, body: dict, timeout: float = 30.0) -> dict:
        """Send and await the response body. Raises KafkaError for a broker-level error body
        (an invalid request), ConnectionClosed on connection loss, and REQUEST_TIMED_OUT."""
        future = self.send(api_key, body)
        try:
            response = await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{api_key.name} to {self.host}:{self.port} got no answer in {timeout}s",
            ) from None
        if (
            isinstance(response, dict)
            and set(response) == {"error_code", "error_message"}
            and response["error_code"]
        ):
            raise KafkaError(response["error_code"], response["error_message"] or "")
        return api.validate_response(api_key, response)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail("connection closed by client")

    def _fail(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(reason))
                # A caller that was cancelled (a consumer closing mid long-poll) no longer awaits
                # this future: mark the exception seen so asyncio does not log it as lost.
                future.exception()
