"""What `compile-ci beat` sends: the reaper on its interval, and the daily torch canary at the deployment's
COMPILE_CI_CANARY_HOUR (UTC) to the github queue, where the workers that can plan runs take it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from celery.schedules import crontab

from service.celery_app import REAP_JOBS, START_CANARIES, create_celery
from service.config import Settings

BASE_ENV = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}


def _schedule(tmp_path: Path, **env: str) -> dict[str, dict[str, object]]:
    settings = Settings.from_env({**BASE_ENV, "COMPILE_CI_DATA_DIR": str(tmp_path),
                                  **{f"COMPILE_CI_{k}": v for k, v in env.items()}})
    return create_celery(settings).conf.beat_schedule


def _next_fire(entry: dict[str, object], now: datetime) -> datetime:
    schedule = entry["schedule"]
    assert isinstance(schedule, crontab)
    return now + schedule.remaining_estimate(now)


def test_the_canary_runs_daily_at_the_deployments_hour_on_the_github_queue(tmp_path: Path) -> None:
    canary = _schedule(tmp_path, CANARY_HOUR="17")["torch-canary"]
    assert canary["task"] == START_CANARIES
    assert canary["options"] == {"queue": "github", "expires": 3600}
    schedule = canary["schedule"]
    assert isinstance(schedule, crontab)
    assert (schedule.hour, schedule.minute) == ({17}, {0})
    # Once a day: after today's 17:00 the next one is tomorrow's.
    ran = datetime(2026, 3, 4, 17, 0, 5, tzinfo=UTC)
    schedule.nowfun = lambda: ran
    assert _next_fire(canary, ran) == datetime(2026, 3, 5, 17, 0, tzinfo=UTC)


def test_the_canary_hour_defaults_to_three_and_the_reaper_keeps_its_interval(tmp_path: Path) -> None:
    beat = _schedule(tmp_path, REAPER_INTERVAL_SECONDS="45")
    schedule = beat["torch-canary"]["schedule"]
    assert isinstance(schedule, crontab) and (schedule.hour, schedule.minute) == ({3}, {0})
    assert beat["reap-jobs"] == {"task": REAP_JOBS, "schedule": 45.0, "options": {"queue": "github", "expires": 45}}
