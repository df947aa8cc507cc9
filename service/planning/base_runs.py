"""A pull request's base: the default branch's push run at its base sha, else a base run compile-ci schedules.

A base run is an internal run (trigger `base`) at the base sha with the head's `.compile-ci.toml`, so its jobs are
the head's (same suites, devices, timeouts, targets), except what it installs: the base commit's own `[install]`
section (job_config), so a pull request that adds a dependency (one that patches inductor, say) cannot change its
own base result. It reports nothing to GitHub, its jobs wait behind every head job (Celery priority LOW), and its id
is a hash of (repository, sha, runner builds, config but [install]), so a second pull request on the same base with
the same config reuses it instead of running it again; a push run at the base serves instead only under that key.

Trust: the code and what is installed are the base sha's own; which suites run and on what is the head's config. A
base run never writes the repository's trusted compile cache (only pushes to the default branch do): it reads it
through a throwaway layer, so its results are a fact about the base commit and the default branch's cache, whichever
pull request asked for it and in whatever order the jobs ran. Its gate (trusted, or approved for an outsider's pull
request) only says that it may run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tomllib
from pathlib import Path

from runners.checkout import Checkout
from service.planning.worker import Planner
from service.repo_config import CONFIG_FILE, DEVICES, ConfigProblem, RepoConfig, parse_repo_config
from service.store import NewRun, Run

log = logging.getLogger(__name__)
NULL_SHA = "0" * 40
BASE_TRIGGER = "base"


def link_base(ctx: Planner, run: Run, config_text: str) -> str | None:
    """The run whose results serve as this pull request run's base (linked in the store), or None."""
    if run.trigger != "pull_request" or not run.base_sha or run.base_sha == NULL_SHA:
        return None
    if run.base_run_id:
        return run.base_run_id
    # The default branch's run at the base serves only if it ran as the base run would: same runner builds, same
    # config but [install] (it installed the base commit's own, as a base run does).
    push = ctx.store.push_run_at(run.repo_full_name, run.base_sha, base_key(config_text, runner_builds(ctx)))
    if push is not None:
        ctx.store.link_base(run.id, push.id)
        return push.id
    base = _base_run(ctx, run, config_text)
    ctx.store.link_base(run.id, base.id)
    return base.id


def runner_builds(ctx: Planner) -> list[str]:
    """The runner builds (image and torch) of every device: a base result is only valid for them."""
    return [ctx.runner.cache_key(device) for device in DEVICES]


def base_key(config_text: str, builds: list[str]) -> str:
    """What a base result depends on beyond the repository and the base sha: the config that chose its jobs but its
    [install] section (a base run installs the base commit's own), and the runner builds."""
    try:
        data = tomllib.loads(config_text)
        data.pop("install", None)
        material = json.dumps(data, sort_keys=True, default=str)
    except tomllib.TOMLDecodeError:  # only a push run's own config can be broken: its key then matches no head's
        material = config_text
    return hashlib.sha256("\0".join([material, *builds]).encode()).hexdigest()[:24]


def _base_run(ctx: Planner, run: Run, config_text: str) -> Run:
    key = base_key(config_text, runner_builds(ctx))
    gate = "trusted" if run.gate == "trusted" else "approved"  # lifecycle.Gate: it may run, nothing more
    new = NewRun(repo_full_name=run.repo_full_name, repo_id=run.repo_id, installation_id=run.installation_id,
                 clone_url=run.clone_url, private=run.private, trigger=BASE_TRIGGER, trigger_ref=f"base/{key}",
                 pr_number=None, branch="", head_sha=run.base_sha or "", sender="", gate=gate,
                 config_text=config_text)
    base, created = ctx.store.create_run_if_absent(new)
    log.info("run %s: %s base run %s at %s", run.id, "new" if created else "reusing", base.id, new.head_sha[:12])
    return base


class UnknownInstall(Exception):
    """The base commit's own config cannot be read, so what its base run installs is unknown (and a guess would be
    no fact about the base): the job fails as an install failure (service/jobs/pipeline.py)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines = lines


def job_config(checkout: Checkout, mirror: Path, run: Run, suites: tuple[str, ...]) -> RepoConfig | list[ConfigProblem]:
    """The config a run's jobs run with: its head's; for a base run, the head's that planned it (run.config_text) with
    the base commit's own [install] section (UnknownInstall when that cannot be read)."""
    own_text = checkout.read_file(mirror, run.head_sha, CONFIG_FILE)
    if run.trigger != BASE_TRIGGER:
        return parse_repo_config(own_text, suites)
    config = parse_repo_config(run.config_text or None, suites)
    own = parse_repo_config(own_text, suites)
    if isinstance(own, list):
        raise UnknownInstall([f"the base commit's {CONFIG_FILE} has problems, so what it installs is unknown:",
                              *(problem.render() for problem in own)])
    if isinstance(config, list):
        return config
    return dataclasses.replace(config, requirements=own.requirements, install_package=own.install_package)


def plan_base(ctx: Planner, run: Run) -> None:
    """Ask for the planning of the pull request run's base run, if it still needs it: sent after the pull request's
    own jobs are queued, so an idle worker starts on them, not on the base (the reaper resends a lost message)."""
    base = ctx.store.get_run(run.base_run_id) if run.base_run_id else None
    if base is not None and base.trigger == BASE_TRIGGER and base.state == "planning":  # lifecycle.RunState
        ctx.queue.plan_run(base.id)
