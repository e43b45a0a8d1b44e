"""One configuration property: its name, type, default and valid range, and its parser (the role of
Kafka's ``ConfigDef.ConfigKey``; docs/operations.md "Broker configuration").

A leaf module, so each part that owns a section of the broker's properties (the group
coordinator's ``group.*`` and ``offsets.*``, the log cleaner's ``log.cleaner.*``) declares its
rows next to its code, and :mod:`broker.config` gathers them into one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.config_error import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Prop:
    name: str
    kind: str  # int | bool | str | list | double
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""

    def parse(self, raw: str | int | bool) -> Any:
        text = str(raw).strip()
        if self.kind == "int":
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(
                    f"Invalid value {text!r} for configuration {self.name}: not a number"
                ) from None
            if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                bounds = f"[{self.low if self.low is not None else '...'},...,{self.high if self.high is not None else '...'}]"
                raise ConfigError(
                    f"Invalid value {value} for configuration {self.name}: Value must be in {bounds}"
                )
            return value
        if self.kind == "double":
            try:
                number = float(text)
            except ValueError:
                raise ConfigError(
                    f"Invalid value {text!r} for configuration {self.name}: not a number"
                ) from None
            if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
                raise ConfigError(
                    f"Invalid value {number} for configuration {self.name}: Value must be in [{self.low},...,{self.high}]"
                )
            return number
        if self.kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ConfigError(
                    f"Invalid value {text!r} for configuration {self.name}: Expected value to be true or false"
                )
            return text.lower() == "true"
        if self.kind == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        if self.choices and text not in self.choices:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {self.name}: String must be one of: {', '.join(self.choices)}"
            )
        return text


def props_table(*props: Prop) -> dict[str, Prop]:
    return {p.name: p for p in props}
