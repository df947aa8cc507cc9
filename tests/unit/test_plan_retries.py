"""A head that cannot be fetched is concluded within MAX_FETCH_S of its event, retried only while its error can pass
(service/jobs/plan_retries.py): the whole retry schedule, walked try by try, for each kind of error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from runners.checkout import CheckoutError
from service.config import Settings
from service.github.api import TransientGitHubError
from service.jobs.plan_retries import MAX_FETCH_S, MISSING_GRACE_S, TRY_S, next_try
from tests.conftest import make_settings

FORCE_PUSHED = CheckoutError("git fetch failed: fatal: remote error: upload-pack: not our ref c0ffee")
NETWORK = CheckoutError("git fetch failed: fatal: unable to access: Could not resolve host: github.com")
GONE = CheckoutError("git fetch failed: remote: Repository not found.")


def schedule(settings: Settings, error: Exception, try_s: float = 2.0) -> list[float]:
    """When each try happens (seconds after the event), each taking `try_s`, until one concludes."""
    at, tries, when = 0.0, 0, []
    while True:
        at += try_s
        tries += 1
        when.append(at)
        wait = next_try(settings, tries, at, error)
        if wait is None:
            return when
        at += wait


@pytest.fixture
def defaults(tmp_path: Path, app_keys: tuple[str, str]) -> Settings:
    return make_settings(tmp_path, "redis://127.0.0.1:1/0", "http://127.0.0.1:1", app_keys[0])


@pytest.mark.parametrize("try_s", [0.5, 2.0, TRY_S])
def test_an_error_that_can_pass_is_retried_and_concluded_within_two_minutes(defaults: Settings, try_s: float) -> None:
    for error in (NETWORK, TransientGitHubError("GitHub answered 502")):
        when = schedule(defaults, error, try_s)
        assert len(when) >= 5 and when[-1] <= MAX_FETCH_S, (error, when)  # tried on until the end, not past it
        assert when[-1] >= MAX_FETCH_S - TRY_S - defaults.plan_retry_seconds - try_s, when  # the room is used


def test_a_commit_git_cannot_find_is_retried_only_within_its_grace(defaults: Settings) -> None:
    when = schedule(defaults, FORCE_PUSHED)
    assert 2 <= len(when) and when[-1] <= MISSING_GRACE_S + 40 and when[-2] < MISSING_GRACE_S, when


def test_an_error_no_retry_mends_concludes_at_once(defaults: Settings) -> None:
    assert schedule(defaults, GONE) == [2.0]


def test_github_asking_for_more_than_is_left_concludes_at_once(defaults: Settings) -> None:
    error = TransientGitHubError("rate limited")
    error.retry_after = 600.0  # type: ignore[attr-defined]
    assert next_try(defaults, 1, 5.0, error) is None
    error.retry_after = 30.0  # type: ignore[attr-defined]
    assert next_try(defaults, 1, 5.0, error) == 30.0  # never shorter than GitHub asked


def test_the_configured_number_of_tries_still_caps_the_chain(defaults: Settings) -> None:
    assert len(schedule(dataclasses.replace(defaults, plan_tries=3), NETWORK)) == 3
