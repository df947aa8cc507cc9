"""`GitHubEmulator`: the strict fake GitHub REST API as a threaded HTTP server on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from . import control, dispatch, oauth, routes
from .auth import load_public_key
from .routes import Reply
from .spec import load_spec
from .state import CheckRunRecord, EmulatorState, Injection, Pull, Repo


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    emulator: GitHubEmulator

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.connections: set[socket.socket] = set()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-request are normal (timeouts, stop()); anything else is printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Hang up kept-alive clients too, or their handler threads would keep answering after stop()."""
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.1 so PyGithub's pooled connections are reused; every reply carries Content-Length.
    protocol_version = "HTTP/1.1"
    # Buffer each reply and send it in one segment: headers and body in two small writes meet the client's
    # delayed ACK (Nagle) and cost ~40 ms per request.
    wbufsize = -1
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        emulator = self.server.emulator
        try:
            if self.path.startswith(control.PREFIX):
                reply = control.handle(emulator.state, self.command, self.path, raw_body)
            elif oauth.handles(self.path, self.headers.get("Authorization")):
                reply = oauth.handle(emulator.state, self.command, self.path, raw_body, self.headers)
            else:
                reply = emulator.serve_github(self.command, self.path, raw_body, self.headers.get("Authorization"))
        except Exception as exc:  # a crash is an emulator bug the test must see, not a silent hang-up
            emulator.state.record_error(f"emulator crashed on {self.command} {self.path}: {exc!r}")
            reply = Reply(500, {"message": "Server Error", "documentation_url": routes.DOCS_URL})
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        reset = str(int(time.time()) + 3600)
        # GitHub sends its rate-limit headers on every answer; injected headers override them.
        headers = {"Content-Type": "application/json; charset=utf-8", "X-RateLimit-Limit": "5000",
                   "X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": reset, "X-RateLimit-Used": "1",
                   "X-RateLimit-Resource": "core", **reply.headers, "Content-Length": str(len(payload))}
        self.send_response(reply.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `emulator.requests` instead of a log."""


class GitHubEmulator:
    """A fake api.github.com for the 17 operations of the CI subset, strict about everything it is sent.

    Unknown routes, bodies the spec refuses and answers of its own that break the spec are appended to
    `errors`; tests assert it is empty at teardown.
    """

    def __init__(self, app_id: int, public_key_pem: str | bytes, spec_path: str | os.PathLike[str] | None = None,
                 *, app_slug: str = "compile-ci", host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = EmulatorState(load_spec(spec_path), int(app_id), app_slug)
        self._public_key = load_public_key(public_key_pem)
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> GitHubEmulator:
        server = _Server(self._address)
        server.emulator = self
        host, port = server.server_address[:2]
        self.state.base_url = f"http://{host}:{port}"
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.01,), name="github-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> GitHubEmulator:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if not self.state.base_url:
            raise RuntimeError("the emulator is not started")
        return self.state.base_url

    def serve_github(self, method: str, raw_path: str, raw_body: bytes, authorization: str | None) -> Reply:
        return dispatch.handle(self.state, self._public_key, method, raw_path, raw_body, authorization)

    def add_repo(self, full_name: str, default_branch: str = "main", private: bool = False) -> Repo:
        return self.state.add_repo(full_name, default_branch, private)

    def add_installation(self, installation_id: int, repos: list[str]) -> None:
        self.state.add_installation(installation_id, repos)

    def add_pull(self, full_name: str, number: int, head_sha: str, head_ref: str, base_ref: str,
                 author_login: str, author_association: str, **extra: Any) -> Pull:
        """Register a pull request; `extra` takes head_full_name, title, state and files (list of paths)."""
        return self.state.add_pull(full_name, number, head_sha, head_ref, base_ref, author_login,
                                   author_association, **extra)

    def set_permission(self, full_name: str, login: str, role: str) -> None:
        """role: admin, maintain, write, triage, read or none (the default for unknown users)."""
        self.state.set_permission(full_name, login, role)

    def inject(self, method: str, path_regex: str, status: int, *, apply: bool = False, times: int = 1,
               headers: dict[str, str] | None = None, body: Any = None) -> None:
        """Answer the next `times` matching requests with `status`; `apply=True` changes state first."""
        self.state.inject(Injection(method, path_regex, status, apply, times, dict(headers or {}), body))

    def check_runs(self, full_name: str | None = None) -> list[dict[str, Any]]:
        """Every check run (oldest first) with the emulator's `history`, `annotations` and `actions`."""
        return self.state.list_check_runs(full_name)

    @staticmethod
    def status_sequence(check_run: dict[str, Any]) -> list[str]:
        """The statuses a check run went through, repeats collapsed: e.g. queued, in_progress, completed."""
        seen: list[str] = []
        for entry in check_run["history"]:
            status = entry["status"] if isinstance(entry, dict) else entry[0]
            if not seen or seen[-1] != status:
                seen.append(status)
        return seen

    def check_run(self, check_run_id: int) -> dict[str, Any]:
        with self.state.lock:
            record: CheckRunRecord = self.state.check_runs[check_run_id]
            return record.public()

    def check_suites(self) -> list[dict[str, Any]]:
        return self.state.list_check_suites()

    def take_errors(self) -> list[str]:
        """The errors so far, cleared: for tests that provoke one on purpose."""
        with self.state.lock:
            errors, self.state.errors[:] = list(self.state.errors), []
            return errors

    @property
    def errors(self) -> list[str]:
        return self.state.errors

    @property
    def requests(self) -> list[tuple[str, str, Any]]:
        return self.state.requests

    @property
    def comments(self) -> list[dict[str, Any]]:
        return self.state.comments

    @property
    def reactions(self) -> list[dict[str, Any]]:
        return self.state.reactions

    @property
    def statuses(self) -> list[dict[str, Any]]:
        return self.state.statuses
