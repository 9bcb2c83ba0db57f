"""A fault-injecting HTTP proxy in front of the loopback S3 server (a storage layer, not a mock).

Run as ``python -m tests.reliability._faultproxy --upstream http://127.0.0.1:N``
(a separate process: the client under test may hold the GIL while it waits
for the network). It prints ``PORT <n>`` and forwards every request to the
upstream server, except that an armed rule changes what happens to the next
requests matching it:

* ``error_after``: forward the request (the object IS stored), then answer
  500 InternalError: the client cannot tell whether its commit landed.
* ``drop_after``: forward, then close the connection without answering.
* ``stall_after``: forward, then say nothing for ``stall`` seconds and close
  (a timeout from the client's side).
* ``error_before``: answer 500 without forwarding (nothing stored).

Control endpoints (JSON): ``POST /__fault__/arm`` with ``{"pattern": regex,
"method": "PUT", "mode": ..., "count": n, "stall": s}`` (the rule covers the
next ``count`` matching requests, retries included); ``POST
/__fault__/clear``; ``GET /__fault__/log`` (every faulted request).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>injected fault</Message></Error>"
)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rules: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []

    def take(self, method: str, path: str) -> dict[str, Any] | None:
        with self.lock:
            for rule in self.rules:
                if (
                    rule["count"] > 0
                    and rule["method"] == method
                    and re.search(rule["pattern"], path)
                ):
                    rule["count"] -= 1
                    return dict(rule)
        return None


def make_handler(upstream: str, state: _State) -> type[BaseHTTPRequestHandler]:
    up = urlparse(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in (
                    "transfer-encoding",
                    "content-length",
                    "connection",
                    "date",
                    "server",
                ):
                    self.send_header(k, v)
            length = str(len(body))
            if self.command == "HEAD":  # a HEAD answer carries the object's size, not its own
                length = next((v for k, v in headers if k.lower() == "content-length"), "0")
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _control(self, body: bytes) -> None:
            if self.path == "/__fault__/arm":
                rule = json.loads(body)
                rule.setdefault("method", "PUT")
                rule.setdefault("count", 1)
                rule.setdefault("stall", 5.0)
                with state.lock:
                    state.rules.append(rule)
            elif self.path == "/__fault__/clear":
                with state.lock:
                    state.rules.clear()
            with state.lock:
                out = json.dumps({"log": state.log, "rules": state.rules}).encode()
            self._reply(200, [("Content-Type", "application/json")], out)

        def _handle(self) -> None:
            body = self._body()
            if self.path.startswith("/__fault__/"):
                self._control(body)
                return
            rule = state.take(self.command, self.path)
            if rule is not None:
                with state.lock:
                    state.log.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "mode": rule["mode"],
                            "t": time.time(),
                        }
                    )
            if rule is not None and rule["mode"] == "error_before":
                self._reply(500, [("Content-Type", "application/xml")], _ERROR_BODY)
                return
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("transfer-encoding", "content-length", "connection")
            }
            if self.command in ("PUT", "POST") or body:
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            status, resp_headers = resp.status, resp.getheaders()
            conn.close()
            if rule is None:
                self._reply(status, resp_headers, data)
                return
            with state.lock:
                state.log[-1]["upstream_status"] = status
            if rule["mode"] == "error_after":
                self._reply(500, [("Content-Type", "application/xml")], _ERROR_BODY)
            elif rule["mode"] == "stall_after":
                time.sleep(float(rule["stall"]))
                self._drop()
            else:  # drop_after
                self._drop()

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler


class FaultProxy:
    """Client side: start the proxy process, arm rules, read its log."""

    def __init__(self, upstream: str) -> None:
        import os
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=str(root))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability._faultproxy", "--upstream", upstream],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(root),
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(b"PORT "):
            self.proc.kill()
            raise RuntimeError(f"fault proxy did not start: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def _call(self, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(payload or {}).encode()
        req = urllib.request.Request(
            f"{self.endpoint}/__fault__/{path}",
            data=data,
            method="POST" if path != "log" else "GET",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def arm(
        self, *, pattern: str, mode: str, count: int = 1, method: str = "PUT", stall: float = 5.0
    ) -> None:
        self._call(
            "arm",
            {"pattern": pattern, "mode": mode, "count": count, "method": method, "stall": stall},
        )

    def clear(self) -> None:
        self._call("clear")

    def log(self) -> list[dict[str, Any]]:
        return self._call("log")["log"]  # type: ignore[no-any-return]

    def close(self) -> int:
        """Stop the proxy; returns its exit status (it exits 0 on SIGTERM)."""
        self.proc.terminate()
        self.proc.communicate(timeout=10)
        return self.proc.returncode


def main() -> None:
    import signal
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args.upstream, _State()))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
