"""An S3-compatible server on loopback for the tests (moto, from PyPI; no Docker).

``fresh_s3_store()`` starts the server once per test session, lazily, in a
separate interpreter (``python -m tests.s3server serve``) on a free loopback
port, creates one bucket, and returns ``(uri, storage_options)`` for a fresh
prefix. Worker processes spawned by the tests reach the same server through
the endpoint in the storage options.

Two facts about the server shape the options:

* deltalake 1.x commits to S3 with conditional puts (``If-None-Match: *`` on
  ``_delta_log/NNN.json``); the S3DynamoDbLogStore locking provider was
  removed in 1.0. We set ``aws_conditional_put=etag`` explicitly anyway, so a
  change of library default cannot silently turn concurrent commits into
  last-writer-wins, and we never set ``AWS_S3_ALLOW_UNSAFE_RENAME``.
* moto honours ``If-None-Match: *`` but checks it and stores the object in
  two steps, without a lock: two racing PUTs of the same key can both
  "win". Real S3 (and MinIO, R2, GCS, Azure) make that check atomic. The
  server here therefore serializes mutating requests (PUT/POST/DELETE) with
  one lock, which makes the precondition atomic as on the real services; GETs
  still run concurrently.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

BUCKET = "statelake-tests"
REGION = "us-east-1"

_lock = threading.Lock()
_server: subprocess.Popen[bytes] | None = None
_endpoint: str | None = None
_failure: str | None = None


class S3ServerUnavailable(RuntimeError):
    """The loopback S3 server could not be started (the tests that need it skip)."""


def storage_options(endpoint: str) -> dict[str, str]:
    """Storage options for delta-rs and pyarrow.fs against the loopback server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "statelake-test",
        "AWS_SECRET_ACCESS_KEY": "statelake-test-secret",
        "AWS_REGION": REGION,
        # Safe concurrent commits: the log's NNN.json is created with If-None-Match: *.
        "aws_conditional_put": "etag",
        # Path-style URLs (bucket in the path): loopback has no per-bucket host names.
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }


def endpoint() -> str:
    """The server's endpoint URL, starting it on first use."""
    global _server, _endpoint, _failure
    with _lock:
        if _endpoint is not None:
            return _endpoint
        if _failure is not None:
            raise S3ServerUnavailable(_failure)
        try:
            _server, _endpoint = _start()
        except Exception as exc:  # the tests that need S3 skip with this reason
            _failure = f"could not start the moto S3 server on loopback: {exc}"
            raise S3ServerUnavailable(_failure) from exc
        atexit.register(_stop)
        _create_bucket(_endpoint)
        return _endpoint


def fresh_s3_store() -> tuple[str, dict[str, str]]:
    """(uri, storage_options) of a new empty prefix on the loopback S3 server.

    Skips the calling test (pytest.skip) with the reason if the server cannot start.
    """
    try:
        ep = endpoint()
    except S3ServerUnavailable as exc:
        import pytest

        pytest.skip(str(exc))
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:16]}", storage_options(ep)


def _start() -> tuple[subprocess.Popen[bytes], str]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.s3server", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=root,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(b"PORT ") or not line:
            break
    if not line.startswith(b"PORT "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server exited with {proc.returncode} before reporting its port")
    port = int(line.split()[1])
    ep = f"http://127.0.0.1:{port}"
    _wait_ready(ep, deadline)
    return proc, ep


def _wait_ready(ep: str, deadline: float) -> None:
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{ep}/moto-api/", timeout=2):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _create_bucket(ep: str) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=ep,
        aws_access_key_id="statelake-test",
        aws_secret_access_key="statelake-test-secret",
        region_name=REGION,
    )
    s3.create_bucket(Bucket=BUCKET)


def _stop() -> None:
    global _server, _endpoint
    if _server is not None:
        _server.terminate()
        try:
            _server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _server.kill()
            _server.wait()
    _server, _endpoint = None, None


# -- the server process ----------------------------------------------------------------
_MUTATING = frozenset({"PUT", "POST", "DELETE"})


def serialized_writes(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """WSGI middleware: one mutating request at a time, so If-None-Match is atomic."""
    write_lock = threading.Lock()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in _MUTATING:
            return app(environ, start_response)
        with write_lock:
            # Consume the whole response inside the lock: the object is stored by then.
            return list(app(environ, start_response))

    return wrapped


def serve(port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = serialized_writes(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="moto S3 server on loopback for statelake tests")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    serve(args.port)
