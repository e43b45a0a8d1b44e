"""The JSON of Kafka's znodes (Kafka's Json.encodeAsBytes / parseBytes): compact, UTF-8."""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes) -> Any:
    return json.loads(data.decode())
