"""create_app: the only wiring point of the web process."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Flask

from service.celery_app import CeleryQueue, create_celery
from service.config import Settings
from service.intake import webhook
from service.intake.handlers import root_router
from service.intake.handlers.deps import HandlerDeps
from service.intake.router import Router
from service.observability.web import install as install_observability
from service.store import Store
from service.store.claims import Claims
from service.web import outage, pages


@dataclass(frozen=True)
class Wiring:
    settings: Settings
    store: Store
    claims: Claims
    router: Router
    handler_deps: HandlerDeps


def create_app(settings: Settings) -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
    store = Store(settings.database_url)
    celery = create_celery(settings)
    queue = CeleryQueue(celery)
    app.extensions["compile_ci"] = Wiring(
        settings=settings,
        store=store,
        claims=Claims(settings.redis_url, settings.delivery_ttl_seconds),
        router=root_router,
        handler_deps=HandlerDeps(store=store, queue=queue, app_id=settings.github_app_id,
                                 devices=settings.devices),
    )
    app.register_blueprint(webhook.blueprint)
    app.register_blueprint(pages.blueprint)
    install_observability(app, settings, store, celery)
    outage.install(app)
    logging.getLogger("service").setLevel(logging.INFO)
    return app
