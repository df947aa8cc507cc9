"""Server time of the job page for a job with 2,000 tests and a 50 MB log, through the Flask app.

    python bench/job_page.py [--tests 2000] [--log-mb 50] [--requests 30]

Builds the job in a temporary store and artifact directory (tests/browser/seed.py), then times GET /jobs/<id>
with Flask's test client (no network): the first request (cold line index of the log) separately, then
p50/p95 of the rest. Also times a page of the whole log, the live-log poll and a search of it all.
Prints a table and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flask.testing import FlaskClient  # noqa: E402

from service.config import Settings  # noqa: E402
from service.devkit.sandbox.stack import app_keypair  # noqa: E402
from service.store import Store  # noqa: E402
from service.web.app import create_app  # noqa: E402
from tests.browser.seed import many_tests, seed_job, seed_run  # noqa: E402


def timed(client: FlaskClient, url: str, count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(url)
        body = response.get_data()
        out.append((time.perf_counter() - start) * 1000)
        if response.status_code != 200 or not body:
            raise SystemExit(f"{url} answered {response.status_code}")
    return out


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--log-mb", type=int, default=50)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--no-times", action="store_true", help="a log without the worker's times sidecar")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env({
            "COMPILE_CI_WEBHOOK_SECRET": "bench", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": app_keypair()[0], "COMPILE_CI_DATA_DIR": tmp,
        })
        store = Store(settings.database_url)
        run = seed_run(store)
        job = seed_job(settings, store, run, many_tests(args.tests), log_bytes=args.log_mb * 1_000_000)
        if args.no_times:
            (settings.artifacts_dir / run.id / job.id / "1" / "log.times").unlink()
        client = create_app(settings).test_client()
        first = timed(client, f"/jobs/{job.id}", 1)[0]
        page = timed(client, f"/jobs/{job.id}", args.requests)
        size = len(client.get(f"/jobs/{job.id}").get_data())
        with open(settings.artifacts_dir / run.id / job.id / "1" / "log.txt", "rb") as log:
            mid_page = max(1, sum(block.count(b"\n") for block in iter(lambda: log.read(1 << 20), b"")) // 2000)
        log_page = timed(client, f"/jobs/{job.id}/log?page={mid_page}", args.requests)
        live = timed(client, f"/jobs/{job.id}/log/live?offset={args.log_mb * 500_000}", args.requests)
        # The one FAILED line is the log's last: the search reads the whole file.
        search = timed(client, f"/jobs/{job.id}/log/search?q=FAILED", max(3, args.requests // 3))
    figures = {
        "tests": args.tests, "log_mb": args.log_mb, "requests": args.requests, "page_kib": round(size / 1024),
        "job_page_first_ms": round(first, 1),
        "job_page_p50_ms": round(statistics.median(page), 1), "job_page_p95_ms": round(percentile(page, 0.95), 1),
        "log_page_p50_ms": round(statistics.median(log_page), 1),
        "log_page_p95_ms": round(percentile(log_page, 0.95), 1),
        "live_poll_p50_ms": round(statistics.median(live), 1),
        "log_search_p50_ms": round(statistics.median(search), 1),
        "log_search_p95_ms": round(percentile(search, 0.95), 1),
    }
    print(f"job page, {args.tests} tests, {args.log_mb} MB log, {args.requests} requests, {figures['page_kib']} KiB")
    print(f"  first request (cold log index) {figures['job_page_first_ms']:8.1f} ms")
    print(f"  p50 / p95                      {figures['job_page_p50_ms']:8.1f} / {figures['job_page_p95_ms']} ms")
    print(f"log page (1,000 lines, mid-log)  {figures['log_page_p50_ms']:8.1f} / {figures['log_page_p95_ms']} ms")
    print(f"live-log poll (64 KiB chunk)     {figures['live_poll_p50_ms']:8.1f} ms p50")
    print(f"log search (whole log scanned)   {figures['log_search_p50_ms']:8.1f} / {figures['log_search_p95_ms']} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
