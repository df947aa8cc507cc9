"""Hostile but validly signed deliveries, replayed: each one is refused with a 400 naming the field, and makes
nothing (no run, no queued message, no cancelled run, no installation row)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from flask.testing import FlaskClient
from werkzeug.wsgi import LimitedStream

from service.config import Settings
from service.devkit.sandbox.deliveries import fixture, signed
from service.intake.body import SlowBody, read_body
from service.intake.signature import sign
from service.store import Store
from service.web.app import create_app
from tests.integration.test_webhook import SECRET, deliver, opened, planned_runs


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


def runs(settings: Settings) -> list[Any]:
    return Store(settings.database_url).recent_runs()


def test_a_payload_nested_1000_deep_is_a_clean_400(client: FlaskClient, settings: Settings) -> None:
    payload = opened()
    body = json.dumps(payload)[:-1] + ', "deep": ' + "[" * 1000 + "]" * 1000 + "}"
    response = deliver(client, "pull_request", body.encode())
    assert response.status_code == 400
    assert "nested deeper than" in response.json["error"]
    assert runs(settings) == []


def test_nesting_under_the_decoders_limit_but_over_ours_is_refused_too(client: FlaskClient) -> None:
    payload = opened()
    nested: Any = 1
    for _ in range(40):  # GitHub nests about 7 deep; the decoder would accept ~1,000
        nested = [nested]
    payload["pull_request"]["labels"] = nested
    response = deliver(client, "pull_request", payload)
    assert response.status_code == 400
    assert "pull_request.labels" in response.json["error"]


@pytest.mark.parametrize("where", ["repository.full_name", "pull_request.head.sha", "sender.login",
                                   "pull_request.title"])
def test_a_lone_surrogate_anywhere_is_400_naming_the_field(client: FlaskClient, settings: Settings,
                                                           where: str) -> None:
    payload = opened()
    node = payload
    *parents, last = where.split(".")
    for part in parents:
        node = node[part]
    node[last] = "MARK"
    # json.dumps would escape a real surrogate the same way: \ud800 is what such a delivery carries.
    body = json.dumps(payload).replace('"MARK"', '"x\\ud800"').encode()
    response = deliver(client, "pull_request", body)
    assert response.status_code == 400
    assert where in response.json["error"] and "surrogate" in response.json["error"]
    assert runs(settings) == [] and planned_runs(settings) == []


@pytest.mark.parametrize("sha", ["", "not-a-sha", "A" * 5000, "A" * 40, "a" * 39, "a" * 41, "g" * 40])
def test_junk_head_shas_make_no_run_and_cancel_nothing(client: FlaskClient, settings: Settings, sha: str) -> None:
    assert deliver(client, "pull_request", opened(sha="a" * 40)).status_code == 202
    (legit,) = runs(settings)
    response = deliver(client, "pull_request", opened(sha=sha))
    assert response.status_code == 400
    assert "pull_request.head.sha" in response.json["error"]
    (still,) = runs(settings)
    assert still.id == legit.id and not still.cancelled_reason


@pytest.mark.parametrize(("full_name", "ok"), [
    ("octo/zoo", True), ("a-b/c.d_e-f", True), ("dependabot-/x", True),
    ("octo", False), ("octo/", False), ("/zoo", False), ("octo/zoo/extra", False), ("-octo/zoo", False),
    ("octo/..", False), ("o" * 40 + "/zoo", False), ("octo/" + "z" * 101, False), ("oc to/zoo", False),
    ("octo/zoo\n", False), ("oct\u00f6/zoo", False),
])
def test_repository_names_follow_githubs_grammar(client: FlaskClient, settings: Settings, full_name: str,
                                                 ok: bool) -> None:
    payload = opened()
    payload["repository"]["full_name"] = full_name
    response = deliver(client, "pull_request", payload)
    if ok:
        assert response.status_code == 202
        assert [r.repo_full_name for r in runs(settings)] == [full_name]
    else:
        assert response.status_code == 400
        assert "repository.full_name" in response.json["error"]
        assert runs(settings) == []


@pytest.mark.parametrize(("where", "value"), [
    ("number", 0), ("number", -5), ("number", 2**31), ("number", 10**30), ("number", True), ("number", 1.5),
    ("repository.id", 2**40), ("installation.id", -1), ("pull_request.head.ref", "a..b"),
    ("pull_request.head.ref", ""), ("pull_request.head.ref", "x" * 300), ("sender.login", "a b"),
    ("repository.clone_url", "file:///etc"), ("repository.clone_url", "https://x y"),
])
def test_other_fields_are_checked_before_anything_is_stored(client: FlaskClient, settings: Settings, where: str,
                                                            value: Any) -> None:
    payload = opened()
    node = payload
    *parents, last = where.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    response = deliver(client, "pull_request", payload)
    assert response.status_code == 400
    assert where in response.json["error"]
    assert runs(settings) == [] and planned_runs(settings) == []


def test_an_installation_naming_an_impossible_repository_records_nothing(client: FlaskClient,
                                                                         settings: Settings) -> None:
    payload = fixture("installation_repositories", "added")
    payload["repositories_added"].append({"full_name": "../../etc"})
    response = deliver(client, "installation_repositories", payload)
    assert response.status_code == 400
    assert "full_name" in response.json["error"]
    installation = payload["installation"]["id"]
    assert Store(settings.database_url).repos_of_installation(installation) == []


@pytest.mark.parametrize("header", ["sha256=\u00e9" + "0" * 63, "sha256=\u00ff\u00fe", "\u00e9"])
def test_a_non_ascii_signature_is_401(client: FlaskClient, settings: Settings, header: str) -> None:
    _, body = signed(SECRET, "pull_request", opened())
    response = client.post("/webhook", data=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": header,
        "Content-Type": "application/json"})
    assert response.status_code == 401
    assert runs(settings) == []


def test_odd_event_and_delivery_headers_are_400(client: FlaskClient) -> None:
    for event, delivery in [("pull_request", "x" * 65), ("pull_request", "a b"), ("Pull Request", "d-1")]:
        headers, body = signed(SECRET, event, opened(), "d-1")
        headers["X-GitHub-Delivery"] = delivery
        assert client.post("/webhook", data=body, headers=headers).status_code == 400


def _form(payload: dict[str, Any]) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def test_form_encoded_deliveries_are_accepted(client: FlaskClient, settings: Settings) -> None:
    body = _form(opened())
    response = client.post("/webhook", data=body, headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": "d-form", "X-Hub-Signature-256": sign(SECRET, body)})
    assert response.status_code == 202
    assert [r.head_sha for r in runs(settings)] == ["a" * 40]


def test_form_deliveries_are_signed_over_the_raw_form_and_validated_alike(client: FlaskClient,
                                                                          settings: Settings) -> None:
    body = _form(opened())
    signed_json = sign(SECRET, json.dumps(opened()).encode())  # the signature of the payload, not of the form
    headers = {"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "pull_request",
               "X-GitHub-Delivery": "d-form"}
    assert client.post("/webhook", data=body, headers={**headers, "X-Hub-Signature-256": signed_json}
                       ).status_code == 401
    for junk in [_form(opened(sha="nope")), b"payload=%7B", b"payload=1&payload=2", b"other=1", b"payload=%ED%A0%80"]:
        response = client.post("/webhook", data=junk, headers={**headers, "X-Hub-Signature-256": sign(SECRET, junk)})
        assert response.status_code == 400, junk
    assert runs(settings) == []


def test_a_trickled_body_is_cut_at_the_deadline() -> None:
    """The slow-client attack on the body, against a real socket: one byte every 0.1 s of 1,000 announced."""
    server, attacker = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                attacker.send(b"x")
            except OSError:
                return
            stop.wait(0.1)

    sender = threading.Thread(target=trickle)
    sender.start()
    started = time.monotonic()
    try:
        with pytest.raises(SlowBody):
            read_body(LimitedStream(server.makefile("rb"), 1000), {"gunicorn.socket": server}, deadline_s=1.0)
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        sender.join()
        server.close()
        attacker.close()


def test_a_body_in_time_is_read_whole() -> None:
    server, client_sock = socket.socketpair()
    sender = threading.Thread(target=client_sock.sendall, args=(b"y" * 300_000,))
    sender.start()
    body = read_body(LimitedStream(server.makefile("rb"), 300_000), {"gunicorn.socket": server}, deadline_s=5.0)
    sender.join()
    assert body == b"y" * 300_000
    server.close()
    client_sock.close()
