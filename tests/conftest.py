"""Shared fixtures: a real Redis, the strict GitHub emulator, settings, signed webhook deliveries."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import APP_ID, app_keypair, free_port, wait_for_port


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis on loopback: COMPILE_CI_TEST_REDIS_URL (CI starts one), else a private redis-server."""
    if os.environ.get("COMPILE_CI_TEST_REDIS_URL"):
        yield os.environ["COMPILE_CI_TEST_REDIS_URL"].rstrip("/")
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is required (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc, "redis-server")
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


_db_counter = iter(range(1, 16))


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A clean Redis database for one test."""
    import redis

    url = f"{redis_server}/{next(_db_counter, 15)}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def app_keys() -> tuple[str, str]:
    return app_keypair()


@pytest.fixture
def emulator(app_keys: tuple[str, str]) -> Iterator[GitHubEmulator]:
    """The strict fake GitHub; any unknown route or invalid body fails the test."""
    with GitHubEmulator(app_id=APP_ID, public_key_pem=app_keys[1]) as fake:
        yield fake
        assert fake.errors == [], f"requests GitHub would not accept: {fake.errors}"


def make_settings(tmp_path: Path, redis_url: str, github_url: str, private_key: str, **extra: str) -> Settings:
    return Settings.from_env(settings_env(tmp_path, redis_url, github_url, private_key, **extra))


def settings_env(tmp_path: Path, redis_url: str, github_url: str, private_key: str, **extra: str) -> dict[str, str]:
    """The COMPILE_CI_* environment of a test's deployment (also for worker processes the test starts)."""
    return {
        "COMPILE_CI_WEBHOOK_SECRET": "test-webhook-secret",
        "COMPILE_CI_GITHUB_APP_ID": str(APP_ID),
        "COMPILE_CI_GITHUB_PRIVATE_KEY": private_key,
        "COMPILE_CI_GITHUB_API_URL": github_url,
        "COMPILE_CI_GITHUB_THROTTLE": "false",
        "COMPILE_CI_REDIS_URL": redis_url,
        "COMPILE_CI_DATA_DIR": str(tmp_path / "data"),
        "COMPILE_CI_PUBLIC_URL": "http://ci.example.test",
        "COMPILE_CI_CLONE_URL_TEMPLATE": (tmp_path / "repos").as_uri() + "/{full_name}",
        "COMPILE_CI_DEVICES": "cpu",
        # The pipeline tests run their own small suites from the host; the Docker runner has its own tests.
        "COMPILE_CI_RUNNER": "local",
        # One shard per job, as a deployment with one worker slot runs: sharding has its own tests (test_shards.py).
        "COMPILE_CI_MAX_SHARDS": "1",
        **extra,
    }


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Settings:
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0])


def pytest_collection_modifyitems(items: list[Any]) -> None:
    # The slow end-to-end tests run last, so a quick failure elsewhere shows first.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
