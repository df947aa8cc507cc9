"""PostgreSQL faults for bench/fault_campaign.py: the server killed (kill -9, then restarted), made read-only, and its
disk full (the database on a small tmpfs), each while a job runs and deliveries arrive. What the webhook refuses
meanwhile must be a 503 with Retry-After and a JSON error (or no answer at all while the web's connection dies); it
is redelivered once the fault is over, as GitHub's "Redeliver" does, and must then be accepted."""

from __future__ import annotations

import http.client
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

from service.devkit.postgres import LocalPostgres
from service.devkit.sandbox.deliveries import signed
from service.devkit.sandbox.stack import INSTALLATION_ID, Stack
from service.store import Job, Store

HOLD_S = 10.0  # how long each fault lasts
FILLERS = 30  # at most this many row-heavy deliveries while the disk is full (rows first fill pages' free space)
Delivery = tuple[dict[str, str], bytes]


def repositories_added(stack: Stack, index: int) -> Delivery:
    """An installation_repositories delivery that writes 50 rows and starts no job: it fills the pages' free space,
    so that a full disk shows in the webhook's answers too, not only in the workers'."""
    names = [{"full_name": f"sandbox/filler-{index:03d}-{i:02d}-{'x' * 60}"} for i in range(50)]
    payload = {"action": "added", "installation": {"id": INSTALLATION_ID}, "repositories_added": names,
               "repositories_removed": [], "repository_selection": "selected", "sender": {"login": "octocat"}}
    return signed(stack.webhook_secret, "installation_repositories", payload, f"campaign-filler-{index}")


def post(url: str, delivery: Delivery) -> tuple[int, bool]:
    """The status (0: no answer), and whether a 503 came as GitHub should see it: Retry-After and JSON."""
    target = urlparse(url)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    try:
        conn.request("POST", "/webhook", body=delivery[1], headers=delivery[0])
        response = conn.getresponse()
        body = response.read()
        proper = (response.status == 503 and bool(response.getheader("Retry-After"))
                  and response.getheader("Content-Type", "").startswith("application/json") and b'"error"' in body)
        return response.status, proper
    except (OSError, http.client.HTTPException):
        return 0, False
    finally:
        conn.close()


@dataclass
class Deliveries:
    """Deliveries sent during faults: their answers, and the refused ones until they are accepted."""

    url: str
    statuses: Counter[int] = field(default_factory=Counter)
    improper_refusals: int = 0  # a refusal GitHub could not act on: a 5xx without Retry-After and JSON
    refused: list[Delivery] = field(default_factory=list)

    def send(self, delivery: Delivery) -> int:
        status, proper = post(self.url, delivery)
        self.statuses[status] += 1
        if status not in (200, 202):
            self.refused.append(delivery)
            self.improper_refusals += status != 0 and not proper
        return status

    def redeliver(self, timeout_s: float = 120.0) -> float | None:
        """Redeliver every refused delivery until accepted; seconds until the first was (None: none refused)."""
        started, first = time.monotonic(), None
        while self.refused:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{len(self.refused)} deliveries still refused after {timeout_s:.0f} s")
            status, _ = post(self.url, self.refused[0])
            if status in (200, 202):
                self.refused.pop(0)
                first = first if first is not None else time.monotonic() - started
            else:
                time.sleep(0.5)
        return first


def _wait_for_a_running_job(store: Store, run_ids: Callable[[], set[str]], timeout_s: float = 600) -> Job | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = [j for j in store.jobs_in_state("running") if j.run_id in run_ids()]
        if running:
            return running[0]
        time.sleep(0.2)
    return None


def run_faults(stack: Stack, postgres: LocalPostgres, store: Store, pull: Callable[[int], Delivery],
               numbers: list[int]) -> tuple[list[dict[str, object]], Deliveries]:
    """Three faults, two pull requests each: one opened before (its job runs through the fault), one during it."""
    deliveries = Deliveries(stack.web_url)
    faults = [("killed", _kill, _restart), ("read-only", _read_only, _writable), ("full", _fill, _free)]
    if not postgres.disk_mb:
        faults = faults[:2]
        print("postgres: no small disk (needs root): the full-disk fault is skipped", flush=True)
    results = []
    for index, (name, start, end) in enumerate(faults):
        before, during = numbers[2 * index], numbers[2 * index + 1]
        known = {r.id for r in store.recent_runs(limit=1000)}
        assert deliveries.send(pull(before)) == 202
        job = _wait_for_a_running_job(store, lambda known=known: {r.id for r in store.recent_runs(1000)} - known)
        refused_before = sum(deliveries.statuses[s] for s in deliveries.statuses if s not in (200, 202))
        start(postgres)
        began = time.monotonic()
        deliveries.send(pull(during))
        if name == "full":
            for index in range(FILLERS):
                if deliveries.send(repositories_added(stack, index)) not in (200, 202):
                    break
        time.sleep(max(0.0, HOLD_S - (time.monotonic() - began)))
        end(postgres)
        accepted_after = deliveries.redeliver()
        refused = sum(deliveries.statuses[s] for s in deliveries.statuses if s not in (200, 202)) - refused_before
        results.append({"fault": name, "job_running_through_it": job.id if job else None, "refused": refused,
                        "accepted_again_s": None if accepted_after is None else round(accepted_after, 1)})
        print(f"postgres {name}: {refused} delivery refused, accepted again {results[-1]['accepted_again_s']} s after",
              flush=True)
    return results, deliveries


def _kill(postgres: LocalPostgres) -> None:
    postgres.kill()


def _restart(postgres: LocalPostgres) -> None:
    postgres.restart_after_kill()


def _read_only(postgres: LocalPostgres) -> None:
    postgres.sql("ALTER SYSTEM SET default_transaction_read_only = on", database="postgres")
    postgres.sql("SELECT pg_reload_conf()", database="postgres")


def _writable(postgres: LocalPostgres) -> None:
    # This session must not be read-only itself to undo it.
    postgres.sql("SET default_transaction_read_only = off", "ALTER SYSTEM RESET default_transaction_read_only",
                 database="postgres")
    postgres.sql("SELECT pg_reload_conf()", database="postgres")


def _fill(postgres: LocalPostgres) -> None:
    postgres.fill_disk()


def _free(postgres: LocalPostgres) -> None:
    postgres.free_disk()
