"""The job log's sections: the markers that fold a job's log into "Collect tests", "Run tests" and "Results" in
the service's log viewer (the same `::group::` lines as GitHub Actions; the install step prints the first one)."""

from __future__ import annotations

import pytest

GROUP = "::group::"


class LogSections:
    """Prints a group marker through pytest's terminal writer as each phase of the session begins."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def _group(self, title: str) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.ensure_newline()
            terminal.write_line(GROUP + title)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._group("Collect tests")  # before pytest's "test session starts" header (its reporter runs last)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        # Collection errors end the session before any test: their report belongs under Results.
        if not (session.testsfailed and not session.config.option.continue_on_collection_errors):
            self._group("Run tests")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._group("Results")  # pytest's failures, warnings and summary follow (printed after this hook)
