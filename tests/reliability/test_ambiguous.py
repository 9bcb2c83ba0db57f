"""Ambiguous commits: storage faults at the commit step are resolved by re-reading, never guessed.

A fault-injecting HTTP proxy (``_faultproxy``) sits between statelake and the
loopback S3 server. On cue it forwards the PUT of a ``_delta_log/NNN.json``
commit and then answers 500, drops the connection or stalls past the client
timeout (the commit landed, the client cannot know), or fails it without
forwarding (nothing landed). statelake must then find out which by reading.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from statelake import AmbiguousCommit, DeltaStateBackend, SplitBrainCommit, StorageError
from tests.reliability._faultproxy import FaultProxy
from tests.reliability._procs import finish, start
from tests.s3server import storage_options

pytestmark = [pytest.mark.s3, pytest.mark.slow]

PARTIALS_COMMIT = r"/partials/_delta_log/\d{20}\.json$"
CONTROL_COMMIT = r"/control/_delta_log/\d{20}\.json$"
MODES = ["error_after", "drop_after", "stall_after", "error_before"]
# Few, fast client retries so a fault reaches statelake instead of being absorbed.
FAST_FAIL = {"max_retries": "2", "retry_timeout": "5s", "timeout": "3s"}


@pytest.fixture
def faulty(
    s3_store: tuple[str, dict[str, str]],
) -> Iterator[tuple[str, dict[str, str], FaultProxy, dict[str, str]]]:
    """(uri, options through the proxy, the proxy, direct options)."""
    uri, direct = s3_store
    proxy = FaultProxy(direct["AWS_ENDPOINT_URL"])
    yield uri, {**storage_options(proxy.endpoint), **FAST_FAIL}, proxy, direct
    assert proxy.close() == 0


def _direct(uri: str, direct: dict[str, str], name: str = "checker") -> DeltaStateBackend:
    return DeltaStateBackend(
        uri, instance_id=name, vnode_capacity=None, storage_options=direct, create=False
    )


@pytest.mark.parametrize("mode", MODES)
def test_write_partial_fault_at_commit_is_resolved_by_rereading(
    faulty: tuple[str, dict[str, str], FaultProxy, dict[str, str]], mode: str
) -> None:
    """A faulted partials commit: write_partial returns only once the data is durable."""
    uri, options, proxy, direct = faulty
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=4, storage_options=options)
    proxy.arm(pattern=PARTIALS_COMMIT, mode=mode, count=3, stall=4)
    b.write_partial(1, 7, 1, b"durable")
    faults = proxy.log()
    assert faults and faults[0]["mode"] == mode, faults
    if mode != "error_before":
        assert faults[0]["upstream_status"] == 200  # the commit did land
    c = _direct(uri, direct)
    assert c.read_partial(1, 7) == b"durable"
    b.write_partial(1, 7, 1, b"durable")  # a replay changes nothing
    assert c.read_partial(1, 7) == b"durable"
    c.close()
    b.close()


def test_write_partial_that_cannot_tell_raises_ambiguous_and_the_next_call_resolves(
    faulty: tuple[str, dict[str, str], FaultProxy, dict[str, str]],
) -> None:
    """Commit landed, answer lost, and the log unreadable for a while: raise, never guess."""
    uri, options, proxy, direct = faulty
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=4, storage_options=options)
    proxy.arm(pattern=PARTIALS_COMMIT, mode="error_after", count=3)
    proxy.arm(pattern=r"_delta_log", mode="error_before", count=10_000, method="GET")
    with pytest.raises(StorageError) as info:
        b.write_partial(2, 3, 1, b"maybe")
    assert info.value.uri is not None and "partials" in info.value.uri
    print(f"raised {type(info.value).__name__}: {info.value}")
    proxy.clear()
    b.write_partial(2, 3, 1, b"maybe")  # the next call resolves (it landed: a replay)
    assert b.read_partial(2, 3) == b"maybe"
    c = _direct(uri, direct)
    assert c.read_partial(2, 3) == b"maybe"
    c.close()
    b.close()
    assert isinstance(info.value, (AmbiguousCommit, StorageError))


@pytest.mark.parametrize("mode", MODES)
def test_epoch_complete_fault_at_merge_returns_the_truth(
    faulty: tuple[str, dict[str, str], FaultProxy, dict[str, str]], mode: str
) -> None:
    """A faulted control MERGE: epoch_complete re-reads and answers True exactly once."""
    uri, options, proxy, direct = faulty
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=4, storage_options=options)
    b.write_partials(4, 1, {v: b"p" for v in range(4)})
    proxy.arm(pattern=CONTROL_COMMIT, mode=mode, count=3, stall=4)
    assert b.epoch_complete(4, [0, 1, 2, 3]) is True
    assert proxy.log(), "the fault never fired"
    c = _direct(uri, direct, "rival")
    with pytest.raises(SplitBrainCommit) as info:
        c.epoch_complete(4, [0, 1, 2, 3])
    assert info.value.committer == "a"
    assert [m.committer for m in c.commit_markers()[4]] == ["a"]
    c.close()
    assert b.epoch_complete(4, [0, 1, 2, 3]) is True  # asking again: still the truth
    b.close()


def test_epoch_complete_whose_merge_failed_reports_the_rival_that_sealed_meanwhile(
    faulty: tuple[str, dict[str, str], FaultProxy, dict[str, str]],
) -> None:
    """Our MERGE keeps failing while a rival process seals: we must raise, not return True."""
    uri, options, proxy, direct = faulty
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=4, storage_options=options)
    b.write_partials(9, 1, {v: b"p" for v in range(4)})
    proxy.arm(pattern=CONTROL_COMMIT, mode="error_before", count=10_000)
    outcome: list[object] = []

    def seal() -> None:
        try:
            outcome.append(b.epoch_complete(9, [0, 1, 2, 3]))
        except Exception as exc:
            outcome.append(exc)

    t = threading.Thread(target=seal)
    t.start()
    deadline = time.monotonic() + 60
    while not proxy.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    rival = start(
        "racer",
        {
            "uri": uri,
            "storage_options": direct,
            "vnodes": 4,
            "epochs": [9],
            "id": "rival",
            "start_at": 0,
        },
    )
    assert finish(rival)["results"]["9"] == "won"
    proxy.clear()
    t.join(timeout=120)
    assert len(outcome) == 1
    assert isinstance(outcome[0], SplitBrainCommit), outcome
    assert outcome[0].committer == "rival"
    b.close()


@pytest.mark.parametrize("mode", ["error_after", "drop_after"])
def test_fence_raise_fault_is_resolved_by_rereading(
    faulty: tuple[str, dict[str, str], FaultProxy, dict[str, str]], mode: str
) -> None:
    """A faulted fence MERGE: set_authoritative_version returns with the fence durable."""
    uri, options, proxy, direct = faulty
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=4, storage_options=options)
    proxy.arm(pattern=CONTROL_COMMIT, mode=mode, count=3)
    b.set_authoritative_version(5)
    assert proxy.log()
    c = _direct(uri, direct)
    assert c.authoritative_version() == 5
    c.close()
    b.close()
