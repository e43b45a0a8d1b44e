"""The one way every client applies a user's keyword overrides to its config dataclass.

``Producer("h:9092", acks="all")`` and ``Consumer("h:9092", auto_offset_reset="earliest")``
take a config object plus keyword overrides, as aiokafka's ``AIOKafkaProducer`` /
``AIOKafkaConsumer`` take their options as keywords; both come through
:func:`config_with_overrides`, so an unknown option is refused the same way everywhere. :func:`require_positive` and
:func:`require_non_negative` are the range checks both configs' ``__post_init__`` make.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TypeVar

C = TypeVar("C")


def config_with_overrides(config: C, overrides: dict, what: str) -> C:
    """``dataclasses.replace`` that names unknown option(s) in its ValueError."""
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(
            f"unknown {what} option(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})"
        )
    return dataclasses.replace(config, **overrides) if overrides else config


def require_positive(config: object, names: Iterable[str]) -> None:
    """ValueError unless each named option is an int > 0."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def require_non_negative(config: object, names: Iterable[str], allow_float: bool = False) -> None:
    """ValueError unless each named option is an int (or, with ``allow_float``, a number) >= 0."""
    kinds, what = (int | float, "number") if allow_float else (int, "integer")
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, kinds) or value < 0:
            raise ValueError(f"{name} must be a non-negative {what}, got {value!r}")
