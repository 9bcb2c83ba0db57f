"""Property test: random operation sequences on the Delta engine match the in-memory model."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from statelake import DeltaStateBackend, InMemoryBackend, StateBackendError

VNODES = 4
payloads = st.binary(min_size=0, max_size=24)
epochs = st.integers(min_value=0, max_value=5)
versions = st.integers(min_value=0, max_value=3)
vnodes = st.integers(min_value=0, max_value=VNODES - 1)


def _outcome(call, *args):  # type: ignore[no-untyped-def]
    """What a call did: ('ok', result) or ('err', ErrorClass) — compared across engines."""
    try:
        return ("ok", call(*args))
    except StateBackendError as exc:
        return ("err", type(exc).__name__)


class DeltaMatchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="statelake-model-")
        self.model = InMemoryBackend(vnode_capacity=VNODES, instance_id="a", fencing=True)
        self.delta = DeltaStateBackend(self.dir, instance_id="a", vnode_capacity=VNODES)
        self.rival_model = self.model.view_as("b")
        self.rival: DeltaStateBackend | None = None

    def _rival(self) -> DeltaStateBackend:
        if self.rival is None:
            self.rival = DeltaStateBackend(self.dir, instance_id="b", vnode_capacity=VNODES)
        return self.rival

    @rule(vnode=vnodes, epoch=epochs, version=versions, data=payloads)
    def write(self, vnode: int, epoch: int, version: int, data: bytes) -> None:
        assert _outcome(self.delta.write_partial, vnode, epoch, version, data) == _outcome(
            self.model.write_partial, vnode, epoch, version, data
        )

    @rule(epoch=epochs, version=versions, data=st.dictionaries(vnodes, payloads, max_size=VNODES))
    def write_batch(self, epoch: int, version: int, data: dict[int, bytes]) -> None:
        assert _outcome(self.delta.write_partials, epoch, version, data) == _outcome(
            self.model.write_partials, epoch, version, data
        )

    @rule(vnode=vnodes, epoch=epochs)
    def read(self, vnode: int, epoch: int) -> None:
        assert _outcome(self.delta.read_partial, vnode, epoch) == _outcome(
            self.model.read_partial, vnode, epoch
        )

    @rule(epoch=epochs, listed=st.lists(vnodes, max_size=VNODES, unique=True), rival=st.booleans())
    def seal(self, epoch: int, listed: list[int], rival: bool) -> None:
        if rival:
            got = _outcome(self._rival().epoch_complete, epoch, listed)
            want = _outcome(self.rival_model.epoch_complete, epoch, listed)
        else:
            got = _outcome(self.delta.epoch_complete, epoch, listed)
            want = _outcome(self.model.epoch_complete, epoch, listed)
        assert got == want

    @rule(before=st.integers(min_value=0, max_value=6))
    def prune(self, before: int) -> None:
        self.delta.prune_before(before)
        self.model.prune_before(before)

    @rule(version=versions)
    def raise_fence(self, version: int) -> None:
        self.delta.set_authoritative_version(version)
        self.model.set_authoritative_version(version)

    @invariant()
    def same_sealed_epochs_and_fence(self) -> None:
        assert self.delta.committed_epochs() == self.model.committed_epochs()
        assert self.delta.authoritative_version() == self.model.authoritative_version()

    def teardown(self) -> None:
        self.delta.close()
        if self.rival is not None:
            self.rival.close()
        shutil.rmtree(self.dir, ignore_errors=True)


DeltaMatchesModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_delta_engine_matches_in_memory_model = DeltaMatchesModel.TestCase
