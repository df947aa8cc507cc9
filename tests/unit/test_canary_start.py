"""The daily canary says, for every installed repository, what it did: a repository installed before any push of
its default branch was recorded has nothing to run at, and the operator reads that in the log rather than nothing."""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path

import pytest

from service.celery_app import create_celery
from service.config import Settings
from service.jobs import canary, lifecycle
from service.jobs.tasks import build_context
from service.store import NewRun

BASE_ENV = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}


def test_an_installed_repository_without_a_push_is_named_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.from_env({**BASE_ENV, "COMPILE_CI_DATA_DIR": str(tmp_path), "COMPILE_CI_RUNNER": "local",
                                  "COMPILE_CI_DATABASE_URL": f"sqlite:///{tmp_path / 'ci.db'}",
                                  "COMPILE_CI_TORCH_VERSIONS": "2.13, 2.14 advisory"})
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    store = ctx.store
    for name in ("octo/fresh", "octo/quiet", "octo/gone"):
        store.set_installed(name, 7, True)
    store.set_installed("octo/gone", 7, False)  # removed before it was ever pushed: nothing to say about it
    push, _ = store.create_run_if_absent(NewRun("octo/quiet", 1, 7, "https://x/octo/quiet.git", False, "push",
                                                "refs/heads/main", None, "main", "a" * 40, "me"))
    store.record_config(push.id, "[canary]\nenabled = false\n")
    lifecycle.plan(store, push, [], None)

    with caplog.at_level(logging.INFO, logger="service.jobs.canary"):
        said = canary.start_canaries(ctx, date(2026, 11, 26))

    assert said == ["octo/fresh: no canary (no default-branch push seen yet)",
                    "octo/quiet: no canary (opted out: [canary] enabled = false)"]
    assert "canary: octo/fresh: no canary (no default-branch push seen yet)" in caplog.messages
    assert not [r for r in store.recent_runs(10) if r.trigger == "canary"]
