"""How gunicorn serves the web app: one command line for the `web` command and the sandbox's stack.

Threaded workers (gthread): a client that announces a body and then sends it slowly holds one thread, not a
whole worker process, and the webhook cuts its body read at a deadline (service/intake/body.py). With sync
workers, two such clients kept a valid delivery waiting for 33 s (the worker's 30 s timeout).
"""

from __future__ import annotations

import sys

DEFAULT_THREADS = 32  # per worker: blocked threads cost little, and each slow client holds one for <= 10 s


def gunicorn_command(bind: str, workers: int, threads: int = DEFAULT_THREADS) -> list[str]:
    """The gunicorn command line; threads=0 selects the old sync workers (kept for the bench's comparison)."""
    worker = ["--worker-class", "gthread", "--threads", str(threads)] if threads > 0 else ["--worker-class", "sync"]
    return [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers), *worker,
            "--access-logfile", "-", "service.wsgi:app"]
