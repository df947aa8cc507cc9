"""Check runs the way GitHub keeps them: creation, merging PATCHes, appended annotations, list-for-ref."""

from __future__ import annotations

import copy
from typing import Any

from . import resources
from .state import CheckRunRecord, EmulatorState, iso, utc_now

_ACTIONS_ONLY_STATUSES = ("waiting", "requested", "pending")
# GitHub answers 422 "summary exceeds a maximum bytesize of 65535": the documented "characters" are UTF-8 bytes.
MAX_OUTPUT_BYTES = 65_535
MAX_ANNOTATION_BYTES = 64 * 1024  # message and raw_details: "The maximum size is 64 KB"
MAX_ANNOTATION_TITLE = 255


def rule_errors(body: dict[str, Any], *, creating: bool) -> list[str]:
    """Rules GitHub states in the operation's prose rather than in its schema."""
    errors = []
    if body.get("status") in _ACTIONS_ONLY_STATUSES:
        errors.append("status: only GitHub Actions can set a status of waiting, pending or requested")
    if body.get("conclusion") == "stale":
        errors.append("conclusion: you cannot change a check run conclusion to stale, only GitHub can set this")
    if "completed_at" in body and "conclusion" not in body:
        errors.append("conclusion: required if you provide completed_at")
    output = body.get("output")
    if isinstance(output, dict):
        if not creating and "title" not in output:
            errors.append("output/title: required (the PATCH description marks it **Required**)")
        errors += [f"output/{key}: exceeds a maximum bytesize of {MAX_OUTPUT_BYTES}" for key in ("summary", "text")
                   if len(str(output.get(key) or "").encode()) > MAX_OUTPUT_BYTES]
        errors += _annotation_errors(output.get("annotations", []))
    return errors


def _annotation_errors(annotations: Any) -> list[str]:
    errors = []
    for index, note in enumerate(annotations if isinstance(annotations, list) else []):
        has_columns = isinstance(note, dict) and ("start_column" in note or "end_column" in note)
        if has_columns and note.get("start_line") != note.get("end_line"):
            errors.append(f"output/annotations/{index}: start_column and end_column need start_line == end_line")
        if not isinstance(note, dict):
            continue
        if len(str(note.get("title", ""))) > MAX_ANNOTATION_TITLE:
            errors.append(f"output/annotations/{index}/title: longer than {MAX_ANNOTATION_TITLE} characters")
        errors += [f"output/annotations/{index}/{key}: larger than 64 KB" for key in ("message", "raw_details")
                   if len(str(note.get(key, "")).encode()) > MAX_ANNOTATION_BYTES]
    return errors


def create(state: EmulatorState, full_name: str, body: dict[str, Any]) -> dict[str, Any]:
    with state.lock:
        run_id = state.next_id("check_run")
        suite, _ = state.suite_for(full_name, body["head_sha"])
        url = f"{state.base_url}/repos/{full_name}/check-runs/{run_id}"
        app = resources.app(state)
        run: dict[str, Any] = state.example("check-run")
        run.pop("deployment", None)
        run.update(id=run_id, node_id=resources.node_id("CheckRun", run_id), name=body["name"],
                   head_sha=body["head_sha"], url=url, html_url=f"{state.base_url}/{full_name}/runs/{run_id}",
                   details_url=app["external_url"], external_id="", status="queued", conclusion=None,
                   started_at=iso(utc_now()), completed_at=None, check_suite={"id": suite.id}, app=app,
                   pull_requests=[], output={"title": None, "summary": None, "text": None,
                                             "annotations_count": 0, "annotations_url": f"{url}/annotations"})
        record = CheckRunRecord(full_name, run)
        state.check_runs[run_id] = record
        _apply(record, body)
        return copy.deepcopy(record.run)


def update(state: EmulatorState, record: CheckRunRecord, body: dict[str, Any]) -> dict[str, Any]:
    with state.lock:
        _apply(record, body)
        return copy.deepcopy(record.run)


def _apply(record: CheckRunRecord, body: dict[str, Any]) -> None:
    run = record.run
    for key in ("name", "details_url", "external_id", "started_at"):
        if key in body:
            run[key] = body[key]
    if "output" in body:
        # GitHub replaces the output text on every PATCH but appends annotations to the ones it already has.
        record.annotations += body["output"].get("annotations", [])
        run["output"].update({key: body["output"].get(key) for key in ("title", "summary", "text")},
                             annotations_count=len(record.annotations))
    if "actions" in body:
        record.actions = list(body["actions"])
    # "Providing conclusion will automatically set the status parameter to completed."
    status = "completed" if "conclusion" in body else body.get("status")
    if status == "completed":
        run.update(status=status, conclusion=body["conclusion"],
                   completed_at=body.get("completed_at", run["completed_at"] or iso(utc_now())))
    elif status is not None:
        run.update(status=status, conclusion=None, completed_at=None)
    record.history.append((run["status"], run["conclusion"]))


def list_for_ref(state: EmulatorState, full_name: str, ref: str, query: dict[str, str]) -> list[dict[str, Any]]:
    """Check runs on `ref` (a SHA, or the head branch of a registered pull), oldest first."""
    with state.lock:
        shas = {ref} | {p.head_sha for p in state.pulls.values() if p.full_name == full_name and p.head_ref == ref}
        runs = [copy.deepcopy(r.run) for _, r in sorted(state.check_runs.items())
                if r.full_name == full_name and r.run["head_sha"] in shas]
    if query.get("filter", "latest") == "latest":
        newest = {run["name"]: run["id"] for run in runs}
        runs = [run for run in runs if newest[run["name"]] == run["id"]]
    if "check_name" in query:
        runs = [run for run in runs if run["name"] == query["check_name"]]
    if "status" in query:
        runs = [run for run in runs if run["status"] == query["status"]]
    if "app_id" in query:
        runs = [run for run in runs if str(run["app"]["id"]) == query["app_id"]]
    return runs
