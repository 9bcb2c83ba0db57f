"""Spark schemas of the statelake tables, built from ``schemas/*.json`` (the single source)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import _schemas

__all__ = ["spark_schema"]

_SPARK_TYPES: dict[str, DataType] = {
    "long": LongType(),
    "integer": IntegerType(),
    "string": StringType(),
    "binary": BinaryType(),
    # Stored as UTC instants (Arrow timestamp[us, UTC]); Spark's TimestampType is the same.
    "timestamp": TimestampType(),
    "boolean": BooleanType(),
    "double": DoubleType(),
}


def _spark_type(t: Any) -> DataType:
    if isinstance(t, str):
        return _SPARK_TYPES[t]
    if t["type"] == "array":
        return ArrayType(_spark_type(t["elementType"]), containsNull=True)
    raise ValueError(f"unsupported schema type {t!r}")


@cache
def spark_schema(table: str) -> StructType:
    """The Spark ``StructType`` of ``table`` ('partials' or 'control'), partition columns included.

    Column order and nullability follow the JSON schema, so a DataFrame from
    the statelake data source and one from ``format("delta")`` line up.
    """
    return StructType(
        [
            StructField(f["name"], _spark_type(f["type"]), nullable=bool(f["nullable"]))
            for f in _schemas.spec(table)["fields"]
        ]
    )
