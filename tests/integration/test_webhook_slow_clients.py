"""The slow-body attack replayed against the real gunicorn the stack starts: valid deliveries are not held up."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from service.devkit.sandbox.deliveries import fixture, signed
from service.devkit.sandbox.stack import Stack

SLOW = 12  # more than the 2 sync workers of before, and more than they could have served


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with Stack(tmp_path, web_workers=2, workers=False) as started:
        yield started


def _ping(stack: Stack, host: str, port: int) -> float:
    headers, body = signed(stack.webhook_secret, "ping", fixture("ping", "with-app_id"))
    sent = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/webhook", body=body, headers=headers)
    response = conn.getresponse()
    assert response.status == 200
    conn.close()
    return time.monotonic() - sent


def test_a_ping_is_answered_at_once_while_slow_bodies_hold_connections(stack: Stack) -> None:
    target = urlparse(stack.web_url)
    assert target.hostname and target.port
    for _ in range(4):  # the workers load the app after the port opens: wait for them first
        _ping(stack, target.hostname, target.port)
    slow = []
    for _ in range(SLOW):
        sock = socket.create_connection((target.hostname, target.port), timeout=30)
        # A Content-Length under the cap, a body that never comes: before any authentication.
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: slow\r\nContent-Length: 100000\r\n\r\n{")
        slow.append(sock)
    try:
        assert max(_ping(stack, target.hostname, target.port) for _ in range(5)) < 2.0  # sync workers: 30 s
        # The slow ones are cut at the body deadline (10 s) with a 408, not held for as long as they like.
        slow[0].settimeout(20)
        assert slow[0].recv(64).startswith(b"HTTP/1.1 408")
    finally:
        for sock in slow:
            sock.close()


FRONTED_SLOW = 100  # more than gunicorn's 2 x 32 threads: without the front, these alone would hold all of them


def test_behind_the_nginx_front_slow_clients_hold_no_thread_and_deliveries_answer_within_a_second(
    tmp_path: Path,
) -> None:
    with Stack(tmp_path, web_workers=2, workers=False, front=True) as fronted:
        target = urlparse(fronted.web_url)
        assert target.hostname and target.port
        for _ in range(4):
            _ping(fronted, target.hostname, target.port)
        slow = []
        try:
            for _ in range(FRONTED_SLOW):
                sock = socket.create_connection((target.hostname, target.port), timeout=30)
                sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                             b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: slow\r\nContent-Length: 100000\r\n\r\n{")
                slow.append(sock)
            assert max(_ping(fronted, target.hostname, target.port) for _ in range(20)) < 1.0
        finally:
            for sock in slow:
                sock.close()
