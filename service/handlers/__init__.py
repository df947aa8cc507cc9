"""Webhook handlers, one module per concern, merged into the root router here."""

from __future__ import annotations

from service.handlers import pull_requests, pushes
from service.router import Router

root_router = Router(pull_requests.router, pushes.router)
