"""The hand-written Parquet encoder produces files every reader accepts, value for value."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from statelake.delta._parquet import Column, encode_table

COLUMNS = [
    Column(name="vnode", kind="int32"),
    Column(name="assignment_version", kind="int64"),
    Column(name="writer", kind="string"),
    Column(name="written_at", kind="timestamp_us"),
    Column(name="payload", kind="binary"),
]

rows = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=40),
        st.integers(0, 2**62),
        st.binary(max_size=300),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(rows)
def test_pyarrow_reads_back_exactly_what_was_encoded(
    data: list[tuple[int, int, str, int, bytes]],
) -> None:
    """Any values round-trip through pyarrow with the declared Arrow types."""
    cols = [list(c) for c in zip(*data, strict=True)]
    table = pq.read_table(pa.BufferReader(encode_table(COLUMNS, cols)))
    assert table.schema.types == [
        pa.int32(),
        pa.int64(),
        pa.string(),
        pa.timestamp("us", tz="UTC"),
        pa.binary(),
    ]
    got = table.drop_columns(["written_at"]).to_pydict()
    assert got["vnode"] == cols[0]
    assert got["assignment_version"] == cols[1]
    assert got["writer"] == cols[2]
    assert table.column("written_at").cast(pa.int64()).to_pylist() == cols[3]
    assert got["payload"] == cols[4]


def test_more_than_fourteen_columns_and_large_values(tmp_path: Path) -> None:
    """Long thrift lists (>= 15 items) and multi-megabyte values use the long encodings."""
    cols = [Column(name=f"c{i}", kind="int64") for i in range(20)] + [
        Column(name="big", kind="binary")
    ]
    values = [[i, i + 1] for i in range(20)] + [[b"x" * 3_000_000, b""]]
    table = pq.read_table(pa.BufferReader(encode_table(cols, values)))
    assert table.num_rows == 2 and table.column("c19").to_pylist() == [19, 20]
    assert len(table.column("big")[0].as_py()) == 3_000_000


def test_delta_rs_reads_statelake_data_files(tmp_path: Path) -> None:
    """delta-rs's own reader (DataFusion SQL) decodes statelake's files, in a clean process."""
    script = textwrap.dedent(
        f"""
        import pyarrow as pa
        from deltalake import DeltaTable, QueryBuilder
        from statelake import DeltaStateBackend
        for layout in ("card", "packed"):
            uri = {str(tmp_path)!r} + "/" + layout
            with DeltaStateBackend(uri, instance_id="w", vnode_capacity=4, layout=layout) as b:
                b.write_partials(3, 1, {{v: bytes([v]) * 5 for v in range(4)}})
            qb = QueryBuilder().register("p", DeltaTable(uri + "/partials"))
            sql = "select vnode, payload, writer from p order by vnode"
            rows = pa.table(qb.execute(sql).read_all()).to_pylist()
            assert [r["payload"] for r in rows] == [bytes([v]) * 5 for v in range(4)], rows
            assert {{r["writer"] for r in rows}} == {{"w"}}
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
