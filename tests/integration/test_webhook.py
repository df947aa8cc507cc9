"""POST /webhook with GitHub's real payloads, signed, against real Redis and SQLite."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from service.config import Settings
from service.devkit.sandbox.deliveries import fixture, pull_request_event, push_event, signed
from service.store import Store
from service.web.app import create_app

SECRET = "test-webhook-secret"
REPO = {"full_name": "octo/zoo", "repo_id": 99, "clone_url": "https://github.com/octo/zoo.git", "installation_id": 7}


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


def deliver(client: FlaskClient, event: str, payload: Any, delivery: str | None = None, secret: str = SECRET):
    headers, body = signed(secret, event, payload, delivery)
    return client.post("/webhook", data=body, headers=headers)


def opened(number: int = 5, sha: str = "a" * 40, **extra: Any) -> dict[str, Any]:
    return pull_request_event("opened", number=number, head_sha=sha, head_ref="feature", base_sha="b" * 40,
                              **{**REPO, **extra})


def planned_runs(settings: Settings) -> list[str]:
    """Run ids waiting on the github queue: what the webhook handed to the workers."""
    messages = [json.loads(m) for m in redis.Redis.from_url(settings.redis_url).lrange("github", 0, -1)]
    # Celery's message body is base64 JSON of (args, kwargs, embed); args is [run_id].
    return [json.loads(base64.b64decode(m["body"]))[0][0] for m in messages]


def test_opened_pull_request_creates_one_run_and_queues_its_planning(client: FlaskClient, settings: Settings) -> None:
    response = deliver(client, "pull_request", opened())
    assert response.status_code == 202
    runs = Store(settings.database_url).recent_runs()
    assert [(r.repo_full_name, r.pr_number, r.head_sha, r.installation_id) for r in runs] == [
        ("octo/zoo", 5, "a" * 40, 7)]
    assert response.json["runs"] == [runs[0].id]
    assert planned_runs(settings) == [runs[0].id]


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
def test_every_action_that_brings_new_code_runs(client: FlaskClient, settings: Settings, action: str) -> None:
    payload = pull_request_event(action, number=3, head_sha="c" * 40, head_ref="f", base_sha="b" * 40, **REPO)
    assert deliver(client, "pull_request", payload).status_code == 202
    assert len(planned_runs(settings)) == 1


def test_redelivery_is_handled_once(client: FlaskClient, settings: Settings) -> None:
    first = deliver(client, "pull_request", opened(), delivery="d-1")
    again = deliver(client, "pull_request", opened(), delivery="d-1")
    assert (first.status_code, again.status_code) == (202, 200)
    assert "duplicate" in again.json["message"]
    assert len(planned_runs(settings)) == 1


def test_same_commit_under_a_new_delivery_id_maps_onto_the_same_run(client: FlaskClient, settings: Settings) -> None:
    deliver(client, "pull_request", opened(), delivery="d-1")
    deliver(client, "pull_request", opened(), delivery="d-2")
    assert len(Store(settings.database_url).recent_runs()) == 1


def test_drafts_wait(client: FlaskClient, settings: Settings) -> None:
    response = deliver(client, "pull_request", opened(draft=True))
    assert response.status_code == 202
    assert "draft" in response.json["messages"][0]
    assert planned_runs(settings) == []


def test_push_to_the_default_branch_runs_the_baseline(client: FlaskClient, settings: Settings) -> None:
    payload = push_event(branch="main", before="0" * 40, after="d" * 40, **REPO)
    assert deliver(client, "push", payload).status_code == 202
    (run,) = Store(settings.database_url).recent_runs()
    assert (run.trigger, run.branch, run.head_sha, run.pr_number) == ("push", "main", "d" * 40, None)


def test_tag_and_other_branch_pushes_run_nothing(client: FlaskClient, settings: Settings) -> None:
    tag = fixture("push", "with-installation")
    assert deliver(client, "push", tag).status_code == 202
    other = push_event(branch="main", before="0" * 40, after="d" * 40, **REPO)
    other["ref"] = "refs/heads/feature"
    assert deliver(client, "push", other).status_code == 202
    assert planned_runs(settings) == []


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, 401), ({"X-Hub-Signature-256": "garbage"}, 401)],
    ids=["missing", "wrong", "malformed"],
)
def test_bad_signatures_are_401_and_change_nothing(client: FlaskClient, settings: Settings, headers: dict,
                                                  status: int) -> None:
    _, body = signed(SECRET, "pull_request", opened())
    response = client.post("/webhook", data=body, headers={"X-GitHub-Event": "pull_request",
                                                           "X-GitHub-Delivery": "x", **headers})
    assert response.status_code == status
    assert Store(settings.database_url).recent_runs() == []


def test_malformed_json_is_400(client: FlaskClient) -> None:
    assert deliver(client, "pull_request", b'{"action": "opened",').status_code == 400
    assert deliver(client, "pull_request", b"[1, 2]").status_code == 400


def test_payload_missing_what_the_handler_needs_is_400_and_can_be_redelivered(client: FlaskClient,
                                                                              settings: Settings) -> None:
    no_installation = fixture("pull_request", "ready_for_review")  # a repository webhook: no installation
    response = deliver(client, "pull_request", no_installation, delivery="d-9")
    assert response.status_code == 400
    assert "installation.id" in response.json["error"]
    # The failed delivery was not claimed: a fixed redelivery with the same id is processed.
    assert deliver(client, "pull_request", opened(), delivery="d-9").status_code == 202


def test_ping_is_200_and_unhandled_events_are_204(client: FlaskClient) -> None:
    assert deliver(client, "ping", fixture("ping", "with-app_id")).status_code == 200
    assert deliver(client, "pull_request", fixture("pull_request", "labeled")).status_code == 204
    assert deliver(client, "check_suite", fixture("check_suite", "completed")).status_code == 204
