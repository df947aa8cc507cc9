"""The GitHub emulator, driven by real PyGithub: auth, check runs, strictness, pagination, faults, control routes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import github
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from service.devkit.github_emulator import GitHubEmulator, OpenAPISpec, locate_spec, routes
from service.devkit.github_emulator.spec import SPEC_ENV, to_json_schema

APP_ID = 4242
INSTALLATION_ID = 7
REPO = "octo/widgets"
SHA = "a" * 40
REPO_ROOT = Path(__file__).resolve().parents[2]


def _private_pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def public_pem(app_key: rsa.RSAPrivateKey) -> bytes:
    return app_key.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture
def emulator(public_pem: bytes) -> Iterator[GitHubEmulator]:
    with GitHubEmulator(APP_ID, public_pem) as emu:
        emu.add_installation(INSTALLATION_ID, [REPO])
        emu.add_pull(REPO, 5, SHA, "feature", "main", "alice", "CONTRIBUTOR", files=["a.py", "b.py"])
        yield emu
        assert emu.errors == []


def app_integration(emulator: GitHubEmulator, auth: github.Auth.AppAuth) -> github.GithubIntegration:
    return github.GithubIntegration(auth=auth, base_url=emulator.url, retry=None, seconds_between_requests=0,
                                    seconds_between_writes=0)


@pytest.fixture
def integration(emulator: GitHubEmulator, app_key: rsa.RSAPrivateKey) -> github.GithubIntegration:
    # Signing with the loaded key object: PyGithub re-parses a PEM for every JWT (~40 ms of key checks).
    def sign(payload: dict[str, str | int]) -> str:
        return jwt.encode(payload, app_key, algorithm="RS256")

    return app_integration(emulator, github.Auth.AppAuth(APP_ID, sign_func=sign))


@pytest.fixture
def token(integration: github.GithubIntegration) -> str:
    return integration.get_access_token(INSTALLATION_ID).token


@pytest.fixture
def gh(emulator: GitHubEmulator, token: str) -> github.Github:
    return github.Github(auth=github.Auth.Token(token), base_url=emulator.url, lazy=True,
                         seconds_between_requests=0, seconds_between_writes=0, retry=None)


@pytest.fixture
def repo(gh: github.Github) -> Any:
    return gh.get_repo(REPO)


def raw(emulator: GitHubEmulator, method: str, path: str, body: Any = None,
        authorization: str | None = None) -> tuple[int, Any]:
    """One request without PyGithub, for bodies PyGithub would never send."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(emulator.url + path, data=data, method=method)
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"null")


def github_paths(emulator: GitHubEmulator) -> list[str]:
    return [f"{method} {path}" for method, path, _ in emulator.requests]


ANNOTATION = {"path": "t.py", "start_line": 3, "end_line": 3, "annotation_level": "failure", "message": "boom"}


def test_check_run_lifecycle_uses_only_subset_routes(emulator: GitHubEmulator, repo: Any) -> None:
    created = repo.create_check_run(name="cpu / inductor", head_sha=SHA, status="queued", external_id="job-1",
                                    details_url="http://x/jobs/1", output={"title": "t", "summary": "s"})
    run = repo.get_check_run(created.id)
    run.edit(status="in_progress")
    run.edit(status="completed", conclusion="failure",
             output={"title": "1 failed", "summary": "table", "annotations": [ANNOTATION]})
    listed = list(repo.get_commit(SHA).get_check_runs())

    assert github_paths(emulator) == [
        f"POST /app/installations/{INSTALLATION_ID}/access_tokens",
        "POST /repos/octo/widgets/check-runs",
        "PATCH /repos/octo/widgets/check-runs/1",
        "PATCH /repos/octo/widgets/check-runs/1",
        f"GET /repos/octo/widgets/commits/{SHA}/check-runs",
    ]
    assert (created.id, created.external_id, created.details_url) == (1, "job-1", "http://x/jobs/1")
    assert (run.status, run.conclusion, run.output.annotations_count) == ("completed", "failure", 1)
    assert [(r.id, r.name, r.status) for r in listed] == [(1, "cpu / inductor", "completed")]
    [stored] = emulator.check_runs(REPO)
    assert stored["history"] == [("queued", None), ("in_progress", None), ("completed", "failure")]
    assert stored["annotations"] == [ANNOTATION] and stored["completed_at"] is not None
    assert emulator.requests[0][2] == {"permissions": {}}


def test_patches_replace_output_and_append_annotations(emulator: GitHubEmulator, repo: Any) -> None:
    run = repo.create_check_run(name="cuda", head_sha=SHA)
    first = [{**ANNOTATION, "start_line": n, "end_line": n} for n in range(1, 51)]
    run.edit(output={"title": "part 1", "summary": "s1", "text": "long", "annotations": first})
    run.edit(conclusion="success", output={"title": "part 2", "summary": "s2", "annotations": [ANNOTATION]})

    [stored] = emulator.check_runs()
    assert len(stored["annotations"]) == 51 and stored["annotations"][-1] == ANNOTATION
    assert stored["output"]["title"] == "part 2" and stored["output"]["text"] is None
    assert stored["output"]["annotations_count"] == 51
    # "Providing conclusion will automatically set the status parameter to completed."
    assert stored["history"][-1] == ("completed", "success")


def test_list_for_ref_paginates_like_github(emulator: GitHubEmulator, repo: Any) -> None:
    for n in range(120):
        repo.create_check_run(name=f"suite-{n:03}", head_sha=SHA)
    emulator.requests.clear()

    runs = repo.get_commit(SHA).get_check_runs()
    assert [r.name for r in runs] == [f"suite-{n:03}" for n in range(120)]
    assert runs.totalCount == 120
    pages = [path for _, path, _ in emulator.requests]
    assert pages[0] == f"/repos/{REPO}/commits/{SHA}/check-runs"
    assert pages[1:4] == [f"/repos/{REPO}/commits/{SHA}/check-runs?page={n}" for n in (2, 3, 4)]


def test_list_for_ref_filters(emulator: GitHubEmulator, repo: Any) -> None:
    repo.create_check_run(name="cpu", head_sha=SHA, conclusion="failure")
    repo.create_check_run(name="cpu", head_sha=SHA, status="in_progress")
    repo.create_check_run(name="cuda", head_sha=SHA)
    commit = repo.get_commit(SHA)

    assert [r.id for r in commit.get_check_runs()] == [2, 3]
    assert [r.id for r in commit.get_check_runs(filter="all")] == [1, 2, 3]
    assert [r.id for r in commit.get_check_runs(check_name="cpu", filter="all")] == [1, 2]
    assert [r.id for r in commit.get_check_runs(status="queued")] == [3]
    assert [r.id for r in repo.get_commit("feature").get_check_runs()] == [2, 3]


def test_unknown_route_is_a_404_and_an_error(emulator: GitHubEmulator, repo: Any) -> None:
    with pytest.raises(github.UnknownObjectException):
        repo.get_branch("main")
    assert emulator.take_errors() == ["unknown route: GET /repos/octo/widgets/branches/main"]


BAD_CREATE_BODIES = {
    "unknown field": {"name": "x", "head_sha": SHA, "stauts": "queued"},
    "output typo": {"name": "x", "head_sha": SHA, "output": {"title": "t", "summery": "s"}},
    "completed without conclusion": {"name": "x", "head_sha": SHA, "status": "completed"},
    "Actions-only status": {"name": "x", "head_sha": SHA, "status": "waiting"},
    "stale conclusion": {"name": "x", "head_sha": SHA, "conclusion": "stale"},
    "too many annotations": {"name": "x", "head_sha": SHA,
                             "output": {"title": "t", "summary": "s", "annotations": [ANNOTATION] * 51}},
    "columns across lines": {"name": "x", "head_sha": SHA, "output": {"title": "t", "summary": "s", "annotations": [
        {**ANNOTATION, "end_line": 4, "start_column": 1}]}},
    "summary too long": {"name": "x", "head_sha": SHA, "output": {"title": "t", "summary": "s" * 65536}},
    "missing head_sha": {"name": "x"},
}


@pytest.mark.parametrize("body", BAD_CREATE_BODIES.values(), ids=BAD_CREATE_BODIES.keys())
def test_invalid_create_body_is_422_and_an_error(emulator: GitHubEmulator, token: str, body: Any) -> None:
    status, answer = raw(emulator, "POST", f"/repos/{REPO}/check-runs", body, f"token {token}")
    assert status == 422 and answer["message"] == "Validation Failed" and answer["errors"]
    [error] = emulator.take_errors()
    assert error.startswith(f"POST /repos/{REPO}/check-runs: invalid request")
    assert emulator.check_runs() == []


def test_invalid_patch_through_pygithub(emulator: GitHubEmulator, repo: Any) -> None:
    run = repo.create_check_run(name="cpu", head_sha=SHA)
    with pytest.raises(github.GithubException) as refused:
        run.edit(output={"summary": "no title"})
    assert refused.value.status == 422
    assert "output/title" in emulator.take_errors()[0]
    assert emulator.check_runs()[0]["history"] == [("queued", None)]


def _jwt(key: rsa.RSAPrivateKey, **claims: Any) -> str:
    now = int(time.time())
    return jwt.encode({"iat": now - 60, "exp": now + 300, "iss": str(APP_ID), **claims}, key, algorithm="RS256")


def test_bad_app_jwts_are_401(emulator: GitHubEmulator, app_key: rsa.RSAPrivateKey) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = f"/app/installations/{INSTALLATION_ID}/access_tokens"
    cases = {
        "missing": None,
        "other key": f"Bearer {_jwt(other_key)}",
        "other app": f"Bearer {_jwt(app_key, iss='1')}",
        "expired": f"Bearer {_jwt(app_key, iat=int(time.time()) - 900, exp=int(time.time()) - 300)}",
        "too long-lived": f"Bearer {_jwt(app_key, exp=int(time.time()) + 3600)}",
        "HS256": f"Bearer {jwt.encode({'iss': str(APP_ID), 'iat': 0, 'exp': 2**40}, 'x' * 32)}",
    }
    answers = {name: raw(emulator, "POST", path, {}, header)[0] for name, header in cases.items()}
    assert answers == dict.fromkeys(cases, 401)
    assert emulator.errors == [] and emulator.state.tokens == {}


def test_pygithub_app_auth_with_a_pem(emulator: GitHubEmulator, app_key: rsa.RSAPrivateKey) -> None:
    integration = app_integration(emulator, github.Auth.AppAuth(APP_ID, _private_pem(app_key)))
    assert integration.get_access_token(INSTALLATION_ID).token.startswith("ghs_")


def test_pygithub_with_the_wrong_key_gets_401(emulator: GitHubEmulator) -> None:
    other = _private_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    integration = app_integration(emulator, github.Auth.AppAuth(APP_ID, other))
    with pytest.raises(github.GithubException) as refused:
        integration.get_access_token(INSTALLATION_ID)
    assert refused.value.status == 401


def test_tokens_are_scoped_to_their_installation(emulator: GitHubEmulator, token: str,
                                                 integration: github.GithubIntegration) -> None:
    emulator.add_repo("octo/other")
    assert raw(emulator, "GET", "/repos/octo/other", None, f"token {token}")[0] == 404
    assert raw(emulator, "GET", f"/repos/{REPO}", None, "token ghs_forged")[0] == 401
    assert raw(emulator, "GET", f"/repos/{REPO}", None, None)[0] == 401
    assert raw(emulator, "GET", f"/repos/{REPO}", None, f"Bearer {token}")[0] == 200
    with pytest.raises(github.UnknownObjectException):
        integration.get_access_token(99)


def test_scoped_tokens(emulator: GitHubEmulator, app_key: rsa.RSAPrivateKey) -> None:
    emulator.add_installation(INSTALLATION_ID, ["octo/gadgets"])
    app_jwt = f"Bearer {_jwt(app_key)}"
    path = f"/app/installations/{INSTALLATION_ID}/access_tokens"
    status, answer = raw(emulator, "POST", path, {"repositories": ["widgets"]}, app_jwt)
    assert status == 201
    assert raw(emulator, "GET", f"/repos/{REPO}", None, f"token {answer['token']}")[0] == 200
    assert raw(emulator, "GET", "/repos/octo/gadgets", None, f"token {answer['token']}")[0] == 404
    assert raw(emulator, "POST", path, {"repositories": ["nope"]}, app_jwt)[0] == 422


def test_answers_that_break_the_spec_are_emulator_bugs(emulator: GitHubEmulator,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(routes.ROUTES, "rate-limit/get", lambda state, call: routes.Reply(200, {"rate": "x"}))
    assert raw(emulator, "GET", "/rate_limit")[0] == 200
    assert [error.split(":")[0] for error in emulator.take_errors()] == ["emulator bug", "emulator bug"]

    def crash(state: Any, call: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setitem(routes.ROUTES, "rate-limit/get", crash)
    assert raw(emulator, "GET", "/rate_limit")[0] == 500
    assert emulator.take_errors() == ["emulator crashed on GET /rate_limit: KeyError('oops')"]


def test_unparsable_json_is_400_and_an_error(emulator: GitHubEmulator, token: str) -> None:
    request = urllib.request.Request(f"{emulator.url}/repos/{REPO}/check-runs", data=b"{name", method="POST",
                                     headers={"Authorization": f"token {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    refused.value.close()
    assert refused.value.code == 400
    assert emulator.take_errors() == [f"POST /repos/{REPO}/check-runs: request body is not JSON"]


def test_stop_hangs_up_kept_alive_connections(public_pem: bytes) -> None:
    emulator = GitHubEmulator(APP_ID, public_pem).start()
    connection = http.client.HTTPConnection(emulator.url.removeprefix("http://"))
    connection.request("GET", "/_emulator/errors")
    assert connection.getresponse().read() == b"[]"
    emulator.stop()
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        connection.request("GET", "/_emulator/errors")
        connection.getresponse()
    connection.close()


def test_app_routes(emulator: GitHubEmulator, integration: github.GithubIntegration) -> None:
    assert integration.get_app().id == APP_ID
    installation = integration.get_repo_installation("octo", "widgets")
    assert (installation.id, installation.app_id) == (INSTALLATION_ID, APP_ID)
    token = integration.get_access_token(INSTALLATION_ID)
    assert token.token.startswith("ghs_") and token.expires_at.tzinfo is not None


def test_repository_pull_and_status_routes(emulator: GitHubEmulator, repo: Any, gh: github.Github) -> None:
    pull = repo.get_pull(5)
    assert (pull.head.sha, pull.head.ref, pull.base.ref, pull.user.login) == (SHA, "feature", "main", "alice")
    assert pull.author_association == "CONTRIBUTOR"
    assert [f.filename for f in pull.get_files()] == ["a.py", "b.py"]
    status = repo.get_commit(SHA).create_status("pending", target_url="http://x/1", context="compile-ci")
    assert status.state == "pending"
    assert emulator.statuses[0]["context"] == "compile-ci"
    eager = github.Github(auth=github.Auth.Token(token_of(gh)), base_url=emulator.url, retry=None,
                          seconds_between_requests=0)
    assert eager.get_repo(REPO).default_branch == "main"
    assert gh.get_rate_limit().resources.core.limit == 5000


def token_of(gh: github.Github) -> str:
    header: dict[str, str] = {}
    gh.requester.auth.authentication(header)  # type: ignore[union-attr]
    return header["Authorization"].split(" ", 1)[1]


@pytest.mark.parametrize(("role", "permission"),
                         [("admin", "admin"), ("maintain", "write"), ("write", "write"), ("triage", "read"),
                          ("read", "read"), (None, "none")])
def test_collaborator_permission(emulator: GitHubEmulator, repo: Any, role: str | None, permission: str) -> None:
    if role is not None:
        emulator.set_permission(REPO, "bob", role)
    assert repo.get_collaborator_permission("bob") == permission


def test_comment_and_reaction(emulator: GitHubEmulator, repo: Any) -> None:
    comment = repo.get_issue(5).create_comment("Refused: /rerun takes cpu or cuda")
    assert comment.create_reaction("+1").content == "+1"
    comment.create_reaction("+1")
    assert emulator.comments == [{"repository": REPO, "issue_number": 5, "id": comment.id,
                                  "body": "Refused: /rerun takes cpu or cuda"}]
    assert emulator.reactions == [{"repository": REPO, "comment_id": comment.id, "content": "+1", "id": 1}]
    assert comment.user.login == "compile-ci[bot]"


def test_check_suites(emulator: GitHubEmulator, repo: Any) -> None:
    suite = repo.create_check_suite(SHA)
    assert repo.create_check_suite(SHA).id == suite.id
    suite.rerequest()
    assert emulator.check_suites() == [{"id": suite.id, "repository": REPO, "head_sha": SHA, "rerequests": 1}]


def test_applied_then_502(emulator: GitHubEmulator, repo: Any) -> None:
    emulator.inject("POST", r"/check-runs$", 502, apply=True)
    with pytest.raises(github.GithubException) as failed:
        repo.create_check_run(name="cpu", head_sha=SHA)
    assert failed.value.status == 502
    assert [run["name"] for run in emulator.check_runs()] == ["cpu"]
    assert repo.create_check_run(name="cpu", head_sha=SHA).id == 2


def test_injected_rate_limit_not_applied(emulator: GitHubEmulator, repo: Any) -> None:
    reset = str(int(time.time()) + 60)
    emulator.inject("PATCH", r"/check-runs/\d+$", 403, times=2,
                    headers={"Retry-After": "7", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset},
                    body={"message": "API rate limit exceeded for installation ID 7."})
    run = repo.create_check_run(name="cpu", head_sha=SHA)
    for _ in range(2):
        with pytest.raises(github.RateLimitExceededException) as limited:
            run.edit(status="in_progress")
        assert limited.value.headers["retry-after"] == "7"
    run.edit(status="in_progress")
    assert emulator.check_runs()[0]["history"] == [("queued", None), ("in_progress", None)]


def test_control_routes_seed_and_read(emulator: GitHubEmulator, repo: Any) -> None:
    assert raw(emulator, "POST", "/_emulator/installations", {"installation_id": 8, "repos": ["o/r"]})[0] == 201
    pull = {"full_name": "o/r", "number": 1, "head_sha": SHA, "head_ref": "f", "base_ref": "main",
            "author_login": "eve", "author_association": "NONE"}
    assert raw(emulator, "POST", "/_emulator/pulls", pull)[0] == 201
    permission = {"full_name": "o/r", "login": "eve", "role": "read"}
    assert raw(emulator, "POST", "/_emulator/permissions", permission)[0] == 201
    assert raw(emulator, "POST", "/_emulator/pulls", {"number": 1})[0] == 400
    repo.create_check_run(name="cpu", head_sha=SHA)
    status, runs = raw(emulator, "GET", f"/_emulator/check-runs?repository={REPO}")
    assert status == 200 and [run["name"] for run in runs] == ["cpu"]
    assert raw(emulator, "GET", "/_emulator/errors") == (200, [])
    assert emulator.state.installation_for("o/r") == 8 and emulator.state.role_of("o/r", "eve") == "read"
    assert all(not path.startswith("/_emulator/") for _, path, _ in emulator.requests)


def test_spec_is_located_outside_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert locate_spec() == REPO_ROOT.parent / "shared/fixtures/github/openapi-ci-subset.json"
    monkeypatch.setenv(SPEC_ENV, str(tmp_path / "spec.json"))
    assert locate_spec() == tmp_path / "spec.json"
    assert locate_spec("x.json") == Path("x.json")


def test_spec_matching_examples_and_nullable() -> None:
    spec = OpenAPISpec()
    assert spec.match("PATCH", "/repos/o/r/check-runs/12") == ("checks/update",
                                                               {"owner": "o", "repo": "r", "check_run_id": "12"})
    assert spec.match("PATCH", "/repos/o/r/check-runs/twelve") is None
    assert spec.match("DELETE", "/repos/o/r") is None
    assert spec.example("check-run") is not spec.example("check-run")
    assert to_json_schema({"type": "string", "nullable": True}) == {"type": ["string", "null"]}
    assert spec.validate_query("checks/list-for-ref", {"per_page": ["x"], "sort": ["1"]}) == [
        "query parameter 'per_page': 'x' is not an integer", "unknown query parameter 'sort'"]


def test_main_serves_until_sigterm(public_pem: bytes, tmp_path: Path) -> None:
    key_file = tmp_path / "app.pem"
    key_file.write_bytes(public_pem)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "service.devkit.github_emulator", "--port", "0", "--app-id", str(APP_ID),
               "--public-key-file", str(key_file)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT) as process:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening http://127.0.0.1:")
        url = line.split()[1]
        with urllib.request.urlopen(f"{url}/_emulator/errors") as response:
            assert json.loads(response.read()) == []
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_the_supplementary_spec_adds_editing_a_comment_and_nothing_else(emulator: GitHubEmulator, repo: Any,
                                                                       gh: github.Github) -> None:
    comment = repo.get_issue(5).create_comment("first")
    url = f"{repo.url}/issues/comments/{comment.id}"
    _headers, data = gh.requester.requestJsonAndCheck("PATCH", url, input={"body": "edited in place"})
    assert (data["id"], data["body"]) == (comment.id, "edited in place")
    assert [c["body"] for c in emulator.comments] == ["edited in place"]
    with pytest.raises(github.GithubException) as refused:  # the spec's schema: body is required, a string
        gh.requester.requestJsonAndCheck("PATCH", url, input={"body": 5})
    assert refused.value.status == 422
    with pytest.raises(github.UnknownObjectException):
        gh.requester.requestJsonAndCheck("PATCH", f"{repo.url}/issues/comments/999", input={"body": "x"})
    emulator.take_errors()
    with pytest.raises(github.UnknownObjectException):  # deleting is in neither file: still an unknown route
        gh.requester.requestJsonAndCheck("DELETE", url)
    assert emulator.take_errors() == [f"unknown route: DELETE /repos/{REPO}/issues/comments/{comment.id}"]
