"""Worker processes for the reliability tests (run as fresh interpreters, never forked).

``python -m tests.reliability._procs <role> '<json config>'``; each role
prints one JSON line of results on stdout and exits 0 (the tests assert it).

* ``racer``: waits for a shared start instant, then races ``epoch_complete``
  on the same epochs as the other racers.
* ``leader``: a leader at one assignment version: raises the fence to it,
  then writes every vnode of epoch after epoch and seals each, logging each
  acknowledged step (fsync) to its ledger, until its deadline. A deposed
  leader keeps trying (that is the point).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from jobs.soak import Ledger


def _backend(cfg: dict[str, Any], instance_id: str) -> Any:
    from statelake import DeltaStateBackend

    return DeltaStateBackend(
        cfg["uri"],
        instance_id=instance_id,
        vnode_capacity=int(cfg["vnodes"]),
        storage_options=cfg.get("storage_options") or {},
    )


def racer(cfg: dict[str, Any]) -> dict[str, Any]:
    from statelake import SplitBrainCommit, StateBackendError

    me = cfg["id"]
    b = _backend(cfg, me)
    vnodes = list(range(int(cfg["vnodes"])))
    results: dict[str, str] = {}
    delay = float(cfg["start_at"]) - time.time()
    if delay > 0:
        time.sleep(delay)
    for epoch in cfg["epochs"]:
        try:
            results[str(epoch)] = "won" if b.epoch_complete(epoch, vnodes) else "incomplete"
        except SplitBrainCommit as exc:
            results[str(epoch)] = f"lost:{exc.committer}"
        except StateBackendError as exc:
            results[str(epoch)] = f"error:{type(exc).__name__}:{exc}"
    b.close()
    return {"id": me, "results": results}


def leader(cfg: dict[str, Any]) -> dict[str, Any]:
    from statelake import SplitBrainCommit, StaleVersion, StateBackendError

    me, version = cfg["id"], int(cfg["version"])
    rng = random.Random(f"{cfg['seed']}:{me}")
    ledger = Ledger(Path(cfg["ledger"]))
    b = _backend(cfg, me)
    # Widen the window between "all partials are there" and the MERGE, at random.
    b._before_marker_commit = lambda epoch: time.sleep(rng.uniform(0, 0.02))
    b.set_authoritative_version(version)
    ledger.log(ev="fenced", id=me, version=version, t=time.time())
    epoch = int(cfg.get("first_epoch") or 0)
    if not epoch:
        sealed = b.latest_sealed_epoch()
        epoch = (sealed or 0) + 1
    ledger.log(ev="owns_from", id=me, epoch=epoch, t=time.time())
    vnodes = list(range(int(cfg["vnodes"])))
    deadline = time.time() + float(cfg["seconds"])
    counts = {"written": 0, "sealed": 0, "stale": 0, "split": 0, "incomplete": 0, "errors": 0}
    deposed_at: int | None = None
    while time.time() < deadline:
        if deposed_at is not None:
            # Deposed (it was told so): keep trying epochs where the new leader works,
            # as a leader with a stale view of the world would.
            epoch = deposed_at + rng.randrange(-2, 60)
            time.sleep(0.005)
        try:
            for v in vnodes:
                b.write_partial(v, epoch, version, f"{me}:{v}:{epoch}".encode())
                ledger.log(ev="write", id=me, vnode=v, epoch=epoch, t=time.time())
                counts["written"] += 1
            started = time.time()
            if b.epoch_complete(epoch, vnodes):
                ledger.log(ev="sealed", id=me, epoch=epoch, started=started, t=time.time())
                counts["sealed"] += 1
            else:
                counts["incomplete"] += 1
        except StaleVersion:
            counts["stale"] += 1
            if deposed_at is None:
                deposed_at = epoch
        except SplitBrainCommit:
            counts["split"] += 1
        except StateBackendError as exc:
            counts["errors"] += 1
            ledger.log(ev="error", id=me, epoch=epoch, error=f"{type(exc).__name__}: {exc}")
        epoch += 1
        if cfg.get("pace"):
            time.sleep(float(cfg["pace"]))
    b.close()
    return {"id": me, "counts": counts, "last_epoch": epoch - 1}


ROLES = {"racer": racer, "leader": leader}

if __name__ == "__main__":
    out = ROLES[sys.argv[1]](json.loads(sys.argv[2]))
    print(json.dumps(out), flush=True)


# -- helpers for the tests ------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def start(role: str, cfg: dict[str, Any]) -> Any:
    """Start a role in a fresh interpreter (spawn semantics: delta-rs panics when forked)."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability._procs", role, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(ROOT),
        env=env,
        text=True,
    )


def finish(proc: Any, timeout: float = 300) -> dict[str, Any]:
    """Wait for a role; assert it exited 0 and return its JSON result."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker exited {proc.returncode}: {err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]
