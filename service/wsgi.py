"""WSGI entrypoint for gunicorn: `gunicorn service.wsgi:app` (settings from COMPILE_CI_*)."""

from service.app import create_app
from service.config import Settings

app = create_app(Settings.from_env())
