"""What `compile-ci repro` reads of a job: the commit, the failed tests with a repro, the requirements and the
wheels the job's environment was unpacked from (as JSON), and those wheels themselves, from the wheel store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, abort, jsonify, send_file

from runners.untrusted_files import is_regular, read_json_data
from service.web.browser.attempts import load_attempt
from service.web.browser.lookup import wiring
from service.wheel_store import SHA256, WHEEL_NAME, WHEELS_FILE, wheel_path
from suites.naming import sanitise_nodeid

blueprint = Blueprint("repro_info", __name__)
MAX_LIST_BYTES = 256 * 1024
MAX_WHEELS = 500


def listed_wheels(directory: Path) -> tuple[list[str], list[dict[str, Any]]] | None:
    """(requirements, wheels) from the attempt's wheels.json; None when it has none (an attempt from before it).
    Read as untrusted (an older attempt's job could have planted one): bounded, every field checked."""
    try:
        data = read_json_data(directory, WHEELS_FILE, MAX_LIST_BYTES)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("wheels"), list):
        return None
    requirements = [r[:500] for r in data.get("requirements") or [] if isinstance(r, str)][:MAX_WHEELS]
    wheels = [w for w in data["wheels"][:MAX_WHEELS] if isinstance(w, dict)
              and isinstance(w.get("name"), str) and WHEEL_NAME.fullmatch(w["name"])
              and isinstance(w.get("sha256"), str) and SHA256.fullmatch(w["sha256"])
              and isinstance(w.get("size"), int) and not isinstance(w.get("size"), bool)]
    return requirements, [{"name": w["name"], "sha256": w["sha256"], "size": w["size"]} for w in wheels]


@blueprint.get("/jobs/<job_id>/repro.json")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/repro.json")
def repro_info(job_id: str, number: int | None = None) -> Response:
    run, job, directory, _attempts = load_attempt(job_id, number)
    if not job.ran:
        abort(404)
    tests = []
    for result in wiring().store.results_of(job.id, job.attempt):
        name = sanitise_nodeid(result.nodeid)
        if result.outcome in ("failed", "error") and is_regular(directory, f"tests/{name}/repro.py"):
            tests.append({"name": name, "nodeid": result.nodeid, "repro": f"{job.base}/files/tests/{name}/repro.py"})
    listed = listed_wheels(directory)
    wheels = [{**w, "url": f"{job.base}/wheels/{w['name']}"} for w in listed[1]] if listed else None
    return jsonify(job=job.id, attempt=job.number, page=job.base, repository=run.repo_full_name,
                   clone_url=run.clone_url, pull_request=run.pr_number, head_sha=run.head_sha, suite=job.suite,
                   device=job.device, torch_version=job.torch_version, tests=tests,
                   requirements=listed[0] if listed else None, wheels=wheels)


@blueprint.get("/jobs/<job_id>/wheels/<name>")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/wheels/<name>")
def wheel(job_id: str, name: str, number: int | None = None) -> Response:
    run, job, directory, _attempts = load_attempt(job_id, number)
    listed = listed_wheels(directory) if job.ran else None
    found = next((w for w in listed[1] if w["name"] == name), None) if listed else None
    if found is None:
        abort(404)
    path = wheel_path(wiring().settings.artifacts_dir, run.repo_id, found["sha256"])
    if not is_regular(path.parent, path.name):
        abort(404)
    return send_file(path, mimetype="application/octet-stream", as_attachment=True, download_name=name,
                     max_age=0)
