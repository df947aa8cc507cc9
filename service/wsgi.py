"""WSGI entrypoint for gunicorn: `gunicorn service.wsgi:app` (settings from COMPILE_CI_*)."""

from service.config import Settings
from service.web.app import create_app

app = create_app(Settings.from_env())
