"""Webhook ack latency and throughput: real gunicorn + Redis + SQLite, signed deliveries from other processes.

    .venv/bin/python bench/webhook_load.py [--deliveries 3000] [--rate 300] [--senders 2] [--web-workers 2]

Sends distinct `pull_request.opened` deliveries (plus a share of exact redeliveries) at a fixed offered rate
and prints p50/p99 ack latency, achieved deliveries/s, and how many deliveries produced exactly one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.stack import Stack
from service.store import Store

REPO = {"full_name": "bench/zoo", "repo_id": 1, "clone_url": "https://github.com/bench/zoo.git",
        "installation_id": 1}


def _deliveries(secret: str, count: int, redeliver_every: int) -> list[tuple[dict[str, str], bytes, int]]:
    """(headers, body, pr number); every `redeliver_every`-th one repeats the previous delivery exactly."""
    out: list[tuple[dict[str, str], bytes, int]] = []
    for i in range(count):
        if redeliver_every and i % redeliver_every == redeliver_every - 1 and out:
            out.append(out[-1])
            continue
        payload = pull_request_event("opened", number=i + 1, head_sha=f"{i + 1:040x}", head_ref=f"b{i}",
                                     base_sha="0" * 40, **REPO)
        headers, body = signed(secret, "pull_request", payload, delivery_id=f"bench-{i}")
        out.append((headers, body, i + 1))
    return out


def _sender(url: str, work: list[tuple[dict[str, str], bytes, int]], rate: float, start_at: float,
            results: mp.Queue) -> None:
    target = urlparse(url)
    latencies, statuses = [], []
    for index, (headers, body, _number) in enumerate(work):
        due = start_at + index / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent = time.monotonic()
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
        conn.request("POST", "/webhook", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        conn.close()
        latencies.append(time.monotonic() - sent)
        statuses.append(response.status)
    results.put((latencies, statuses))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=300.0, help="offered deliveries per second, in total")
    parser.add_argument("--senders", type=int, default=2, help="sending processes")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--redeliver-every", type=int, default=10, help="every Nth delivery is a redelivery")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="compile-ci-bench-"))
    with Stack(root, web_workers=args.web_workers, workers=False) as stack:
        work = _deliveries(stack.webhook_secret, args.deliveries, args.redeliver_every)
        distinct = {number for _h, _b, number in work}
        results: mp.Queue = mp.Queue()
        start_at = time.monotonic() + 1.0
        shares = [work[i::args.senders] for i in range(args.senders)]
        procs = [mp.Process(target=_sender, args=(stack.web_url, share, args.rate / args.senders, start_at, results))
                 for share in shares]
        for proc in procs:
            proc.start()
        gathered = [results.get() for _ in procs]
        for proc in procs:
            proc.join()
        elapsed = time.monotonic() - start_at
        latencies = sorted(x for lat, _s in gathered for x in lat)
        statuses = [s for _l, st in gathered for s in st]
        runs = Store(f"sqlite:///{root / 'data' / 'compile-ci.sqlite3'}").recent_runs(limit=10 * args.deliveries)
        per_pr: dict[int | None, int] = {}
        for run in runs:
            per_pr[run.pr_number] = per_pr.get(run.pr_number, 0) + 1
        import redis

        queued = redis.Redis.from_url(stack.redis_url).llen("github")
    exactly_one = sum(1 for n in distinct if per_pr.get(n) == 1)
    figures = {
        "deliveries": len(work), "distinct_pull_requests": len(distinct), "offered_rate_per_s": args.rate,
        "achieved_rate_per_s": round(len(work) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2),
        "status_counts": {str(code): statuses.count(code) for code in sorted(set(statuses))},
        "runs_created": len(runs), "exactly_one_run": exactly_one, "lost": len(distinct) - len(per_pr),
        "duplicated": sum(1 for c in per_pr.values() if c > 1), "planning_messages_queued": queued,
        "web_workers": args.web_workers,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
