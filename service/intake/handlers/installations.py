"""Installations: which repositories the App is on, so work for removed ones is dropped."""

from __future__ import annotations

import logging
from typing import Any

from service.intake.handlers.deps import HandlerDeps
from service.intake.router import BadPayload, Event, Outcome, Router, field
from service.intake.shapes import repository_name_problem

router = Router()
log = logging.getLogger(__name__)


def _names(repos: Any) -> list[str]:
    """The repositories' full names; BadPayload before anything is recorded if one is not a GitHub name."""
    names = [r.get("full_name") for r in repos or [] if isinstance(r, dict)] if isinstance(repos, list) else []
    for name in names:
        problem = repository_name_problem(name)
        if problem:
            raise BadPayload(f"payload field repositories[].full_name {problem}")
    return names


@router.register("installation", "created", "deleted", "suspend", "unsuspend")
def installation_changed(event: Event, deps: HandlerDeps) -> Outcome:
    installation_id = field(event.payload, "installation.id", int)
    installed = event.action in ("created", "unsuspend")
    # suspend/unsuspend payloads carry no repository list: use the one we recorded.
    names = _names(event.payload.get("repositories")) or deps.store.repos_of_installation(installation_id)
    for name in names:
        deps.store.set_installed(name, installation_id, installed)
    log.info("installation %s %s: %s", installation_id, event.action, ", ".join(names) or "no repositories")
    return Outcome(f"installation {installation_id} {event.action}: {len(names)} repositories")


@router.register("installation_repositories", "added", "removed")
def repositories_changed(event: Event, deps: HandlerDeps) -> Outcome:
    installation_id = field(event.payload, "installation.id", int)
    added = _names(event.payload.get("repositories_added"))
    removed = _names(event.payload.get("repositories_removed"))
    for name in added:
        deps.store.set_installed(name, installation_id, True)
    for name in removed:
        deps.store.set_installed(name, installation_id, False)
    log.info("installation %s: added %s, removed %s", installation_id, added, removed)
    return Outcome(f"installation {installation_id}: {len(added)} added, {len(removed)} removed")
