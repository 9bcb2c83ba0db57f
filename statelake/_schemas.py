"""Table schemas, loaded from the JSON files in ``schemas/`` (the single source)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import pyarrow as pa

PARTIALS = "partials"
CONTROL = "control"
LAYOUTS = ("card", "packed")
FORMAT_VERSION = 1

_ARROW_TYPES: dict[str, pa.DataType] = {
    "long": pa.int64(),
    "integer": pa.int32(),
    "string": pa.string(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "boolean": pa.bool_(),
    "double": pa.float64(),
}


@cache
def spec(table: str) -> dict[str, Any]:
    """The parsed JSON schema document of ``table`` ('partials' or 'control')."""
    text = resources.files("statelake.schemas").joinpath(f"{table}.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _arrow_type(t: Any) -> pa.DataType:
    if isinstance(t, str):
        return _ARROW_TYPES[t]
    if t["type"] == "array":
        return pa.list_(pa.field("element", _arrow_type(t["elementType"]), nullable=True))
    raise ValueError(f"unsupported schema type {t!r}")


@cache
def arrow_schema(table: str) -> pa.Schema:
    """The full Arrow schema of ``table``, partition columns included."""
    return pa.schema(
        [
            pa.field(f["name"], _arrow_type(f["type"]), nullable=f["nullable"])
            for f in spec(table)["fields"]
        ]
    )


def partition_by(table: str, layout: str = "card") -> list[str]:
    parts = spec(table)["partition_by"]
    return list(parts[layout]) if isinstance(parts, dict) else list(parts)


@cache
def file_schema(table: str, layout: str = "card") -> pa.Schema:
    """The schema of one data file: partition columns live in the path, not the file."""
    full = arrow_schema(table)
    parts = set(partition_by(table, layout))
    return pa.schema([f for f in full if f.name not in parts])


def field_names(table: str) -> list[str]:
    return [f["name"] for f in spec(table)["fields"]]
