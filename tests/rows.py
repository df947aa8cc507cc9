"""Test-only: put a row into a given state directly, as an earlier history (or a reordered write) would have left it.

Service code never does this: service.jobs.lifecycle's transitions are the only writers of state fields there.
"""

from __future__ import annotations

from service.store import Job, Run, Store


def force_job(store: Store, job_id: str, **fields: object) -> Job:
    with store.session() as s:
        job = s.get_one(Job, job_id)
        for key, value in fields.items():
            setattr(job, key, value)
        return job


def force_run(store: Store, run_id: str, **fields: object) -> Run:
    with store.session() as s:
        run = s.get_one(Run, run_id)
        for key, value in fields.items():
            setattr(run, key, value)
        return run


def job_row(**fields: object) -> Job:
    """A completed correctness job of run `abc`, not stored: what the judging and rendering code reads."""
    base = dict(id="abc-correctness-cpu", run_id="abc", suite="correctness", device="cpu", attempt=1,
                passed=0, failed=0, skipped=0, errors=0, xfailed=0, xpassed=0, detail="", title="",
                torch_version="2.13.0", runner="local", state="completed")
    return Job(**{**base, **fields})


def run_row() -> Run:
    return Run(id="abc", repo_full_name="o/r", head_sha="f" * 40, repo_id=1, installation_id=2)
