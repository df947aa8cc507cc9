"""Browser fixtures: settings with sign-in through the emulator's OAuth routes, a store, a Flask client."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.github_emulator.oauth import CLIENT_ID, CLIENT_SECRET
from service.store import Store
from service.web.app import create_app
from tests.conftest import make_settings


def browser_settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, private_key: str,
                     public_url: str = "http://ci.example.test") -> Settings:
    return make_settings(tmp_path, redis_url, emulator.url, private_key,
                         COMPILE_CI_GITHUB_CLIENT_ID=CLIENT_ID, COMPILE_CI_GITHUB_CLIENT_SECRET=CLIENT_SECRET,
                         COMPILE_CI_SESSION_SECRET="test-session-secret", COMPILE_CI_GITHUB_WEB_URL=emulator.url,
                         COMPILE_CI_PUBLIC_URL=public_url)


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Settings:
    return browser_settings(tmp_path, redis_url, emulator, app_keys[0])


@pytest.fixture
def store(settings: Settings) -> Store:
    return Store(settings.database_url)


@pytest.fixture
def app(settings: Settings) -> Flask:
    return create_app(settings)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
