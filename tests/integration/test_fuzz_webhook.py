"""Fuzzing POST /webhook with validly signed mutations of GitHub's real payloads (hypothesis, derandomized).

Properties, whatever the mutation: never a 5xx; a refused delivery changes no run; every stored run has
GitHub's shapes (a 40-hex sha, a possible repository name), so junk never became a run.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any
from urllib.parse import urlencode

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from service.config import Settings
from service.devkit.sandbox import deliveries
from service.intake.shapes import SHA, repository_name_problem
from service.intake.signature import sign
from service.store import Store
from service.web.app import create_app
from tests.conftest import APP_ID

SECRET = "test-webhook-secret"
REPO = {"full_name": "octo/zoo", "repo_id": 99, "clone_url": "https://github.com/octo/zoo.git", "installation_id": 7}
FUZZ = fuzz_settings(max_examples=250, derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _bases() -> list[tuple[str, dict[str, Any]]]:
    """One delivery per handled event, each of which makes or changes something when left intact."""
    pr = dict(number=5, head_ref="feature", base_sha="b" * 40, **REPO)
    return [
        ("pull_request", deliveries.pull_request_event("opened", head_sha="c" * 40, **pr)),
        ("pull_request", deliveries.pull_request_event("synchronize", head_sha="d" * 40, **pr)),
        ("push", deliveries.push_event(branch="main", before="0" * 40, after="e" * 40, **REPO)),
        ("issue_comment", deliveries.issue_comment_event("created", number=5, body="/rerun", commenter="octocat",
                                                         **REPO)),
        ("check_run", deliveries.check_run_event("rerequested", app_id=APP_ID, external_id="x", head_sha="a" * 40,
                                                 **REPO)),
        ("check_suite", deliveries.check_suite_event(app_id=APP_ID, head_sha="a" * 40, **REPO)),
        ("installation", deliveries.fixture("installation", "created")),
        ("installation_repositories", deliveries.fixture("installation_repositories", "added")),
        ("ping", deliveries.fixture("ping", "with-app_id")),
    ]


BASES = _bases()
# The fields handlers read: half the mutations aim here, the rest anywhere in the document.
READ = [tuple(int(p) if p.isdigit() else p for p in dotted.split(".")) for dotted in (
    "number", "repository.full_name", "repository.id", "repository.clone_url", "repository.default_branch",
    "repository.private", "installation.id", "installation", "sender.login", "pull_request.head.sha",
    "pull_request.head.ref", "pull_request.user.login", "pull_request.draft", "pull_request.author_association",
    "ref", "after", "deleted", "issue.number", "issue.pull_request", "issue.user.login", "comment.id",
    "comment.body", "comment.user.login", "comment.user.type", "check_run.external_id", "check_run.app.id",
    "check_suite.head_sha", "check_suite.app.id", "repositories", "repositories.0.full_name",
    "repositories_added.0.full_name", "action", "zen",
)]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found.extend(_paths(child, (*prefix, key)))
    return found


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# Values GitHub never sends where they land: wrong types, lone surrogates, junk shas, huge numbers, deep nesting.
any_text = st.text(st.characters(exclude_categories=()), max_size=60)
junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
    any_text, st.text("0123456789abcdefABCDEF", min_size=38, max_size=42), st.sampled_from(
        ["", "not-a-sha", "A" * 5000, "a" * 40, "octo/zoo", "../../etc", "refs/heads/main", "x\ud800", "\x00"]),
    st.integers(min_value=2, max_value=1200).map(_nested), st.dictionaries(any_text, any_text, max_size=3),
)


def _set(payload: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool) -> None:
    *parents, last = path
    node = payload
    for part in parents:
        node = node[part]
    if delete and isinstance(node, dict):
        del node[last]
    else:
        node[last] = value


@st.composite
def aimed_delivery(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """One field a handler reads, replaced (mostly by a string: the shapes under test are strings)."""
    event, base = draw(st.sampled_from(BASES))
    payload = copy.deepcopy(base)
    everywhere = _paths(payload)
    path = draw(st.sampled_from([path for path in READ if path in everywhere]))
    _set(payload, path, draw(st.one_of(any_text, junk)), delete=draw(st.integers(0, 9)) == 0)
    return _encoded(draw, event, json.dumps(payload).encode())


@st.composite
def mutated_delivery(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """Up to three changes anywhere in the document, and now and then damaged bytes."""
    event, base = draw(st.sampled_from(BASES))
    payload = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        everywhere = _paths(payload)
        if not everywhere:
            break
        _set(payload, draw(st.sampled_from(everywhere)), draw(junk), delete=draw(st.booleans()))
    body = json.dumps(payload).encode()
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        at = draw(st.integers(min_value=0, max_value=len(body) - 1))
        body = body[:at] + draw(st.binary(min_size=1, max_size=4)) + body[at + 1:]
    return _encoded(draw, event, body)


def _encoded(draw: st.DrawFn, event: str, body: bytes) -> tuple[str, bytes, str]:
    content_type = draw(st.sampled_from(["application/json", "application/x-www-form-urlencoded"]))
    if content_type != "application/json":
        body = urlencode({"payload": body.decode("utf-8", "surrogateescape")}, errors="surrogateescape").encode()
    return event, body, content_type


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


def _snapshot(store: Store) -> dict[str, tuple[str, str]]:
    return {run.id: (run.head_sha, run.cancelled_reason or "") for run in store.recent_runs(limit=10_000)}


def _check(client: FlaskClient, store: Store, delivery: tuple[str, bytes, str]) -> None:
    event, body, content_type = delivery
    before = _snapshot(store)
    response = client.post("/webhook", data=body, headers={
        "Content-Type": content_type, "X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(SECRET, body)})
    assert response.status_code < 500, response.get_data(as_text=True)
    after = _snapshot(store)
    if response.status_code >= 400:
        assert after == before, response.json
        assert "error" in response.json
    for sha, _reason in after.values():
        assert SHA.fullmatch(sha)
    for run in store.recent_runs(limit=10_000):
        assert repository_name_problem(run.repo_full_name) is None


@pytest.fixture
def store(client: FlaskClient, settings: Settings) -> Store:
    """The store, holding a legitimate run of the pull request that junk "synchronize" events must not cancel."""
    headers, body = deliveries.signed(SECRET, *BASES[0])
    assert client.post("/webhook", data=body, headers=headers).status_code == 202
    return Store(settings.database_url)


def test_junk_in_the_fields_handlers_read_is_refused(client: FlaskClient, store: Store) -> None:
    FUZZ(given(aimed_delivery())(lambda delivery: _check(client, store, delivery)))()


def test_mutations_anywhere_never_500(client: FlaskClient, store: Store) -> None:
    FUZZ(given(mutated_delivery())(lambda delivery: _check(client, store, delivery)))()
