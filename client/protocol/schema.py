"""The schema vocabulary every request and response body is written in, and its checker
(the role of Kafka's protocol ``Schema``/``Type`` classes; docs/design.md "Wire protocol").

Bodies are msgpack maps. A schema is ``"int"``, ``"str"``, ``"bytes"``, ``"bool"``, ``"any"``,
``Nullable(x)``, ``Array(x)``, ``Map(k, v)``, a dict ``{field: spec}`` for a struct, and
``Opt(spec, default)`` for a struct field that may be absent. :func:`validate` checks a decoded
body against one, fills in the defaults of absent optional fields, and raises
:class:`InvalidBody` naming the first offending field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.protocol.errors import ProtocolError


class InvalidBody(ProtocolError):
    """A request or response body that does not match its schema; the message names the field."""


@dataclass(frozen=True)
class Nullable:
    inner: Any


@dataclass(frozen=True)
class Array:
    inner: Any


@dataclass(frozen=True)
class Map:
    key: Any
    value: Any


@dataclass(frozen=True)
class Opt:
    inner: Any
    default: Any = None


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def validate(spec: Any, value: Any, path: str = "body") -> Any:
    """Check ``value`` against ``spec``; returns it with optional struct fields defaulted."""
    if isinstance(spec, str):
        ok = {
            # an IntEnum (a handler's ErrorCode) is an int; a bool is not
            "int": lambda v: isinstance(v, int) and type(v) is not bool and INT64_MIN <= v <= INT64_MAX,
            "str": lambda v: type(v) is str,
            "bytes": lambda v: type(v) is bytes,
            "bool": lambda v: type(v) is bool,
            "any": lambda v: True,
        }[spec](value)
        if not ok:
            raise InvalidBody(f"{path} must be {spec}, got {type(value).__name__}")
        return value
    if isinstance(spec, Nullable):
        return None if value is None else validate(spec.inner, value, path)
    if isinstance(spec, Array):
        if type(value) is not list:
            raise InvalidBody(f"{path} must be an array, got {type(value).__name__}")
        return [validate(spec.inner, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(spec, Map):
        if type(value) is not dict:
            raise InvalidBody(f"{path} must be a map, got {type(value).__name__}")
        return {
            validate(spec.key, k, f"{path} key"): validate(spec.value, v, f"{path}[{k!r}]")
            for k, v in value.items()
        }
    if isinstance(spec, dict):
        if type(value) is not dict:
            raise InvalidBody(f"{path} must be a map, got {type(value).__name__}")
        out = {}
        for name, field_spec in spec.items():
            if name in value:
                inner = field_spec.inner if isinstance(field_spec, Opt) else field_spec
                out[name] = validate(inner, value[name], f"{path}.{name}")
            elif isinstance(field_spec, Opt):
                out[name] = field_spec.default
            else:
                raise InvalidBody(f"{path}.{name} is missing")
        return out
    raise TypeError(f"bad schema spec {spec!r}")
