"""Parsing Kafka's ``bootstrap.servers`` (on the command line ``--bootstrap-server`` /
``FLOODMARK_BOOTSTRAP``: docs/operations.md "Bootstrap servers").

Accepted: ``"h1:9092,h2:9092"``, a sequence of ``"host:port"`` strings, or a sequence of
``(host, port)`` pairs. IPv6 literals are written in brackets (``"[::1]:9092"``). Empty
entries (a trailing comma) are ignored and duplicates dropped, keeping order; anything
else that is not a host and a port in 1..65535 is a :class:`ValueError` naming the entry.
"""

from __future__ import annotations

from collections.abc import Sequence


def _parse_entry(entry: str) -> tuple[str, int]:
    text = entry.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1 :].startswith(":"):
            raise ValueError(f"bootstrap server {entry!r} must look like [ipv6-address]:port")
        host, port_text = text[1:close], text[close + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"bootstrap server {entry!r} has no port (expected host:port)")
        if ":" in host:
            raise ValueError(f"bootstrap server {entry!r}: write IPv6 addresses in brackets, as [::1]:9092")
    return _check(host.strip(), port_text.strip(), entry)


def _check(host: str, port: object, entry: object) -> tuple[str, int]:
    if not host:
        raise ValueError(f"bootstrap server {entry!r} has an empty host")
    if isinstance(port, bool):
        raise ValueError(f"bootstrap server {entry!r} has a port that is not a number")
    if isinstance(port, str):
        if not port.isdigit():
            raise ValueError(f"bootstrap server {entry!r} has a port that is not a number: {port!r}")
        port = int(port)
    if not isinstance(port, int):
        raise ValueError(f"bootstrap server {entry!r} has a port that is not a number")
    if not 1 <= port <= 65535:
        raise ValueError(f"bootstrap server {entry!r} has port {port} outside 1..65535")
    return host, port


def parse_bootstrap(servers: str | Sequence[str] | Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """``"h:p,h:p"`` (or a list of those, or of ``(host, port)``) -> ``[(host, port), ...]``."""
    if isinstance(servers, str):
        items: list = servers.split(",")
    elif isinstance(servers, Sequence):
        items = list(servers)
    else:
        raise ValueError(f"bootstrap servers must be a string or a list, got {type(servers).__name__}")
    out: list[tuple[str, int]] = []
    for item in items:
        if isinstance(item, str):
            parts = [p for p in item.split(",") if p.strip()]
            addresses = [_parse_entry(p) for p in parts]
        elif isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], str):
            addresses = [_check(item[0].strip(), item[1], tuple(item))]
        else:
            raise ValueError(f"bootstrap server {item!r} must be 'host:port' or a (host, port) pair")
        for address in addresses:
            if address not in out:
                out.append(address)
    if not out:
        raise ValueError("no bootstrap servers given (expected host:port[,host:port...])")
    return out


def format_bootstrap(addresses: Sequence[tuple[str, int]]) -> str:
    """The inverse of :func:`parse_bootstrap`, for messages: ``"h1:9092,[::1]:9093"``."""
    return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)
