"""Real OS processes: racing coordinators, and clean interpreter exits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statelake import DeltaStateBackend

ROOT = Path(__file__).resolve().parents[2]


def race_epoch_complete(uri: str, options: dict[str, str], processes: int, epochs: int) -> None:
    """Spawn racers on one store; assert exactly one winner per epoch, every loser told so."""
    with DeltaStateBackend(
        uri, instance_id="writer", vnode_capacity=2, storage_options=options
    ) as w:
        for epoch in range(epochs):
            w.write_partials(epoch, 0, {0: b"a", 1: b"b"})
    start_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.delta._race_worker",
                uri,
                f"racer-{i}",
                str(epochs),
                str(start_at),
                json.dumps(options),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    with DeltaStateBackend(
        uri, instance_id="auditor", vnode_capacity=2, storage_options=options
    ) as a:
        markers = a.commit_markers()
    for epoch in range(epochs):
        outcomes = [r[str(epoch)] for r in results]
        winners = [f"racer-{i}" for i, o in enumerate(outcomes) if o == "won"]
        assert len(winners) == 1, (epoch, outcomes)
        assert all(o == f"lost:{winners[0]}" for o in outcomes if o != "won"), (epoch, outcomes)
        assert [m.committer for m in markers[epoch]] == winners


@pytest.mark.slow
def test_racing_processes_seal_each_epoch_exactly_once(store_uri: str) -> None:
    """4 processes race epoch_complete on 12 epochs: one winner each, the rest SplitBrainCommit."""
    race_epoch_complete(store_uri, {}, processes=4, epochs=12)


SCRIPT = textwrap.dedent(
    """
    import sys
    from statelake import DeltaStateBackend
    b = DeltaStateBackend(sys.argv[1], instance_id="p", vnode_capacity=4)
    for e in range(3):
        b.write_partials(e, 0, {v: bytes([e, v]) for v in range(4)})
        assert b.epoch_complete(e, list(range(4)))
    assert b.read_partial(1, 1) == bytes([1, 1])
    assert b.read_partial(1, 1, as_of=1) is None  # version 1 holds epoch 0 only
    assert b.read_partial(1, 0, as_of=1) == bytes([0, 1])
    assert b.read_epoch(2)[3] == bytes([2, 3])
    b.prune_before(2)
    assert b.committed_epochs(as_of=2) == [0, 1]
    print("done")
    """
)


@pytest.mark.slow
def test_processes_using_statelake_exit_with_code_zero(tmp_path: Path) -> None:
    """Eight fresh interpreters write, seal, time-travel, prune: each exits 0 (no abort at exit)."""
    script = tmp_path / "use.py"
    script.write_text(SCRIPT)
    for run in range(8):
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp_path / f"store-{run % 2}")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 0, (run, proc.returncode, proc.stderr[-2000:])
        assert proc.stdout.strip() == "done"
