"""Crash and soak runs for statelake, at full length (the tests run scaled-down versions).

``python -m jobs.soak crash``: several worker processes (fresh interpreters,
never forked: delta-rs panics in forked children) write partials and seal
epochs on one store while this driver SIGKILLs random ones at random
instants and restarts them. Workers also kill themselves, with a seeded
probability, at the instants a driver cannot hit reliably: after the data
files are written and before the Delta commit, during the commit, right
after it, before/during/after the control-table MERGE. Every acknowledged
write and every seal is appended (fsync) to the worker's own ledger file;
afterwards the driver checks the store against the ledgers:

* every acknowledged write reads back with exactly the acknowledged bytes;
* every epoch a worker reported sealed has exactly one commit marker, naming
  that worker, and every vnode it lists reads back with the expected bytes;
* no epoch is reported sealed by two instances, none holds two markers;
* a worker told ``SplitBrainCommit`` was told the committer the store names;
* the store opens fresh and passes the library audit (``statelake.audit``
  when present; a direct full read with checksum verification otherwise).

``python -m jobs.soak soak``: many threads write (and seal, and prune) for a
while on one backend; RSS and open file descriptors are sampled and printed,
and the growth trend over the second half of the run is reported.

Both runs are seeded; a failure prints the seed to replay it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# -- deterministic payloads ------------------------------------------------------------


def payload(seed: int, vnode: int, epoch: int, *, max_size: int = 4096) -> bytes:
    """The bytes every writer of (vnode, epoch) writes, derived from the seed.

    Deterministic so that a restarted worker replays identical bytes
    (idempotence) and the checker can recompute what was acknowledged.
    """
    h = hashlib.sha256(f"{seed}:{vnode}:{epoch}".encode()).digest()
    size = 1 + int.from_bytes(h[:4], "big") % max_size
    out = bytearray()
    block = h
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


# -- ledgers: append-only, fsynced, one file per worker incarnation ----------------------


class Ledger:
    """Append-only JSON lines, each fsynced before the next step (what was acknowledged)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(self, **event: Any) -> None:
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)


def read_ledgers(folder: Path) -> list[dict[str, Any]]:
    """Every complete event of every ledger (a line torn by SIGKILL is ignored)."""
    events = []
    for path in sorted(folder.glob("*.log")):
        for raw in path.read_bytes().split(b"\n"):
            if not raw.strip():
                continue
            try:
                events.append(json.loads(raw))
            except ValueError:
                continue  # the last line of a killed incarnation may be torn
    return events


# -- the crash worker ---------------------------------------------------------------------

KILL_POINTS = (
    "after-data-files",  # partial files written, Delta commit not started
    "during-commit",  # a timer fires while delta-rs commits the partials
    "after-commit",  # the commit landed, the caller not yet acknowledged
    "before-merge",  # seal decided, control MERGE not started
    "during-merge",  # a timer fires while the control MERGE runs
    "after-merge",  # MERGE returned, the marker not yet re-read
)


def _install_kill_points(backend: Any, rng: random.Random, prob: float, ledger: Ledger) -> None:
    """Wrap private steps of this process's backend with seeded SIGKILL points.

    Test instrumentation only: nothing in the engine changes; a step that a
    refactor renamed simply loses its kill point (reported in the ledger).
    """
    lock = threading.Lock()

    def roll(point: str) -> bool:
        with lock:
            return rng.random() < prob

    def die(point: str) -> None:
        ledger.log(ev="selfkill", point=point)
        os.kill(os.getpid(), signal.SIGKILL)

    def timer_kill(point: str) -> threading.Timer | None:
        if not roll(point):
            return None
        with lock:
            delay = rng.uniform(0.0, 0.03)
        t = threading.Timer(delay, die, args=(point,))
        t.daemon = True
        t.start()
        return t

    def wrap(name: str, before: str, during: str, after: str) -> None:
        original = getattr(backend, name, None)
        if original is None:
            ledger.log(ev="no-kill-point", method=name)
            return

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if before and roll(before):
                die(before)
            timer = timer_kill(during)
            try:
                result = original(*args, **kwargs)
            finally:
                if timer is not None:
                    timer.cancel()
            if roll(after):
                die(after)
            return result

        setattr(backend, name, wrapped)

    wrap("_commit_files", "after-data-files", "during-commit", "after-commit")
    wrap("_control_merge", "", "during-merge", "after-merge")
    if hasattr(backend, "_before_marker_commit"):
        backend._before_marker_commit = lambda epoch: die("before-merge") if roll("") else None
    else:
        ledger.log(ev="no-kill-point", method="_before_marker_commit")


def _acked_epochs(events: list[dict[str, Any]], mine: list[int]) -> int:
    """Highest epoch whose writes to all of ``mine`` were acknowledged (0 if none)."""
    acked: dict[int, set[int]] = {}
    for ev in events:
        if ev.get("ev") == "write":
            acked.setdefault(ev["epoch"], set()).add(ev["vnode"])
    done = [e for e, vs in acked.items() if set(mine) <= vs]
    return max(done, default=0)


def crash_worker(cfg: Mapping[str, Any]) -> int:
    """One worker incarnation: write my vnodes epoch by epoch, try to seal, log every ack."""
    from statelake import DeltaStateBackend, SplitBrainCommit, StateBackendError

    k, gen, seed = int(cfg["worker"]), int(cfg["gen"]), int(cfg["seed"])
    vnodes, workers, epochs = int(cfg["vnodes"]), int(cfg["workers"]), int(cfg["epochs"])
    ledger_dir = Path(cfg["ledger_dir"])
    mine = [v for v in range(vnodes) if v % workers == k]
    previous = []
    for path in ledger_dir.glob(f"w{k}-g*.log"):
        previous += read_ledgers_file(path)
    ledger = Ledger(ledger_dir / f"w{k}-g{gen}.log")
    me = f"w{k}-g{gen}"
    ledger.log(ev="start", id=me, pid=os.getpid())
    backend = DeltaStateBackend(
        cfg["uri"],
        instance_id=me,
        vnode_capacity=vnodes,
        storage_options=cfg.get("storage_options") or {},
        layout=cfg.get("layout") or "card",
    )
    rng = random.Random(f"{seed}:{k}:{gen}")
    _install_kill_points(backend, rng, float(cfg["kill_prob"]), ledger)
    everyone = list(range(vnodes))
    settled: set[int] = set()  # epochs this incarnation knows are sealed (by anyone)
    start = max(1, _acked_epochs(previous, mine))  # replay the last acknowledged epoch

    def write(epoch: int, vnode: int) -> None:
        data = payload(seed, vnode, epoch)
        backend.write_partial(vnode, epoch, 1, data)
        ledger.log(ev="write", id=me, vnode=vnode, epoch=epoch, size=len(data))

    with ThreadPoolExecutor(max_workers=max(1, len(mine))) as pool:
        for epoch in range(start, epochs + 1):
            for f in [pool.submit(write, epoch, v) for v in mine]:
                f.result()
            for ep in range(max(1, epoch - 2), epoch + 1):
                if ep in settled:
                    continue
                try:
                    if backend.epoch_complete(ep, everyone):
                        ledger.log(ev="sealed", id=me, epoch=ep)
                        settled.add(ep)
                except SplitBrainCommit as exc:
                    ledger.log(ev="lost", id=me, epoch=ep, winner=exc.committer)
                    settled.add(ep)
                except StateBackendError as exc:  # counted; the checker judges the store
                    ledger.log(ev="error", id=me, epoch=ep, error=f"{type(exc).__name__}: {exc}")
    ledger.log(ev="done", id=me)
    backend.close()
    return 0


def read_ledgers_file(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


# -- the crash driver ---------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class CrashReport:
    seed: int
    epochs: int
    elapsed_s: float = 0.0
    incarnations: int = 0
    driver_kills: int = 0
    self_kills: dict[str, int] = field(default_factory=dict)
    acked_writes: int = 0
    sealed_epochs: int = 0
    lost_races: int = 0
    errors: list[str] = field(default_factory=list)
    finished_workers: int = 0
    audit: str = ""


def _spawn(cfg: dict[str, Any], log_dir: Path) -> subprocess.Popen[bytes]:
    err = open(log_dir / f"w{cfg['worker']}-g{cfg['gen']}.stderr", "wb")  # noqa: SIM115
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.soak", "worker", json.dumps(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=str(ROOT),
            env=env,
        )
    finally:
        err.close()


def run_crash(
    uri: str,
    *,
    work_dir: Path,
    storage_options: Mapping[str, str] | None = None,
    workers: int = 3,
    vnodes: int = 6,
    epochs: int = 300,
    seed: int = 0,
    kill_every_s: float = 3.0,
    kill_prob: float = 0.01,
    time_limit_s: float = 1800.0,
    layout: str = "card",
    echo: Callable[[str], None] = lambda s: None,
) -> CrashReport:
    """Run workers under random SIGKILLs, then check the store against their ledgers.

    Raises AssertionError naming the seed if any promise is broken.
    """
    ledger_dir = work_dir / "ledgers"
    log_dir = work_dir / "logs"
    ledger_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    report = CrashReport(seed=seed, epochs=epochs)
    base = {
        "uri": uri,
        "storage_options": dict(storage_options or {}),
        "vnodes": vnodes,
        "workers": workers,
        "epochs": epochs,
        "seed": seed,
        "ledger_dir": str(ledger_dir),
        "kill_prob": kill_prob,
        "layout": layout,
    }
    # Create the store once, so workers racing to create it is not the first thing tested.
    from statelake import DeltaStateBackend

    DeltaStateBackend(
        uri,
        instance_id="driver",
        vnode_capacity=vnodes,
        storage_options=storage_options,
        layout=layout,
    ).close()
    gens = dict.fromkeys(range(workers), 0)
    procs = {k: _spawn({**base, "worker": k, "gen": 0}, log_dir) for k in range(workers)}
    report.incarnations = workers
    failures: list[str] = []
    killed: set[int] = set()  # pids this driver killed
    t0 = time.monotonic()
    next_kill = t0 + rng.expovariate(1.0 / kill_every_s)
    while procs:
        now = time.monotonic()
        for k, p in list(procs.items()):
            rc = p.poll()
            if rc is None:
                continue
            del procs[k]
            if rc == 0:
                report.finished_workers += 1
                continue
            if rc != -signal.SIGKILL:
                err = (log_dir / f"w{k}-g{gens[k]}.stderr").read_text(errors="replace")
                failures.append(f"worker w{k}-g{gens[k]} exited {rc}: {err[-2000:]}")
                continue
            if now - t0 > time_limit_s:
                continue  # out of time: do not restart
            gens[k] += 1
            procs[k] = _spawn({**base, "worker": k, "gen": gens[k]}, log_dir)
            report.incarnations += 1
        if now - t0 > time_limit_s:
            for k, p in list(procs.items()):
                p.kill()  # bounded: stop where we are and check what was acknowledged
                p.wait()
                killed.add(p.pid)
                del procs[k]
                echo(f"time limit: stopped w{k}")
            break
        if now >= next_kill and procs:
            k = rng.choice(sorted(procs))
            procs[k].send_signal(signal.SIGKILL)
            killed.add(procs[k].pid)
            report.driver_kills += 1
            next_kill = now + rng.expovariate(1.0 / kill_every_s)
        time.sleep(0.01)
    report.elapsed_s = round(time.monotonic() - t0, 1)
    if failures:
        raise AssertionError(f"seed={seed}: " + "\n".join(failures))
    events = read_ledgers(ledger_dir)
    for ev in events:
        if ev.get("ev") == "selfkill":
            report.self_kills[ev["point"]] = report.self_kills.get(ev["point"], 0) + 1
        elif ev.get("ev") == "error":
            report.errors.append(ev["error"])
    verify_store(uri, storage_options, events, vnodes=vnodes, seed=seed, report=report)
    echo(json.dumps(asdict(report)))
    return report


def verify_store(
    uri: str,
    storage_options: Mapping[str, str] | None,
    events: list[dict[str, Any]],
    *,
    vnodes: int,
    seed: int,
    report: CrashReport,
) -> None:
    """Check the store against the ledgers; AssertionError (with the seed) on any breach."""
    from statelake import DeltaStateBackend

    def fail(msg: str) -> None:
        raise AssertionError(f"seed={seed}: {msg}")

    acked = {(ev["vnode"], ev["epoch"]) for ev in events if ev.get("ev") == "write"}
    sealed_by: dict[int, set[str]] = {}
    for ev in events:
        if ev.get("ev") == "sealed":
            sealed_by.setdefault(ev["epoch"], set()).add(ev["id"])
    lost = [ev for ev in events if ev.get("ev") == "lost"]
    report.acked_writes = len(acked)
    report.sealed_epochs = len(sealed_by)
    report.lost_races = len(lost)
    for epoch, ids in sealed_by.items():
        if len(ids) != 1:
            fail(f"epoch {epoch} reported sealed by {sorted(ids)}")
    # A fresh instance: the store must open after any crash.
    b = DeltaStateBackend(
        uri,
        instance_id="checker",
        vnode_capacity=None,
        storage_options=storage_options,
        create=False,
    )
    try:
        for vnode, epoch in sorted(acked):
            got = b.read_partial(vnode, epoch)
            if got != payload(seed, vnode, epoch):
                fail(
                    f"acknowledged write lost or changed: vnode {vnode} epoch {epoch} -> "
                    f"{None if got is None else len(got)} bytes"
                )
        markers = b.commit_markers()
        for epoch, ms in markers.items():
            if len(ms) != 1:
                fail(f"epoch {epoch} holds {len(ms)} commit markers: {[m.committer for m in ms]}")
            listed = ms[0].vnodes if ms[0].vnodes is not None else tuple(range(vnodes))
            for vnode in listed:
                if b.read_partial(vnode, epoch) != payload(seed, vnode, epoch):
                    fail(f"epoch {epoch} is sealed but vnode {vnode} lacks its partial")
        for epoch, ids in sealed_by.items():
            if epoch not in markers:
                fail(f"epoch {epoch} was reported sealed by {ids} but has no commit marker")
            if markers[epoch][0].committer not in ids:
                fail(
                    f"epoch {epoch} reported sealed by {ids}, marker names "
                    f"{markers[epoch][0].committer}"
                )
        for ev in lost:
            m = markers.get(ev["epoch"])
            if m is None or m[0].committer != ev["winner"]:
                fail(
                    f"{ev['id']} was told epoch {ev['epoch']} was sealed by {ev['winner']}, "
                    f"the store says {None if m is None else m[0].committer}"
                )
        report.audit = run_audit(b, uri, storage_options, fail)
    finally:
        b.close()


def run_audit(
    b: Any, uri: str, storage_options: Mapping[str, str] | None, fail: Callable[[str], None]
) -> str:
    """The library audit (``statelake.audit``), or a full verified read where it is absent."""
    try:
        from statelake.audit import audit
    except ImportError:  # an older statelake: read every payload, verifying its crc32
        rows = sum(len(b.read_epoch(e)) for e in sorted(set(b._index.epochs())))
        return f"direct: {rows} partials read and verified"
    result = audit(uri, storage_options=dict(storage_options or {}))
    if not result.ok:
        fail(f"statelake.audit found errors: {[a.to_dict() for a in result.errors]}")
    return (
        f"statelake.audit ok: {result.sealed_epochs} sealed epochs, "
        f"{result.payloads_checked} payloads checked, warnings {len(result.warnings)}"
    )


# -- the soak -------------------------------------------------------------------------------


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass(slots=True, kw_only=True)
class SoakReport:
    seed: int
    threads: int
    duration_s: float
    writes: int = 0
    seals: int = 0
    prunes: int = 0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, rss MiB, fds)
    rss_growth_mib: float = 0.0
    fd_growth: int = 0


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    den = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else 0.0


def run_soak(
    uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    threads: int = 16,
    duration_s: float = 600.0,
    vnodes: int = 64,
    seed: int = 0,
    sample_every_s: float = 1.0,
    keep_epochs: int = 8,
    echo: Callable[[str], None] = print,
) -> SoakReport:
    """Many threads write for ``duration_s``; memory and open files are sampled.

    Each thread owns a slice of the vnodes and writes them epoch after epoch;
    one coordinator thread seals epochs and prunes all but the last
    ``keep_epochs``, so the store reaches a steady state and any growth is
    the process's, not the data's. The growth figures are linear trends over
    the second half of the run (warm-up excluded), extrapolated over that half.
    """
    from statelake import DeltaStateBackend

    b = DeltaStateBackend(
        uri, instance_id="soak", vnode_capacity=vnodes, storage_options=storage_options
    )
    report = SoakReport(seed=seed, threads=threads, duration_s=duration_s)
    stop = threading.Event()
    progress = [0] * threads
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(t: int) -> None:
        rng = random.Random(f"{seed}:{t}")
        mine = [v for v in range(vnodes) if v % threads == t]
        epoch = 1
        try:
            while not stop.is_set():
                for v in mine:
                    size = rng.choice((64, 4096, 65536))
                    b.write_partial(v, epoch, 1, payload(seed, v, epoch, max_size=size))
                    with lock:
                        report.writes += 1
                progress[t] = epoch
                epoch += 1
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)
            stop.set()

    def coordinator() -> None:
        sealed = 0
        try:
            while not stop.is_set():
                ready = min(progress)
                if ready > sealed:
                    for ep in range(sealed + 1, ready + 1):
                        if b.epoch_complete(ep, range(vnodes)):  # type: ignore[arg-type]
                            report.seals += 1
                    sealed = ready
                    if sealed > keep_epochs:
                        b.prune_before(sealed - keep_epochs)
                        report.prunes += 1
                time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    pool = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(threads)]
    pool.append(threading.Thread(target=coordinator, daemon=True))
    t0 = time.monotonic()
    for th in pool:
        th.start()
    while time.monotonic() - t0 < duration_s and not stop.is_set():
        time.sleep(sample_every_s)
        sample = (round(time.monotonic() - t0, 1), round(_rss_kib() / 1024, 1), _open_fds())
        report.samples.append(sample)
        echo(
            f"t={sample[0]:7.1f}s rss={sample[1]:8.1f} MiB fds={sample[2]:4d} "
            f"writes={report.writes} seals={report.seals}"
        )
    stop.set()
    for th in pool:
        th.join(timeout=120)
    b.close()
    if errors:
        raise AssertionError(f"seed={seed}: soak thread failed: {errors[0]!r}") from errors[0]
    tail = report.samples[len(report.samples) // 2 :]
    if len(tail) >= 2:
        span = tail[-1][0] - tail[0][0]
        report.rss_growth_mib = round(_slope([(s[0], s[1]) for s in tail]) * span, 1)
        report.fd_growth = round(_slope([(s[0], float(s[2])) for s in tail]) * span)
    echo(
        f"soak: {report.writes} writes, {report.seals} seals, {report.prunes} prunes in "
        f"{duration_s:.0f}s; RSS trend over the second half {report.rss_growth_mib:+.1f} MiB, "
        f"open files trend {report.fd_growth:+d}"
    )
    return report


# -- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.soak", description="statelake crash and soak runs (full length)"
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("crash", help="SIGKILL workers at random instants, then check the store")
    c.add_argument("--uri", help="store root (default: a fresh temporary folder)")
    c.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--workers", type=int, default=4)
    c.add_argument("--vnodes", type=int, default=8)
    c.add_argument("--epochs", type=int, default=500)
    c.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    c.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between kills")
    c.add_argument("--kill-prob", type=float, default=0.01, help="per kill point and pass")
    c.add_argument("--time-limit", type=float, default=3600.0, help="seconds")
    c.add_argument("--layout", choices=("card", "packed"), default="card")
    s = sub.add_parser("soak", help="many threads writing; print RSS and open files over time")
    s.add_argument("--uri")
    s.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--threads", type=int, default=16)
    s.add_argument("--minutes", type=float, default=10.0)
    s.add_argument("--vnodes", type=int, default=64)
    s.add_argument("--seed", type=int, default=None)
    w = sub.add_parser("worker", help=argparse.SUPPRESS)
    w.add_argument("config")
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        return crash_worker(json.loads(args.config))
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    options = dict(kv.split("=", 1) for kv in args.storage_option)
    work = Path(tempfile.mkdtemp(prefix=f"statelake-{args.cmd}-"))
    uri = args.uri or str(work / "store")
    print(f"{args.cmd}: seed={seed} store={uri} work={work}", flush=True)
    try:
        if args.cmd == "crash":
            report = run_crash(
                uri,
                work_dir=work,
                storage_options=options,
                workers=args.workers,
                vnodes=args.vnodes,
                epochs=args.epochs,
                seed=seed,
                kill_every_s=args.kill_every,
                kill_prob=args.kill_prob,
                time_limit_s=args.time_limit,
                layout=args.layout,
                echo=lambda m: print(m, flush=True),
            )
            print(json.dumps(asdict(report), indent=2))
        else:
            run_soak(
                uri,
                storage_options=options,
                threads=args.threads,
                duration_s=args.minutes * 60,
                vnodes=args.vnodes,
                seed=seed,
                echo=lambda m: print(m, flush=True),
            )
    except AssertionError as exc:
        print(f"FAILED (replay with --seed {seed}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
