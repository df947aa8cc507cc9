"""The shards of an attempt merged into the one attempt its check run, pages and base comparison read: results in
the order one runner would have run them, one outcome (made like an unsharded job's from the merged counts, or the
worst shard's when one did not run to the end), and one results directory: tests/, log.txt, meta.json,
coverage.json, with each shard's own files kept under shards/<n>/.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from runners.protocol import RunResult
from runners.untrusted_files import read_bounded, read_json_data
from service.github.checks import count_outcomes, summary_line
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import INFRA_TITLE, Conclusion, JobState, Outcome
from service.jobs.pipeline import artifact_index
from service.jobs.surface_file import agreed, read_fingerprint
from service.observability.worker import job_finished
from service.planning.selection import SelectionFile, read_selection
from service.store import Job, Shard
from service.store.reuse import record_fingerprint
from service.store.shards import add_not_affected, order_results, shards_of

log = logging.getLogger(__name__)
MAX_LOG_BYTES = 128 * 1024 * 1024  # the merged log, like one job's (runners/job_log.py)
MAX_META_BYTES = 1024 * 1024
COVERAGE = "coverage.json"


def kind_of(outcome: Outcome) -> str:
    """tests: its tests ran to the end (success or failure by its counts); none: pytest collected nothing; other:
    it did not run to the end (infrastructure, cancelled, timed out, out of memory, install, invalid output...)."""
    if outcome.conclusion in (Conclusion.SUCCESS, Conclusion.FAILURE) and outcome.title == summary_line(
            {k: outcome.counts.get(k, 0) for k in ("failed", "passed", "skipped", "xfailed", "xpassed", "errors")}):
        return "tests"
    return "none" if outcome.conclusion == Conclusion.NEUTRAL and outcome.title == "No tests ran" else "other"


def _rank(shard: Shard) -> int:
    """Which shard's end speaks for the job when several did not run to the end."""
    if shard.title == INFRA_TITLE:
        return 0
    return {Conclusion.CANCELLED: 1, Conclusion.TIMED_OUT: 2}.get(Conclusion(shard.conclusion or "failure"), 3)


def merged_outcome(shards: Sequence[Shard], counts: dict[str, int], disagreement: str = "",
                   untaken: str = "") -> Outcome:
    """What the job says: the same words as one runner's for the same tests when every shard ran to the end."""
    torch = next((s.torch_version for s in shards if s.torch_version), "")
    if disagreement:
        return Outcome(Conclusion.FAILURE, "Shards collected different tests", disagreement, counts, torch)
    if untaken and all(s.kind in ("tests", "none") for s in shards):
        return Outcome(Conclusion.FAILURE, "Tests no shard ran", untaken, counts, torch)
    others = [s for s in shards if s.kind not in ("tests", "none")]
    if others:
        worst = min(others, key=lambda s: (_rank(s), s.index))
        detail = f"Shard {worst.index + 1} of {len(shards)}: {worst.detail}" if worst.detail else \
            f"Shard {worst.index + 1} of {len(shards)}."
        return Outcome(Conclusion(worst.conclusion or "failure"), worst.title, detail, counts, torch)
    if all(s.kind == "none" for s in shards):
        return Outcome(Conclusion.NEUTRAL, "No tests ran", "pytest collected no tests.", counts, torch)
    failed = counts.get("failed", 0) + counts.get("errors", 0)
    return Outcome(Conclusion.FAILURE if failed else Conclusion.SUCCESS, summary_line(counts), "", counts, torch)


def disagreement_of(selections: Sequence[SelectionFile]) -> str:
    """Shards split the same collected tests only if they collected the same (a suite whose collection differs
    between two processes cannot be split: some tests would run twice, others never)."""
    found = [s for s in selections if s.found]
    first = set(found[0].order) if found else set()
    for other in found[1:]:
        if set(other.order) != first:
            extra = sorted(set(other.order) ^ first)[:5]
            return (f"Shards {found[0].index + 1} and {other.index + 1} collected different tests "
                    f"({len(first)} and {len(other.order)}; e.g. {', '.join(extra)}): this suite's collection "
                    f"differs between two runs of it, so it cannot be split.")
    return ""


def untaken_of(selections: Sequence[SelectionFile]) -> str:
    """Shards that take their tests while they run (suites/claiming.py) say which they took; every collected test
    must have been taken by one of them: a test no shard ran is never silently missing from the verdict."""
    found = [s for s in selections if s.found]
    if not found or any(s.taken is None for s in found):
        return ""  # a runner image from before claiming.py: its shards split by count, each ran its share
    taken = {nodeid for s in found for nodeid in (s.taken or ())}
    missing = [nodeid for nodeid in found[0].order if nodeid not in taken]
    if not missing:
        return ""
    return (f"{len(missing)} of the {len(found[0].order)} collected tests were taken by no shard (e.g. "
            f"{', '.join(missing[:5])}): a shard that ended early or did not say what it ran left them.")


def merge_when_done(ctx: WorkerContext, job_id: str) -> None:
    """Once every shard of the running attempt completed: merge and complete the job, once (whoever comes last)."""
    try:
        with ctx.claims.report_lock(f"merge:{job_id}"):
            done = _merge_if_complete(ctx, job_id)
    except Exception:  # noqa: BLE001 - not merged now: the reaper sends a completed shard's message again
        # The lock a merger that died holds lapses in 2 minutes; Redis may be down; a merge may have failed.
        log.warning("job %s: not merged now; the reaper tries again", job_id, exc_info=True)
        return
    if done is not None:
        records = [r for r in ctx.store.results_of(done.id, done.attempt) if not r.not_affected]
        job_finished(done, done.conclusion or "", RunResult(0, done.duration_s or 0.0), records)
        ctx.queue.report_job(job_id)


def _merge_if_complete(ctx: WorkerContext, job_id: str) -> Job | None:
    job = ctx.store.get_job(job_id)
    run = ctx.store.get_run(job.run_id) if job else None
    if job is None or run is None or job.state != JobState.RUNNING or job.shards <= 1:
        return None
    shards = shards_of(ctx.store, job.id, job.attempt)
    if len(shards) < job.shards or any(s.state != JobState.COMPLETED for s in shards):
        return None
    out = ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt)
    return lifecycle.complete(ctx.store, job, _merge(ctx, job, shards, out))


def shard_results_dir(artifacts: Path, run_id: str, shard: Shard) -> Path:
    """Where a shard's attempt writes until the merge moves it to `<attempt>/shards/<n>/`: as deep as a job's own
    attempt directory, so that what the runner makes relative to it (a failure's path in a LocalRunner traceback
    is relative to the job's scratch directory beside it) reads the same as in an unsharded job."""
    return artifacts / run_id / shard.id / str(shard.attempt)


def _merge(ctx: WorkerContext, job: Job, shards: list[Shard], out: Path) -> Outcome:
    for shard in shards:
        _move_shard(shard_results_dir(ctx.settings.artifacts_dir, job.run_id, shard), out / "shards" / str(shard.index))
    selections = [read_selection(out / "shards" / str(s.index)) for s in shards]
    disagreement = disagreement_of(selections)
    first = next((s for s in selections if s.found), SelectionFile())
    order_results(ctx.store, job.id, job.attempt, first.order)
    plan = json.loads(shards[0].plan or "{}")
    if plan.get("not_affected"):  # only when the service left targets out: a shard cannot add to them
        add_not_affected(ctx.store, job.id, job.attempt, first.not_affected)
    record_fingerprint(ctx.store, job.id, job.attempt, agreed([read_fingerprint(out / "shards" / str(s.index))
                                                              for s in shards]))
    records = [r for r in ctx.store.results_of(job.id, job.attempt) if not r.not_affected]
    untaken = untaken_of(selections) if plan.get("dynamic") is True and not disagreement else ""
    outcome = merged_outcome(shards, count_outcomes(r.outcome for r in records), disagreement, untaken)
    for shard in shards:
        _move_tests(out / "shards" / str(shard.index) / "tests", out / "tests")
    _write_log(out, shards)
    _write_meta(out, shards, outcome, ctx.runner.name)
    _write_coverage(out, shards)
    ctx.store.replace_artifacts(job.id, job.attempt, artifact_index(out))
    return outcome


def _move_shard(source: Path, dest: Path) -> None:
    if source.is_dir() and not os.path.lexists(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, dest)
    shutil.rmtree(source.parent, ignore_errors=True)  # and what earlier attempts of the shard left


def _move_tests(source: Path, dest: Path) -> None:
    """Each test's generated code, metrics and repro, where an unsharded attempt has them. The outbox copied only
    regular files and folders there; a test two shards ran (they never should) keeps the first one's."""
    if not source.is_dir() or source.is_symlink():
        return
    dest.mkdir(exist_ok=True)
    for entry in sorted(os.listdir(source)):
        target = dest / entry
        if not os.path.lexists(target):
            os.rename(source / entry, target)


def _write_log(out: Path, shards: list[Shard]) -> None:
    """One log: the fan-out's lines, then each shard's under a heading (cut at the size one job's log may have)."""
    head = (out / "log.txt").read_bytes() if (out / "log.txt").is_file() else b""
    written = 0
    with open(out / "log.txt.merging", "wb") as merged:
        merged.write(head)
        for shard in shards:
            merged.write(f"\n===== shard {shard.index + 1} of {len(shards)} (attempt {shard.attempt}): "
                         f"{shard.title} =====\n".encode())
            try:
                data = read_bounded(out / "shards" / str(shard.index), "log.txt", MAX_LOG_BYTES - written)
            except OSError:
                data = b"(no log)\n"
            merged.write(data)
            written += len(data)
    os.replace(out / "log.txt.merging", out / "log.txt")


def _write_meta(out: Path, shards: list[Shard], outcome: Outcome, runner: str) -> None:
    """The worker's record of the attempt: its shards' own records, and what their copies refused (job page)."""
    metas, problems, problem_count = [], [], 0
    for shard in shards:
        try:
            meta = json.loads(read_bounded(out / "shards" / str(shard.index), "meta.json", MAX_META_BYTES))
        except (OSError, ValueError):
            meta = {}
        output = meta.get("output") if isinstance(meta.get("output"), dict) else {}
        problems += [{**p, "name": f"shards/{shard.index}/{p.get('name', '')}"} for p in output.get("problems", [])
                     if isinstance(p, dict)]
        problem_count += int(output.get("problem_count") or 0)
        metas.append({"index": shard.index, "attempt": shard.attempt, "conclusion": shard.conclusion,
                      "title": shard.title, "duration_s": shard.duration_s, "exit_code": meta.get("exit_code")})
    record = {"runner": runner, "conclusion": outcome.conclusion.value, "torch_version": outcome.torch_version,
              "shards": metas, "output": {"problems": problems[:50], "problem_count": problem_count}}
    (out / "meta.json").write_text(json.dumps(record, indent=2))


def _write_coverage(out: Path, shards: list[Shard]) -> None:
    """Op families covered by any shard; not covered by none. Each shard's file is the job's: checked for type."""
    covered: set[str] = set()
    uncovered: list[set[str]] = []
    base: dict[str, object] = {}
    hits = 0
    for shard in shards:
        try:
            data = read_json_data(out / "shards" / str(shard.index), COVERAGE, 2 * 1024 * 1024)
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("denominator"), int):
            continue
        covered |= {n for n in data.get("covered") or [] if isinstance(n, str)}
        uncovered.append({n for n in data.get("uncovered") or [] if isinstance(n, str)})
        hits += data.get("cache_hits") if isinstance(data.get("cache_hits"), int) else 0
        base = base or {k: data.get(k) for k in ("denominator", "torch", "device")}
    if uncovered:
        left = set.intersection(*uncovered) - covered
        merged = {**base, "covered": sorted(covered), "uncovered": sorted(left), "cache_hits": hits}
        (out / COVERAGE).write_text(json.dumps(merged))
