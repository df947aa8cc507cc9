"""Valid deliveries' latency while slow-body clients hold connections: real nginx + gunicorn + Redis + SQLite,
loopback.

    .venv/bin/python bench/webhook_slow_clients.py [--slow 50,200,500] [--seconds 20] [--rate 20]
                                                   [--web-workers 2] [--threads 32] [--sync] [--no-front]

Each slow client announces a 1 MB body (under the 25 MB cap), sends 10 bytes, then one byte every 2 s; when the
server cuts it, another takes its place, so `--slow` connections stay open. Meanwhile signed `pull_request.opened`
deliveries go out at `--rate` per second. Prints p50/p99/max of the valid deliveries, first without slow clients,
then with them, and how long the server let a slow client hold its connection; one stack per `--slow` count, then a
table of them all. By default nginx buffers in front of gunicorn, as deployed (service/web/front.py); `--no-front`
serves with gunicorn alone, `--sync` with the old sync workers, for comparison.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.stack import Stack
from service.web.serving import DEFAULT_THREADS

REPO = {"full_name": "bench/slow", "repo_id": 1, "clone_url": "https://github.com/bench/slow.git",
        "installation_id": 1}


class SlowClients:
    """`count` connections that trickle a body, each replaced when the server closes it."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.host, self.port, self.count = host, port, count
        self.stop = threading.Event()
        self.open = 0
        self.held_s: list[float] = []  # connect to server close, for each connection the server cut
        self.answers: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(count)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self._one()

    def _one(self) -> None:
        started = time.monotonic()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=60)
        except OSError:
            self.stop.wait(0.2)
            return
        with self.lock:
            self.open += 1
        answer = "none"
        try:
            sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                         b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: slow\r\nContent-Length: 1000000\r\n\r\n"
                         b'{"zen": "x')
            sock.settimeout(2.0)
            while not self.stop.is_set():
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    sock.sendall(b"x")
                    continue
                if data.startswith(b"HTTP/1."):
                    answer = data.split(b" ", 2)[1].decode()
                break  # the server answered or closed: this connection is over
        except OSError:
            answer = "reset"
        finally:
            sock.close()
            with self.lock:
                self.open -= 1
                if not self.stop.is_set():
                    self.held_s.append(time.monotonic() - started)
                    self.answers[answer] = self.answers.get(answer, 0) + 1

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)


def _deliver(url: str, secret: str, rate: float, seconds: float, first_number: int) -> tuple[list[float], list[int]]:
    target = urlparse(url)
    latencies: list[float] = []
    statuses: list[int] = []
    start = time.monotonic()
    index = 0
    while time.monotonic() - start < seconds:
        due = start + index / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        number = first_number + index
        payload = pull_request_event("opened", number=number, head_sha=f"{number:040x}", head_ref=f"b{number}",
                                     base_sha="0" * 40, **REPO)
        headers, body = signed(secret, "pull_request", payload)
        sent = time.monotonic()
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        try:
            conn.request("POST", "/webhook", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        except OSError:
            statuses.append(0)
        finally:
            conn.close()
        latencies.append(time.monotonic() - sent)
        index += 1
    return latencies, statuses


def _summary(latencies: list[float], statuses: list[int]) -> dict[str, object]:
    ordered = sorted(latencies)
    return {
        "deliveries": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "status_counts": {str(code): statuses.count(code) for code in sorted(set(statuses))},
    }


def measure(args: argparse.Namespace, count: int) -> dict[str, object]:
    """One stack, `count` slow clients: the valid deliveries' latency before and while they hold connections."""
    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-"))
    threads = 0 if args.sync else args.threads
    with Stack(root, web_workers=args.web_workers, workers=False, web_threads=threads, front=args.front) as stack:
        target = urlparse(stack.web_url)
        assert target.hostname in ("127.0.0.1", "localhost")  # loopback only
        _deliver(stack.web_url, stack.webhook_secret, args.rate, 1.0, 50_000)  # warm-up: imports, first queries
        baseline = _deliver(stack.web_url, stack.webhook_secret, args.rate, 5.0, 1)
        slow = SlowClients(target.hostname, target.port, count)
        slow.start()
        deadline = time.monotonic() + 20
        while slow.open < count and time.monotonic() < deadline:
            time.sleep(0.05)
        opened = slow.open
        try:
            loaded = _deliver(stack.web_url, stack.webhook_secret, args.rate, args.seconds, 100_000)
            still_open = slow.open
        finally:
            slow.finish()
    held = sorted(slow.held_s)
    return {
        "front": "nginx" if args.front else "none",
        "worker_class": "sync" if args.sync else f"gthread ({args.threads} threads)",
        "web_workers": args.web_workers,
        "slow_clients": count,
        "baseline": _summary(*baseline),
        "with_slow_clients": _summary(*loaded),
        "slow_connections_open_at_start": opened, "slow_connections_open_at_end": still_open,
        "slow_connections_cut_by_server": len(held), "slow_answers": slow.answers,
        "slow_held_s_median": round(statistics.median(held), 1) if held else None,
        "slow_held_s_max": round(held[-1], 1) if held else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", default="50", help="slow-body connections kept open; several: 50,200,500")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time with the slow clients")
    parser.add_argument("--rate", type=float, default=20.0, help="valid deliveries per second")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="threads per gunicorn worker")
    parser.add_argument("--sync", action="store_true", help="serve with sync workers (the old setup)")
    parser.add_argument("--no-front", dest="front", action="store_false", help="gunicorn alone, without nginx")
    args = parser.parse_args()
    results = []
    for count in (int(n) for n in args.slow.split(",")):
        results.append(measure(args, count))
        print(json.dumps(results[-1], indent=2), flush=True)
    print(f"{'slow clients':>12} {'deliveries':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  statuses  "
          f"(front: {results[0]['front']}, {results[0]['worker_class']} x {args.web_workers})")
    for result in results:
        loaded = result["with_slow_clients"]
        assert isinstance(loaded, dict)
        print(f"{result['slow_clients']:>12} {loaded['deliveries']:>10} {loaded['p50_ms']:>8} {loaded['p99_ms']:>8} "
              f"{loaded['max_ms']:>8}  {loaded['status_counts']}")


if __name__ == "__main__":
    main()
