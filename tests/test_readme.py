"""The README's Python examples run as written, each in a fresh interpreter and folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize("index", [i for i, b in enumerate(BLOCKS) if "statelake.spark" not in b])
def test_readme_python_example_runs(index: int, tmp_path: Path) -> None:
    """Every library example in the README runs and exits 0."""
    code = BLOCKS[index].replace("/tmp/statelake-demo", str(tmp_path / "statelake-demo"))
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_readme_worker_example_prints_what_it_says(tmp_path: Path) -> None:
    """The first example's printed results match its comments."""
    code = BLOCKS[0].replace("/tmp/statelake-demo", str(tmp_path / "demo"))
    out = _run(code, tmp_path).stdout.split()
    assert out == ["b'sum=2'", "[2]", "None", "b'sum=2'"]


@pytest.mark.spark
@pytest.mark.slow
def test_readme_spark_example_runs(tmp_path: Path) -> None:
    """The Spark SQL example runs against a store with a few sealed epochs."""
    (spark_block,) = [b for b in BLOCKS if "statelake.spark" in b]
    setup = (
        "from statelake import DeltaStateBackend\n"
        "b = DeltaStateBackend('./statelake-data/store', instance_id='p', vnode_capacity=4)\n"
        "for e in range(4):\n"
        "    b.write_partials(e, 0, {v: bytes([e, v]) for v in range(4)})\n"
        "    assert b.epoch_complete(e, list(range(4)))\n"
        "b.close()\n"
    )
    proc = _run(setup + spark_block + "\nassert old.count() == 4\nspark.stop()\n", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
