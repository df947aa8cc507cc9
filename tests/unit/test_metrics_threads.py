"""The metrics are made once per process even when a worker's threads ask for them at the same moment."""

from __future__ import annotations

import subprocess
import sys

# A fresh interpreter: the metrics register in prometheus-client's process-wide registry, once.
# The window between two threads' registrations is microseconds; a registry that takes 20 ms per registration
# (prometheus-client's own, slowed) replays the github worker's start-up race every time.
RACE = """
import threading, time
from prometheus_client import registry
register = registry.CollectorRegistry.register
def slow_register(self, collector):
    time.sleep(0.02)
    return register(self, collector)
registry.CollectorRegistry.register = slow_register
from service.observability.metrics import recorded
barrier, seen, errors = threading.Barrier(16), [], []
def first_task():
    barrier.wait()
    try:
        seen.append(recorded())
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=first_task) for _ in range(16)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors[0]
assert len(seen) == 16 and len({id(m) for m in seen}) == 1
print("one set of metrics")
"""


def test_threads_asking_for_the_metrics_at_once_get_one_set() -> None:
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "one set of metrics" in done.stdout, done.stderr[-2000:]
