"""The report lock with a real Redis and a real holder process: kept while its holder lives, however long it
reports; taken over within seconds once the holder is SIGKILLed (it used to be held 120 s, the check run with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import redis

from service.store.claims import LOCK_TTL_S, Claims

HOLDER = """
import sys, time
from service.store.claims import Claims
url = sys.argv[1]
Claims(url, 60, lock_ttl_s=1.5).report_lock("slow-report").__enter__()  # a report that takes its time
Claims(url, 60).report_lock("job-9").__enter__()  # the default lock a github worker holds while reporting
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_holders_lock_is_taken_over_within_seconds_a_live_ones_never(redis_url: str) -> None:
    assert LOCK_TTL_S <= 15  # seconds, not minutes
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, redis_url], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        broker = redis.Redis.from_url(redis_url)
        time.sleep(3 * 1.5)  # three times its TTL: a lock nobody extends would have lapsed twice over
        assert broker.exists("compile-ci:report-lock:slow-report")
        assert broker.pttl("compile-ci:report-lock:job-9") > 0
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        killed = time.monotonic()
        with Claims(redis_url, 60).report_lock("job-9"):
            took = time.monotonic() - killed
        assert took <= LOCK_TTL_S + 1, took
        with Claims(redis_url, 60).report_lock("job-9"):  # released by its new owner, not left to lapse
            assert time.monotonic() - killed < took + 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
