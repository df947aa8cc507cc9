"""Routing of (event, action) to handlers, and merging of per-concern routers."""

import pytest

from service.intake.router import BadPayload, Event, Outcome, Router, field


def _router(calls: list[str], name: str, event: str, *actions: str) -> Router:
    router = Router()

    @router.register(event, *actions)
    def handler(ev: Event, deps: object) -> Outcome:
        calls.append(name)
        return Outcome(name)

    return router


def test_dispatches_by_event_and_action_across_merged_routers() -> None:
    calls: list[str] = []
    root = Router(
        _router(calls, "pr-opened", "pull_request", "opened", "reopened"),
        _router(calls, "any-push", "push"),
        _router(calls, "pr-closed", "pull_request", "closed"),
    )
    root.dispatch(Event("pull_request", "d1", {"action": "reopened"}), None)
    root.dispatch(Event("push", "d2", {}), None)
    root.dispatch(Event("pull_request", "d3", {"action": "labeled"}), None)
    assert calls == ["pr-opened", "any-push"]
    assert root.handlers_for(Event("pull_request", "d4", {"action": "labeled"})) == []
    assert root.handlers_for(Event("issues", "d5", {"action": "opened"})) == []


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "payload has no repository.full_name"),
        ({"repository": []}, "payload has no repository.full_name"),
        ({"repository": {"full_name": 7}}, "repository.full_name has the wrong type"),
    ],
)
def test_field_names_what_is_missing(payload: dict, message: str) -> None:
    with pytest.raises(BadPayload, match=message):
        field(payload, "repository.full_name", str)


def test_field_rejects_booleans_for_integers() -> None:
    with pytest.raises(BadPayload):
        field({"number": True}, "number", int)
    assert field({"number": 3}, "number", int) == 3
