"""JSON log lines: one object a line, with the ids bound to the request or task that logged it, and only those."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from service.config import ConfigError, Settings
from service.observability import logs


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("service.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_line_is_one_json_object_with_the_bound_ids(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logs.clear()
    logs.bind(delivery_id="d-1", run_id="r-1")
    logs.bind(job_id="j-1", attempt=2)
    logger.info("job %s started\nwith a newline", "j-1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("it broke")
    logs.clear()
    logger.info("after")
    first, second, third = lines(stream)
    assert first["message"] == "job j-1 started\nwith a newline" and first["level"] == "info"
    assert {k: first[k] for k in ("delivery_id", "run_id", "job_id", "attempt")} == {
        "delivery_id": "d-1", "run_id": "r-1", "job_id": "j-1", "attempt": 2}
    assert "RuntimeError: boom" in str(second["exc"]) and second["job_id"] == "j-1"
    assert "job_id" not in third and "delivery_id" not in third


def test_ids_bound_in_one_thread_never_reach_another(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logs.clear()
    bound, go = threading.Event(), threading.Event()

    def task() -> None:
        logs.bind(job_id="other-thread")
        bound.set()
        go.wait(5)
        logger.info("in the task")

    worker = threading.Thread(target=task)
    worker.start()
    bound.wait(5)
    logger.info("in the request")
    go.set()
    worker.join(5)
    by_message = {line["message"]: line for line in lines(stream)}
    assert "job_id" not in by_message["in the request"]
    assert by_message["in the task"]["job_id"] == "other-thread"


def test_an_explicit_extra_wins_over_the_context(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logs.clear()
    logs.bind(run_id="from-context")
    logger.info("outcome", extra={"run_id": "from-call"})
    logs.clear()
    assert lines(stream)[0]["run_id"] == "from-call"


def test_unknown_log_format_is_a_clear_configuration_error() -> None:
    env = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
           "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----x", "COMPILE_CI_LOG_FORMAT": "xml",
           "COMPILE_CI_METRICS_PORT": "-1"}
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    assert "COMPILE_CI_LOG_FORMAT must be text or json, got 'xml'" in error.value.problems
    assert "COMPILE_CI_METRICS_PORT must be at least 0, got -1" in error.value.problems
