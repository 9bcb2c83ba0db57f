"""The ``statelake`` Spark data source: statelake tables through delta-rs, on any Spark 4.

``spark.read.format("statelake").option("table", "partials").load(uri)``
reads one table of the store at ``uri``. Planning resolves the live files
through the Delta log on the driver (delta-rs, :func:`statelake.delta._log.open_table`
and :func:`~statelake.delta._log.entries_of`); executors read the Parquet
files with pyarrow only (:class:`~statelake.delta._storage.Storage`), never
through a delta-rs dataset scan (that scan can abort the interpreter at exit).

Options (case-insensitive):

* ``path`` / ``uri`` (or the ``load()`` argument): the store root.
* ``table``: ``partials`` (default) or ``control``.
* ``versionAsOf`` / ``timestampAsOf``: Delta time travel (a table version, or
  an ISO-8601 instant; a naive instant is UTC).
* ``maxPartitionBytes``: the most file bytes one Spark partition reads
  (default 64 MiB). ``minPartitions``: the fewest Spark partitions when
  there are at least that many files (default: the CPU count of the planner,
  so a local session uses every core). Small files are grouped, so a table
  of ten thousand tiny partials is a few Spark partitions, not ten thousand.
* every other option is a storage option passed to delta-rs and pyarrow
  (``aws_access_key_id``, ``aws_endpoint_url``, ...); never printed.

Filters on ``epoch`` and ``vnode`` (``=``, ``IN``, ``<``, ``<=``, ``>``,
``>=``) are pushed down: files whose partition values or min/max statistics
cannot match are not opened at all, and rows of files that are opened are
filtered exactly, so Spark does not evaluate those filters again. Pushdown
needs ``spark.sql.python.filterPushdown.enabled=true``, which
:func:`statelake.spark.register` sets.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from .. import _schemas
from ..errors import InvalidArgument
from ._schema import spark_schema

__all__ = [
    "FORMAT",
    "Bounds",
    "ScanFile",
    "ScanOptions",
    "StatelakeDataSource",
    "parse_options",
    "parse_timestamp",
    "plan_partitions",
    "plan_scan",
]

FORMAT = "statelake"
DEFAULT_MAX_PARTITION_BYTES = 64 * 1024 * 1024

_RESERVED = {
    "path",
    "paths",
    "uri",
    "table",
    "versionasof",
    "timestampasof",
    "maxpartitionbytes",
    "minpartitions",
}
# Columns whose filters are pushed down, per table.
_PUSHABLE = {_schemas.PARTIALS: ("epoch", "vnode"), _schemas.CONTROL: ("epoch",)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanOptions:
    """The parsed options of one read; storage options are kept out of ``repr``."""

    uri: str
    table: str = _schemas.PARTIALS
    version: int | None = None
    timestamp: datetime | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    min_partitions: int | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def as_of(self) -> int | datetime | None:
        return self.version if self.version is not None else self.timestamp


def parse_timestamp(text: str) -> datetime:
    """An ISO-8601 instant (``2024-05-01T10:00:00Z``, ``2024-05-01 10:00:00``); naive is UTC."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        ts = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise InvalidArgument(f"timestampAsOf must be an ISO-8601 instant, got {text!r}") from exc
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts


def parse_options(options: Mapping[str, str]) -> ScanOptions:
    """Turn data source options into :class:`ScanOptions` (raises InvalidArgument)."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    uri = opts.get("uri") or opts.get("path")
    if not uri:
        raise InvalidArgument(
            "the statelake data source needs the store root: .load(uri) or .option('uri', uri)"
        )
    table = opts.get("table", _schemas.PARTIALS)
    if table not in (_schemas.PARTIALS, _schemas.CONTROL):
        raise InvalidArgument(f"option table must be 'partials' or 'control', got {table!r}")
    version: int | None = None
    timestamp: datetime | None = None
    if "versionasof" in opts and "timestampasof" in opts:
        raise InvalidArgument("give versionAsOf or timestampAsOf, not both")
    if "versionasof" in opts:
        try:
            version = int(opts["versionasof"])
        except ValueError as exc:
            raise InvalidArgument(
                f"versionAsOf must be an int, got {opts['versionasof']!r}"
            ) from exc
        if version < 0:
            raise InvalidArgument(f"versionAsOf must be >= 0, got {version}")
    if "timestampasof" in opts:
        timestamp = parse_timestamp(opts["timestampasof"])
    max_bytes = int(opts.get("maxpartitionbytes", DEFAULT_MAX_PARTITION_BYTES))
    min_parts = int(opts["minpartitions"]) if "minpartitions" in opts else None
    return ScanOptions(
        uri=uri,
        table=table,
        version=version,
        timestamp=timestamp,
        max_partition_bytes=max(1, max_bytes),
        min_partitions=min_parts,
        storage_options={k: v for k, v in opts.items() if k not in _RESERVED},
    )


@dataclass(slots=True, kw_only=True)
class Bounds:
    """What one column may hold after the pushed filters: a range and maybe a value set."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def add(self, f: Filter) -> bool:
        """Narrow by ``f``; False if ``f`` is not an integer comparison we understand."""
        if isinstance(f, In):
            vals = f.value
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
                return False
            new = frozenset(int(v) for v in vals)
            self.values = new if self.values is None else self.values & new
            return True
        value = (
            f.value
            if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual))
            else None
        )
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        if isinstance(f, EqualTo):
            new = frozenset({value})
            self.values = new if self.values is None else self.values & new
        elif isinstance(f, GreaterThan):
            self.lo = value + 1 if self.lo is None else max(self.lo, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.lo = value if self.lo is None else max(self.lo, value)
        elif isinstance(f, LessThan):
            self.hi = value - 1 if self.hi is None else min(self.hi, value - 1)
        elif isinstance(f, LessThanOrEqual):
            self.hi = value if self.hi is None else min(self.hi, value)
        else:
            return False
        return True

    def overlaps(self, lo: int | None, hi: int | None) -> bool:
        """Could a file whose column lies in ``[lo, hi]`` (None = unknown) hold a match?"""
        lo_b = self.lo if self.lo is not None else -(2**63)
        hi_b = self.hi if self.hi is not None else 2**63
        f_lo = lo if lo is not None else -(2**63)
        f_hi = hi if hi is not None else 2**63
        if max(lo_b, f_lo) > min(hi_b, f_hi):
            return False
        if self.values is not None:
            return any(max(lo_b, f_lo) <= v <= min(hi_b, f_hi) for v in self.values)
        return True

    def mask(self, column: pa.Array | pa.ChunkedArray) -> Any:
        """An Arrow boolean mask of the rows that satisfy these bounds."""
        conds = []
        if self.lo is not None:
            conds.append(pc.greater_equal(column, self.lo))
        if self.hi is not None:
            conds.append(pc.less_equal(column, self.hi))
        if self.values is not None:
            conds.append(pc.is_in(column, value_set=pa.array(sorted(self.values), column.type)))
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = pc.and_(out, c)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanFile:
    """One data file to read, with the partition values that live in its path."""

    path: str
    size: int
    partition: dict[str, str | None]


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def plan_scan(options: ScanOptions, bounds: Mapping[str, Bounds]) -> tuple[int, list[ScanFile]]:
    """``(table version, files to read)`` for one read; files that cannot match are skipped.

    Runs on the driver (Spark's planning worker): delta-rs loads the log at
    the requested version; the file list is judged by partition values and
    the min/max statistics the log carries, without opening any data file.
    """
    from ..delta._log import entries_of, open_table
    from ..delta._storage import Storage

    storage = Storage(options.uri, options.storage_options)
    table = open_table(storage.uri(options.table), storage.options, options.as_of)
    version = int(table.version())
    files = []
    for entry in entries_of(table):
        keep = True
        for col, b in bounds.items():
            part = _int_or_none(entry.partition.get(col))
            lo: int | None
            hi: int | None
            if part is not None:
                lo = hi = part
            else:
                lo = _int_or_none(entry.min_values.get(col))
                hi = _int_or_none(entry.max_values.get(col))
            if not b.overlaps(lo, hi):
                keep = False
                break
        if keep:
            files.append(
                ScanFile(path=entry.path, size=entry.size, partition=dict(entry.partition))
            )
    files.sort(key=lambda f: f.path)
    return version, files


def plan_partitions(
    files: Sequence[ScanFile], *, max_partition_bytes: int, min_partitions: int | None = None
) -> list[list[ScanFile]]:
    """Group files into Spark partitions: contiguous runs of about equal bytes.

    The count is ``ceil(total bytes / max_partition_bytes)``, raised to
    ``min_partitions`` (default: this machine's CPU count) and capped by the
    number of files. Contiguous runs keep one epoch's files together.
    """
    if not files:
        return []
    floor = min_partitions if min_partitions is not None else (os.cpu_count() or 1)
    total = sum(max(f.size, 1) for f in files)
    count = max(math.ceil(total / max_partition_bytes), floor, 1)
    count = min(count, len(files))
    target = total / count
    groups: list[list[ScanFile]] = [[]]
    acc = 0.0
    for i, f in enumerate(files):
        remaining_files = len(files) - i
        remaining_groups = count - len(groups)
        if groups[-1] and (acc >= target or remaining_files <= remaining_groups):
            groups.append([])
            acc = 0.0
        groups[-1].append(f)
        acc += max(f.size, 1)
    return groups


class _FilesPartition(InputPartition):
    """One Spark partition: a few data files of one table version."""

    def __init__(self, files: list[ScanFile]) -> None:
        super().__init__(files)
        self.files = files


class StatelakeReader(DataSourceReader):
    """Plans on the driver (delta-rs log), reads on executors (pyarrow)."""

    def __init__(self, options: ScanOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.bounds: dict[str, Bounds] = {}

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        pushable = _PUSHABLE[self.options.table]
        self.bounds = {}  # each planning pushes its own filters: never keep an earlier query's
        for f in filters:
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            col = attribute[0] if len(attribute) == 1 else None
            if col in pushable:
                b = self.bounds.setdefault(col, Bounds())
                if b.add(f):
                    continue
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        _, files = plan_scan(self.options, self.bounds)
        groups = plan_partitions(
            files,
            max_partition_bytes=self.options.max_partition_bytes,
            min_partitions=self.options.min_partitions,
        )
        # An empty table still needs one (empty) partition.
        return [_FilesPartition(g) for g in groups] or [_FilesPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from ..delta._partials import read_file
        from ..delta._storage import Storage

        files: list[ScanFile] = getattr(partition, "files", partition.value)
        storage = Storage(self.options.uri, self.options.storage_options)
        arrow = _schemas.arrow_schema(self.options.table)
        for f in files:
            data = read_file(storage, self.options.table, f.path)
            yield from _to_batches(data, f, arrow, self.bounds)


def _to_batches(
    data: pa.Table, f: ScanFile, arrow: pa.Schema, bounds: Mapping[str, Bounds]
) -> Iterator[pa.RecordBatch]:
    n = data.num_rows
    columns = []
    for fld in arrow:
        if fld.name in data.column_names:
            col = data.column(fld.name)
            if col.type != fld.type:
                col = col.cast(fld.type)
        else:
            raw = f.partition.get(fld.name)
            value = None if raw is None else _parse_partition(raw, fld.type)
            col = pa.chunked_array([pa.array([value] * n, fld.type)])
        columns.append(col)
    table = pa.Table.from_arrays(columns, schema=arrow)
    mask = None
    for name, b in bounds.items():
        m = b.mask(table.column(name))
        if m is not None:
            mask = m if mask is None else pc.and_(mask, m)
    if mask is not None:
        table = table.filter(mask)
    for batch in table.to_batches(max_chunksize=8192):
        if batch.num_rows:
            yield batch


def _parse_partition(raw: str, typ: pa.DataType) -> object:
    if pa.types.is_integer(typ):
        return int(raw)
    return raw


class StatelakeDataSource(DataSource):
    """``format("statelake")``: read a statelake table with nothing but PyPI packages."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return spark_schema(parse_options(self.options).table)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StatelakeReader(parse_options(self.options), schema)
