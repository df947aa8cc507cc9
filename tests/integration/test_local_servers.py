"""The test servers' ports: a port another process takes between our choice and the server's bind must not fail
the run (CI lost a Postgres fixture that way), and our choices stay out of the ports outgoing connections get."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from service.devkit.postgres import LocalPostgres
from service.devkit.sandbox import stack
from service.devkit.sandbox.stack import free_port


def test_free_ports_are_below_the_kernels_ephemeral_range_and_bindable() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(50)}
    assert all(1024 <= port < low for port in ports), sorted(ports)
    assert len(ports) > 40  # spread, so three test processes choosing at once rarely meet
    for port in list(ports)[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    # Tests seed Python's generator (hypothesis does, per example): two test processes seeded alike must not be
    # handed the same ports.
    chosen = []
    for _ in range(2):
        random.seed(1234)
        chosen.append([free_port() for _ in range(5)])
    assert chosen[0] != chosen[1]


def test_a_host_whose_ephemeral_range_is_everything_still_gets_a_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "_ephemeral_low", lambda: 1024)
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_postgres_whose_port_was_taken_before_it_started_moves_to_another_and_serves() -> None:
    server = LocalPostgres()
    chosen = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", chosen))
        squatter.listen()
        with server:
            assert server.port != chosen
            assert server.sql("SELECT 40 + 2").strip() == "42"
            assert "already in use" in (server.root / "server.log").read_text()


def test_a_postgres_that_cannot_start_says_why_from_its_log() -> None:
    server = LocalPostgres()
    server.start()
    try:
        server.kill()
        (server.data / "postgresql.conf").write_text("shared_buffers = 'not a size'\n")
        try:
            server.restart_after_kill()
        except RuntimeError as exc:
            assert "shared_buffers" in str(exc), exc
        else:
            raise AssertionError("a server with a broken configuration started")
    finally:
        server.stop()
