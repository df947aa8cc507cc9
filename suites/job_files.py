"""Writing the job's files beside the tests, not in their way: one writer thread, and `progress.json`.

The tests' own thread hands each file over as text already made and goes on (the test's teardown and reporting);
the writer thread writes them in the order given (a rerun's cleanup before its new files). Before the next test
starts, `drain` waits for every file of the previous one, so a job killed in a test (its memory, a crash) has
written every finished test's files, as the service's partial results expect; `close` waits at the session's end.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest


class BackgroundFiles:
    def __init__(self) -> None:
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except OSError as exc:  # a full disk must not end the run: the files are lost, the tests are not
                self.errors.append(str(exc))
            finally:
                self._tasks.task_done()

    def submit(self, task: Callable[[], None]) -> None:
        if self._thread is None:  # started on first use: a run that writes nothing starts no thread
            self._thread = threading.Thread(target=self._work, name="compile-ci-artifacts", daemon=True)
            self._thread.start()
        self._tasks.put(task)

    def write(self, path: Path, text: str) -> None:
        self.submit(lambda: path.write_text(text))

    def replace(self, path: Path, text: str) -> None:
        """Written to a temporary name and renamed, so a reader polling it never sees half a file."""
        def task() -> None:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        self.submit(task)

    def drain(self) -> None:
        """Returns once every file handed over so far is written."""
        if self._thread is not None:
            self._tasks.join()

    def close(self) -> None:
        if self._thread is not None:
            self._tasks.put(None)
            self._thread.join()
            self._thread = None
        for error in self.errors[:5]:
            print(f"compile-ci: an artifact file could not be written: {error}", file=sys.stderr)
        self.errors.clear()


class ProgressWriter:
    """`progress.json` (done, total, current) for the service's live check-run progress: once as a test starts
    (the tests done before it, and its node id) and once when all are done."""

    def __init__(self, output_dir: Path, files: BackgroundFiles) -> None:
        self.path = output_dir / "progress.json"
        self.files = files
        self.total = 0
        self.done = 0
        self.session: pytest.Session | None = None

    def _write(self, current: str) -> None:
        if self.session is not None:  # a shard that takes its tests while it runs: the total grows (claiming.py)
            self.total = max(self.total, len(self.session.items))
        self.files.replace(self.path, json.dumps({"done": self.done, "total": self.total, "current": current}))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session = session
        self.total = len(session.items)
        self._write("")

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.files.drain()  # the previous test's files, before this one can crash the process
        self._write(nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self.done += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.total:
            self._write("")
        self.files.close()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.files.close()  # a session that ended without sessionfinish (an internal error) still writes its files
