"""Kafka's message classes, as ``kio`` generates them from Kafka's JSON schemas, and the few
conversions between them and the plain values of our bodies (docs/design.md "Two wire
protocols").

kio gives one frozen dataclass per message, nested struct and version, a compiled reader and a
Python writer. Its fields are typed: error codes are its ``ErrorCode`` enum, ``*_ms`` durations
``timedelta``, timestamps ``datetime``, topic ids ``UUID``. Translators (data_apis.py,
group_apis.py, admin_apis.py) write plain ints and strings through :func:`make`, which converts
each field by its ``kafka_type`` and lets a translator name the fields of the newest version it
serves: fields the class at hand does not have are dropped, fields it has and the translator did
not give take their default. So one translator serves every version of its API.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import uuid
from collections.abc import Callable
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

UTC = datetime.UTC
ZERO_UUID = uuid.UUID(int=0)


def error_code(code: int) -> KioErrorCode:
    return KioErrorCode(int(code))


def to_ms(value: datetime.timedelta | int) -> int:
    """A duration field (kio's ``timedelta``) as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def timestamp_ms(value: datetime.datetime | int | None) -> int:
    """A timestamp field (kio's ``datetime``; None is -1) as epoch milliseconds."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _from_ms(value: Any) -> Any:
    return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))


def _datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return None if int(value) < 0 else datetime.datetime.fromtimestamp(int(value) / 1000, UTC)


def _uuid(value: Any) -> Any:
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _error(value: Any) -> Any:
    return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "error_code": _error,
    "timedelta_i32": _from_ms,
    "timedelta_i64": _from_ms,
    "datetime_i64": _datetime,
    "uuid": _uuid,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    convert: Callable[[Any], Any] | None
    required: bool
    is_array: bool


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        is_array = getattr(f.type, "__origin__", None) is tuple or str(f.type).startswith("tuple[")
        out.append(_Field(f.name, _CONVERTERS.get(f.metadata.get("kafka_type", "")), required, is_array))
    return tuple(out)


def make(cls: type, /, **values: Any) -> Any:
    """An instance of kio class ``cls`` from plain values: each converted by its Kafka type,
    values for fields ``cls`` lacks dropped, absent optional fields defaulted, absent arrays
    empty. Raises TypeError for an absent required scalar (a translator bug)."""
    kwargs = {}
    for f in _fields(cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = f.convert(value) if f.convert is not None and value is not None else value
        elif f.required:
            if not f.is_array:
                raise TypeError(f"{cls.__qualname__}.{f.name} is required")
            kwargs[f.name] = ()
    return cls(**kwargs)


def has_field(cls_or_entity: Any, name: str) -> bool:
    cls = cls_or_entity if isinstance(cls_or_entity, type) else type(cls_or_entity)
    return any(f.name == name for f in _fields(cls))


@functools.cache
def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@functools.cache
def response_module(api_key: int, version: int) -> types.ModuleType:
    """The module of an API's response at ``version``: its nested classes by name."""
    return load_payload_module(api_key, version, EntityType.response)


@functools.cache
def request_reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(request_class(api_key, version))


@functools.cache
def response_writer(api_key: int, version: int) -> Callable[[Any, Any], None]:
    return entity_writer(response_class(api_key, version))


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this version of the API uses KIP-482's flexible encoding (and header v2/v1)."""
    return bool(request_class(api_key, version).__flexible__)


def known_version(api_key: int, version: int) -> bool:
    try:
        request_class(api_key, version)
        response_class(api_key, version)
    except Exception:
        return False
    return True


def error_entity(api_key: int, version: int, code: int, message: str | None = None) -> Any:
    """A response of any API at any version that says ``code`` everywhere it can (Kafka's
    ``AbstractRequest.getErrorResponse``): every error code field set, every message field
    ``message``, arrays empty, the rest their defaults or zero."""
    return _error_fill(response_class(api_key, version), code, message)


def _error_fill(cls: type, code: int, message: str | None) -> Any:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        if kafka_type == "error_code":
            values[f.name] = KioErrorCode(int(code))
        elif f.name == "error_message" and message is not None:
            values[f.name] = message[:1000]
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        elif str(f.type).startswith("tuple["):
            values[f.name] = ()
        elif dataclasses.is_dataclass(f.type) and isinstance(f.type, type):
            values[f.name] = _error_fill(f.type, code, message)
        else:
            values[f.name] = _zero(kafka_type, f)
    return cls(**values)


def _zero(kafka_type: str, f: dataclasses.Field) -> Any:
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "string":
        return None if "None" in str(f.type) else ""
    if kafka_type in ("bytes", "records"):
        return None if "None" in str(f.type) else b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return None if "None" in str(f.type) else ZERO_UUID
    if kafka_type == "datetime_i64":
        return None if "None" in str(f.type) else datetime.datetime.fromtimestamp(0, UTC)
    if kafka_type == "float64":
        return 0.0
    return -1 if f.name.endswith(("_id", "_epoch")) else 0
