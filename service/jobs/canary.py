"""The canary beyond any anchor (beat, once a day, github queue): every installed repository's default branch, at its
last push, run on the deployment's advisory torch (the next release candidate, say), so that what the next torch
breaks is known before it is anyone's. `/canary` compares each with the same commit's push run on the default torch.

A canary is an internal run (trigger `canary`): no check runs, its jobs behind every pull request's, at the push's
commit with the push's `.compile-ci.toml`. Its id is a hash of (repository, advisory version, day, sha): a beat that
fires twice in a day, or a worker that retries the task, starts nothing twice. A repository opts out with
`[canary] enabled = false`. Like a base run it reads the default branch's compile cache through a throwaway layer
and never writes it (service/jobs/pipeline.py: only pushes write the trusted cache).
"""

from __future__ import annotations

import logging
from datetime import date

from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Gate
from service.planning.plan import builtin_suites
from service.repo_config import parse_repo_config
from service.store import NewRun, Run, utcnow
from service.store.default_branches import newest_runs
from service.store.rows import CANARY_TRIGGER
from service.torch_versions import advisory_of

log = logging.getLogger(__name__)


def start_canaries(ctx: WorkerContext, day: date | None = None) -> list[str]:
    """One canary run per repository for `day` (today, UTC); what it did, one line per repository."""
    advisory = advisory_of(ctx.settings.torch_versions)
    if advisory is None:
        return []  # nothing to tell anyone about: the deployment lists no advisory version
    day = day or utcnow().date()
    suites = builtin_suites(ctx.suites_dir)
    did: list[str] = []
    pushes = newest_runs(ctx.store, "push")
    # Installed, but no push of its default branch recorded yet: nothing to run the canary at (said, not silent).
    seen = {push.repo_full_name for push in pushes}
    did += [f"{name}: no canary (no default-branch push seen yet)" for name in ctx.store.installed_repos()
            if name not in seen]
    for push in pushes:
        reason = _left_out(ctx, push, suites)
        if reason:
            did.append(f"{push.repo_full_name}: no canary ({reason})")
            continue
        new = NewRun(repo_full_name=push.repo_full_name, repo_id=push.repo_id, installation_id=push.installation_id,
                     clone_url=push.clone_url, private=push.private, trigger=CANARY_TRIGGER,
                     trigger_ref=f"canary/{advisory.name}/{day.isoformat()}", pr_number=None, branch=push.branch,
                     head_sha=push.head_sha, sender="", gate=Gate.TRUSTED, config_text=push.config_text or "")
        run, created = ctx.store.create_run_if_absent(new)
        if created:
            ctx.queue.plan_run(run.id)
        did.append(f"{push.repo_full_name}: canary {run.id} on torch {advisory.name} at {push.head_sha[:12]}"
                   + ("" if created else " (already started today)"))
    did.sort(key=lambda line: line.split(":", 1)[0])  # by repository
    for line in did:
        log.info("canary: %s", line)
    return did


def _left_out(ctx: WorkerContext, push: Run, suites: tuple[str, ...]) -> str:
    if ctx.store.is_uninstalled(push.repo_full_name):
        return "the App was removed from it"
    if push.config_error:
        return "its .compile-ci.toml is invalid at its last push"
    config = parse_repo_config(push.config_text or None, suites)
    if isinstance(config, list):
        return "its .compile-ci.toml is invalid at its last push"
    return "" if config.canary else "opted out: [canary] enabled = false"
