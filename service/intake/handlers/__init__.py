"""Webhook handlers, one module per concern, merged into the root router here."""

from __future__ import annotations

from service.intake.handlers import check_runs, comments, installations, pull_requests, pushes
from service.intake.router import Router

root_router = Router(pull_requests.router, pushes.router, comments.router, check_runs.router, installations.router)
