"""Worker process for the multi-process seal race: prints one JSON line of outcomes."""

from __future__ import annotations

import json
import sys
import time

from statelake import DeltaStateBackend, SplitBrainCommit


def main() -> None:
    uri, instance_id, epochs, start_at = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        float(sys.argv[4]),
    )
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    backend = DeltaStateBackend(
        uri, instance_id=instance_id, vnode_capacity=None, storage_options=options
    )
    time.sleep(max(0.0, start_at - time.time()))
    outcomes: dict[int, str] = {}
    for epoch in range(epochs):
        try:
            outcomes[epoch] = "won" if backend.epoch_complete(epoch, [0, 1]) else "incomplete"
        except SplitBrainCommit as exc:
            outcomes[epoch] = f"lost:{exc.committer}"
    backend.close()
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
