"""Settings from COMPILE_CI_* variables: defaults, every problem at once, secrets never shown."""

from pathlib import Path

import pytest

from service.config import ConfigError, Settings

KEY = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
MINIMAL = {"COMPILE_CI_WEBHOOK_SECRET": "hook-secret-value", "COMPILE_CI_GITHUB_APP_ID": "17",
           "COMPILE_CI_GITHUB_PRIVATE_KEY": KEY}


def test_defaults() -> None:
    settings = Settings.from_env(MINIMAL)
    assert settings.github_api_url == "https://api.github.com"
    assert settings.database_url == f"sqlite:///{Path('var').absolute() / 'compile-ci.sqlite3'}"
    assert settings.devices == ("cpu", "cuda")
    assert settings.visibility_timeout_seconds > settings.max_job_minutes * 60


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"COMPILE_CI_GITHUB_APP_ID": "seventeen", "COMPILE_CI_REDIS_URL": "http://x",
                           "COMPILE_CI_DEVICES": "cpu,tpu", "COMPILE_CI_GITHUB_THROTTLE": "maybe"})
    text = str(caught.value)
    for fragment in ("WEBHOOK_SECRET is required", "GITHUB_APP_ID must be an integer", "PRIVATE_KEY (or _FILE)",
                     "REDIS_URL must be", "DEVICES must list", "THROTTLE must be true or false"):
        assert fragment in text
    assert len(caught.value.problems) == 6


def test_private_key_from_file_and_unreadable_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key.pem"
    key_file.write_text(KEY)
    env = {**MINIMAL, "COMPILE_CI_GITHUB_PRIVATE_KEY": ""}
    assert Settings.from_env({**env, "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(key_file)}).github_private_key
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.from_env({**env, "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(tmp_path / "missing.pem")})


def test_secrets_never_appear_in_repr_or_errors() -> None:
    settings = Settings.from_env(MINIMAL)
    shown = repr(settings) + str(settings) + str(settings.webhook_secret) + f"{settings.github_private_key}"
    assert "hook-secret-value" not in shown and "AAAA" not in shown
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({**MINIMAL, "COMPILE_CI_GITHUB_PRIVATE_KEY": "not-a-key-but-secret"})
    assert "not-a-key-but-secret" not in str(caught.value)


def test_settings_are_frozen() -> None:
    settings = Settings.from_env(MINIMAL)
    with pytest.raises(AttributeError):
        settings.public_url = "http://elsewhere"  # type: ignore[misc]
